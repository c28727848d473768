"""Run as a script by test_distribution.py (logical devices must be set before TF starts).

Trains one step of a tiny BERT pretrainer on the same global batch under the default
strategy and under MirroredStrategy over 2 logical CPU devices; prints both losses and the
largest weight difference after the update as JSON.
"""

import json
import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from lmfactory.components.trainer.strategy import split_cpu_into_logical_devices  # noqa: E402

split_cpu_into_logical_devices(2)

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from lmfactory import models  # noqa: E402
from lmfactory.components.trainer.optimization import make_optimizer  # noqa: E402

BATCH, LENGTH, PREDICTIONS, VOCAB = 8, 16, 4, 50


def global_batch():
    rng = np.random.default_rng(0)
    token_ids = rng.integers(5, VOCAB, size=(BATCH, LENGTH)).astype("int32")
    padding_mask = np.ones((BATCH, LENGTH), dtype="int32")
    padding_mask[:, 12:] = 0
    # Unequal numbers of real predictions per example (and so per replica): the MLM mean
    # must divide by the GLOBAL weight sum to match one device.
    weights = np.zeros((BATCH, PREDICTIONS), dtype="float32")
    for row, count in enumerate([4, 4, 4, 4, 1, 2, 1, 1]):
        weights[row, :count] = 1.0
    x = {"token_ids": token_ids, "padding_mask": padding_mask,
         "segment_ids": (np.arange(LENGTH) >= 6).astype("int32")[None].repeat(BATCH, 0),
         "mask_positions": rng.integers(1, 12, size=(BATCH, PREDICTIONS)).astype("int32")}
    y = {"mlm": rng.integers(5, VOCAB, size=(BATCH, PREDICTIONS)).astype("int32"),
         "nsp": rng.integers(0, 2, size=(BATCH,)).astype("int32")}
    return x, y, {"mlm": weights}


def train_one_step(strategy, initial_weights):
    with strategy.scope():
        backbone = models.build("bert", "tiny", vocabulary_size=VOCAB, dropout=0.0,
                                max_sequence_length=LENGTH)
        model = models.get("bert").pretrainer("bert_mlm_nsp")(backbone)
        model.set_weights(initial_weights)
        model.compile(optimizer=make_optimizer(1e-2, total_steps=10, warmup_fraction=0.0))
    data = tf.data.Dataset.from_tensors(global_batch())
    history = model.fit(data, epochs=1, verbose=0)
    return float(history.history["loss"][0]), model.get_weights()


def main():
    keras.utils.set_random_seed(1)
    backbone = models.build("bert", "tiny", vocabulary_size=VOCAB, dropout=0.0,
                            max_sequence_length=LENGTH)
    initial = models.get("bert").pretrainer("bert_mlm_nsp")(backbone).get_weights()
    single_loss, single_weights = train_one_step(tf.distribute.get_strategy(), initial)
    mirrored = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    mirrored_loss, mirrored_weights = train_one_step(mirrored, initial)
    print(json.dumps({
        "replicas": mirrored.num_replicas_in_sync,
        "single_loss": single_loss, "mirrored_loss": mirrored_loss,
        "max_weight_difference": max(float(np.max(np.abs(a - b)))
                                     for a, b in zip(single_weights, mirrored_weights)),
        "max_weight_change": max(float(np.max(np.abs(a - b)))
                                 for a, b in zip(single_weights, initial)),
    }))


if __name__ == "__main__":
    main()
