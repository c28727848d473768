"""Masked-LM levers at small compute: output tying and masking rate, measured by what the
pretrained backbone buys at fine-tuning.

It reads a DAG run's `mlm` pretraining examples (PretrainingExampleGen's output, with its
vocabulary), pretrains a fresh RoBERTa backbone of the run's vocabulary on them with either
the paper's output layer tied to the input embedding (`RobertaPretrainer`) or an untied one
(keras-nlp's `MaskedLMHead` with its own [H, V] kernel), at the masking rate asked (the
records are masked dynamically, so the rate applies at read time). It reports the held-out
masked-LM loss and accuracy, the unigram loss of the same tokens (the trivial solution), the
geometry of the token-embedding rows by id band (mean norm and "cone": the norm of the mean
unit row), then fine-tunes the backbone and a fresh one with the architecture's classifier on
a class-stratified sample of labelled sentences and scores both on the eval file.

    python benchmarks/mlm_levers.py \
        --examples RUN/pipeline/PretrainingExampleGen/pretraining_examples/N \
        --train data/demo/sst2/train.tsv --eval data/demo/sst2/dev.tsv \
        --head untied --masked-lm-prob 0.4 --max-predictions 26 --steps 3000 --seeds 0,1
"""

import argparse
import glob
import json
import time

import keras
import numpy as np
import tensorflow as tf

from lmfactory import models
from lmfactory.components.pretraining_data import features
from lmfactory.components.trainer.optimization import WarmupLinearDecay, make_optimizer
from lmfactory.models.classifier_preprocessor import classifier_preprocessor
from lmfactory.models.encoder_utils import model_inputs
from lmfactory.models.roberta.roberta_backbone import (ROBERTA_BACKBONE_INPUTS,
                                                       roberta_kernel_initializer)
from lmfactory.models.task_model import MaskedLMPretrainer
from lmfactory.models.tied_output import MaskedLMHead
from lmfactory.models.tokenizers import load_tokenizer
from transfer_probe import embedding_geometry, read_tsv

ARCHITECTURE, PRESET = "roberta", "tiny"


class UntiedRobertaPretrainer(MaskedLMPretrainer):
    """`RobertaPretrainer` with an output layer of its own instead of the transposed
    input embedding: the ablation of Press & Wolf's tying."""

    backbone_inputs = ROBERTA_BACKBONE_INPUTS
    ties_output_embedding = False

    def __init__(self, backbone, **kwargs):
        head = MaskedLMHead(vocabulary_size=backbone.vocabulary_size,
                            intermediate_activation="gelu",
                            layer_norm_epsilon=backbone.layer_norm_epsilon,
                            kernel_initializer=roberta_kernel_initializer(),
                            name="masked_lm_head")
        super().__init__(backbone, head, **kwargs)

    def call(self, inputs, training=None, mask=None):
        return super().call(model_inputs(self, inputs), training=training, mask=mask)


def unigram_loss(files, config, vocabulary_size, eval_files) -> float:
    """Held-out NLL (nats) of a unigram model of the training tokens (add-0.5 counts)."""
    def tokens(pattern):
        data = features.make_dataset(pattern, config, batch_size=256, shuffle=False,
                                     repeat=False)
        return np.concatenate([x["token_ids"].numpy()[x["padding_mask"].numpy()]
                               for x, _, _ in data])
    counts = np.bincount(tokens(files), minlength=vocabulary_size) + 0.5
    return float(-np.log(counts[tokens(eval_files)] / counts.sum()).mean())


def pretrain(args, examples, config, vocabulary_size):
    keras.utils.set_random_seed(0)
    backbone = models.build(ARCHITECTURE, PRESET, vocabulary_size=vocabulary_size)
    task_cls = (models.get(ARCHITECTURE).pretrainer("mlm") if args.head == "tied"
                else UntiedRobertaPretrainer)
    task_model = task_cls(backbone)
    task_model.compile(optimizer=make_optimizer(args.learning_rate, args.steps))
    train = features.make_dataset(f"{examples}/Split-train/*", config, batch_size=32,
                                  shuffle=True, repeat=True, seed=0, training=True)
    held_out = features.make_dataset(f"{examples}/Split-eval/*", config, batch_size=32,
                                     shuffle=False, repeat=True)
    start = time.time()
    history = task_model.fit(train, steps_per_epoch=args.steps // 5, epochs=5, verbose=2,
                             validation_data=held_out, validation_steps=20)
    return backbone, {"val_mlm_loss": history.history["val_mlm_loss"],
                      "val_mlm_accuracy": history.history["val_mlm_accuracy"],
                      "seconds": time.time() - start}


def labelled_data(args, vocab_dir):
    """The train and eval TSVs, read and packed once: (train inputs, labels, eval inputs,
    eval labels)."""
    preprocess = classifier_preprocessor(vocab_dir, ARCHITECTURE, 64)

    def encode(texts):
        return {k: np.asarray(v) for k, v in preprocess((np.array(texts),)).items()}

    texts, labels = read_tsv(args.train)
    eval_texts, eval_labels = read_tsv(args.eval)
    return encode(texts), labels, encode(eval_texts), eval_labels


def finetune(weights, data, vocabulary_size, args, seed) -> float:
    """Dev accuracy after fine-tuning (AdamW, 10% warmup, linear decay, clipping at 1.0) on
    ``args.budget`` train sentences, half of each class, drawn with ``seed``."""
    train_x, labels, eval_x, eval_labels = data
    rng = np.random.default_rng(seed)
    per_class = args.budget // 2
    sample = np.concatenate([rng.choice(np.where(labels == c)[0], per_class, replace=False)
                             for c in (0, 1)])
    rng.shuffle(sample)

    keras.utils.set_random_seed(seed)
    backbone = models.build(ARCHITECTURE, PRESET, vocabulary_size=vocabulary_size)
    if weights is not None:
        backbone.set_weights(weights)
    classifier = models.get(ARCHITECTURE).head("classification")(backbone, num_classes=2)
    schedule = WarmupLinearDecay(args.finetune_lr, args.finetune_steps // 10,
                                 args.finetune_steps)
    classifier.compile(keras.optimizers.AdamW(schedule, weight_decay=0.01, clipnorm=1.0),
                       keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                       metrics=["accuracy"])
    data = tf.data.Dataset.from_tensor_slices(
        ({k: train_x[k][sample] for k in backbone.input}, labels[sample]))
    classifier.fit(data.shuffle(len(sample), seed=seed).repeat().batch(32),
                   steps_per_epoch=args.finetune_steps, epochs=1, verbose=0)
    return float(classifier.evaluate({k: eval_x[k] for k in backbone.input}, eval_labels,
                                     verbose=0)[1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", required=True,
                        help="a PretrainingExampleGen output folder of the mlm objective")
    parser.add_argument("--train", required=True)
    parser.add_argument("--eval", required=True)
    parser.add_argument("--head", choices=("tied", "untied"), default="tied")
    parser.add_argument("--masked-lm-prob", type=float)
    parser.add_argument("--max-predictions", type=int)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--budget", type=int, default=1000)
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--finetune-steps", type=int, default=320)
    parser.add_argument("--finetune-lr", type=float, default=3e-4)
    parser.add_argument("--json")
    args = parser.parse_args()

    (examples,) = glob.glob(args.examples)
    config = features.read_pretraining_config(examples)
    if config["objective"] != "mlm":
        raise SystemExit(f"--examples holds {config['objective']!r} records; this measures mlm")
    if args.masked_lm_prob is not None:
        config.update(masked_lm_prob=args.masked_lm_prob, dynamic_masking=True,
                      max_predictions_per_seq=args.max_predictions
                      or config["max_predictions_per_seq"])
    vocab_dir = features.vocabulary_dir(examples)
    vocabulary_size = load_tokenizer(vocab_dir).vocabulary_size()
    backbone, curve = pretrain(args, examples, config, vocabulary_size)
    result = {"head": args.head, "masked_lm_prob": config["masked_lm_prob"],
              "steps": args.steps, **curve,
              "unigram_loss": unigram_loss(f"{examples}/Split-train/*", config,
                                           vocabulary_size, f"{examples}/Split-eval/*"),
              "embeddings": embedding_geometry(backbone, bands=3), "finetuning": []}
    weights = backbone.get_weights()
    data = labelled_data(args, vocab_dir)
    for seed in map(int, args.seeds.split(",")):
        result["finetuning"].append({
            "seed": seed, "pretrained": finetune(weights, data, vocabulary_size, args, seed),
            "fresh": finetune(None, data, vocabulary_size, args, seed)})
    print(json.dumps(result, indent=1))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(result, out, indent=1)


if __name__ == "__main__":
    main()
