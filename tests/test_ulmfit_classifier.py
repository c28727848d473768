"""ULMFiT classifier fine-tuning (Howard & Ruder 2018 §3.3): how the reference
implementation's optimizer and head behave where Keras's defaults differ."""

import keras
import numpy as np
import tensorflow as tf

from lmfactory.models.awd_lstm import AwdLstmBackbone, UlmfitClassifier
from lmfactory.models.awd_lstm.ulmfit_schedule import adam_restart_factors

VOCAB = 30
TINY = dict(vocabulary_size=VOCAB, num_layers=2, embedding_dim=6, lstm_units=8,
            max_sequence_length=16)


def tiny_classifier(**kwargs):
    keras.utils.set_random_seed(3)
    backbone = AwdLstmBackbone(**TINY, dropout_weight=0.0, dropout_input=0.0,
                               dropout_hidden=0.0, dropout_embedding=0.0)
    return UlmfitClassifier(backbone, num_classes=2, dropout=0.0, hidden_dropout=0.0,
                            **kwargs)


def data(rows=8, length=6):
    rng = np.random.default_rng(0)
    x = {"token_ids": rng.integers(1, VOCAB, (rows, length)).astype("int32"),
         "padding_mask": np.ones((rows, length), "int32")}
    x["padding_mask"][1::2, 4:] = 0
    return x, np.arange(rows) % 2


def test_a_group_unfrozen_late_starts_adams_bias_correction_afresh():
    # Gradual unfreezing (§3.3): lstm_1 (group 2 of embedding, lstm_0, lstm_1, head) starts
    # training at step 20. Its Adam moments are empty then; the reference's per-parameter
    # Adam makes its first update that of a fresh Adam, lr * g / |g| = lr per weight (at
    # its discriminative rate lr / 2.6), not 3 sqrt(1 - beta_2^21) = 1.3 times that
    # with the global step's bias correction (-> 3 times as the step count grows).
    period, learning_rate = 20, 1e-3
    classifier = tiny_classifier(unfreeze_every=period)
    classifier.compile(optimizer=keras.optimizers.Adam(learning_rate, beta_1=0.7,
                                                       beta_2=0.99),
                       loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x, y = data()
    train_step = tf.function(classifier.train_step)
    for _ in range(period):
        train_step((x, y))
    lstm_1 = classifier.layer_groups()[2]
    before = [np.asarray(v).copy() for v in lstm_1]
    train_step((x, y))
    largest = max(np.abs(np.asarray(v) - b).max() for v, b in zip(lstm_1, before))
    np.testing.assert_allclose(largest, learning_rate / 2.6, rtol=0.02)
    # The factor is 1 for a group trained from the first step and tends to 1 for all.
    factors = [float(f) for f in adam_restart_factors(10_000, 4, period, 0.7, 0.99)]
    np.testing.assert_allclose(factors, 1.0, rtol=1e-6)
    first = [float(f) for f in adam_restart_factors(2 * period, 4, period, 0.7, 0.99)]
    np.testing.assert_allclose(first[3], 1.0)
    np.testing.assert_allclose(first[1], np.sqrt(0.01) / 0.3 / (
        np.sqrt(1 - 0.99 ** (2 * period + 1)) / (1 - 0.7 ** (2 * period + 1))), rtol=1e-5)


def test_head_batch_norm_statistics_follow_the_features_within_two_hundred_steps():
    # The reference head's BatchNorm1d (momentum 0.1 of each batch): after 200 training
    # steps on the same batch, the evaluation-time statistics are that batch's, so the
    # classifier evaluates as it trained. Keras's default momentum (0.99) still holds
    # 0.99^200 = 0.13 of the initial variance 1 against pooled LSTM features whose
    # variances are ~1e-5 here (~1e-3 for the pretrained small AWD-LSTM on SST-2).
    classifier = tiny_classifier()
    x, _ = data()

    @tf.function
    def train_call():
        return classifier(x, training=True)

    for _ in range(200):
        training_logits = train_call()
    np.testing.assert_allclose(np.asarray(classifier(x, training=False)),
                               np.asarray(training_logits), rtol=0.05, atol=0.02)
