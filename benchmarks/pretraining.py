"""Pretraining throughput: this project's BERT (MLM + NSP), RoBERTa-style MLM and GPT-2
(causal LM) training steps against keras-hub's `BertMaskedLM` and `GPT2CausalLM` at the
same sizes, on the same batches, in the same run.

    .venv/bin/python benchmarks/pretraining.py                 # about 6 minutes on 2 cores
    .venv/bin/python benchmarks/pretraining.py --quick         # smoke run, under a minute
    .venv/bin/python benchmarks/pretraining.py --strategy mirrored          # several GPUs
    .venv/bin/python benchmarks/pretraining.py --strategy tpu --tpu NAME    # a Cloud TPU
    .venv/bin/python benchmarks/pretraining.py --configs BERT-small --loss-steps 30
        # one configuration (all its variants) and the bf16 loss curves only

What runs. Each configuration builds every contender with random weights (dropout 0.1, as
in pretraining) and compiles it with AdamW, lr 1e-4, weight decay 0.01: the project's
models with the project's AdamW (the trainer's; its update is TF's fused Adam kernel),
keras-hub's with Keras' AdamW, and the "(Keras AdamW)" rows are the project's model with
Keras' AdamW, which separates the model's share of the gain from the optimiser's; keras-hub's tasks keep their own default loss and weighted accuracy metric, ours
compute their own loss and metrics (`compute_loss`, CONTRACTS §3). All contenders of a
configuration read one tf.data pipeline of synthetic batches (`encoder_data` /
`decoder_data`: the same token ids, padding, segment ids, masked positions, targets and
weights, repeated and prefetched), mapped to each model's input layout.

* BERT-mini (4 layers, hidden 256, 4 heads, FFN 1024) and BERT-small (4, 512, 8, 2048):
  vocabulary 30522, batch 32, sequence 128, 20 masked-LM predictions per sequence (BERT's
  `max_predictions_per_seq` at 128). Contenders: "project MLM+NSP" (`BertPretrainer`),
  "project MLM" (the project's MLM-only objective, `RobertaPretrainer` on a
  `RobertaBackbone` of the same sizes; BERT registers only MLM + NSP) and "keras-hub MLM"
  (`BertBackbone` + `BertMaskedLM`; keras-hub has no NSP head).
* GPT-2-small shape (12 layers, hidden 768, 12 heads, FFN 3072, vocabulary 50257), batch
  4, sequence 128: "project CLM" (`GPT2CausalLM`) vs "keras-hub CLM" (`GPT2CausalLM`).
* Variants: "default" (TF graph), "xla" (`compile(jit_compile=True)`) and "bf16" (every
  layer built under the `mixed_bfloat16` policy, as the recipe's ``runtime.precision:
  mixed_bfloat16`` builds them, components/trainer/precision.py; bfloat16 matmuls use
  AMX or AVX512-BF16 on CPUs that have them). The default run times all three on
  BERT-mini, "default" and "bf16" on BERT-small, "default" on GPT-2.
* Loss curves (`pretraining_precision.py`): the project's BERT-small MLM + NSP trained
  ``--loss-steps`` steps (default 60) from the same seed in float32 and in bf16, and in
  float32 with other dropout draws (the noise), on Zipf-distributed ids.
* Scaling: BERT-mini at sequence length 32 x scale (scales 1, 4, 16: 32, 128, 512) with
  4096 tokens per batch (batch 128, 32, 8) and 15% of the positions predicted, so only the
  length changes the work per token (attention grows with T).
* Output-layer micro-benchmark: forward + backward of the output projection tied to the
  token embedding, called as keras-nlp's layer does it (`token_embedding(h, reverse=True)`
  on [B, T, H]) and as the project now does (`tied_logits`, models/tied_output.py),
  at BERT-mini's and GPT-2's shapes.

Timing: every model runs `fit` for 2 warm-up steps (tracing, XLA compilation), then the
contenders of a configuration take turns, 3 rounds of one step each (so a burst of load
from other processes hits all of them alike); a callback times each step and the figure is
the fastest step (the least disturbed on a shared machine). tokens/s = batch x sequence /
step time (padding positions included: they are computed).

``--quick`` runs the same code on 2-layer, width-128 stand-ins ("BERT-tiny", "GPT-2-tiny",
full vocabularies), default variant only, two scaling points: a smoke check, not figures.

FLOPs: model FLOPs per trained token = 6 N + 12 L T d + output layer, with N the
non-embedding parameters of the Transformer blocks, L layers, T the sequence length, d the
width (Kaplan et al. 2020 / PaLM's 6N + 12LTd: forward and backward matmuls of the
weights and of the attention scores); the output layer is 6 d V per predicted position
(all T positions for the causal LM; P / T of them plus the head's d x d transform for the
MLM head). Achieved FLOP/s = FLOPs per token x tokens/s, shown as a fraction of this
machine's dense-matmul throughput measured at the start and the end of the run, the higher
of the two (`common.matmul_peak_flops`, float32; bfloat16 rows against the bfloat16 peak).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import common  # noqa: E402
import pretraining_precision  # noqa: E402
import keras  # noqa: E402
import keras_hub  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from lmfactory import models  # noqa: E402
from lmfactory.components.trainer.optimization import AdamW  # noqa: E402
from lmfactory.components.trainer.precision import precision_policy  # noqa: E402
from lmfactory.components.trainer.strategy import make_strategy  # noqa: E402
from lmfactory.models.gpt2.gpt2_causal_lm import tied_logits  # noqa: E402

BERT_VOCABULARY = 30522
GPT2_VOCABULARY = 50257
SHAPES = {
    "BERT-mini": dict(num_layers=4, hidden_dim=256, num_heads=4, intermediate_dim=1024,
                      vocabulary_size=BERT_VOCABULARY),
    "BERT-small": dict(num_layers=4, hidden_dim=512, num_heads=8, intermediate_dim=2048,
                       vocabulary_size=BERT_VOCABULARY),
    "GPT-2-small": dict(num_layers=12, hidden_dim=768, num_heads=12, intermediate_dim=3072,
                        vocabulary_size=GPT2_VOCABULARY),
    # --quick stand-ins: the same code paths at a fraction of the work.
    "BERT-tiny": dict(num_layers=2, hidden_dim=128, num_heads=2, intermediate_dim=512,
                      vocabulary_size=BERT_VOCABULARY),
    "GPT-2-tiny": dict(num_layers=2, hidden_dim=128, num_heads=2, intermediate_dim=512,
                       vocabulary_size=GPT2_VOCABULARY),
}
VARIANTS = {"default": (False, "float32"), "xla": (True, "float32"),
            "bf16": (False, "mixed_bfloat16")}
ENCODER_CONTENDERS = ("project MLM+NSP", "project MLM", "keras-hub MLM")
DECODER_CONTENDERS = ("project CLM", "keras-hub CLM")
SCALING_CONTENDERS = ("project MLM+NSP", "keras-hub MLM")
PEERS = {"project MLM+NSP": "keras-hub MLM", "project MLM": "keras-hub MLM",
         "project CLM": "keras-hub CLM", "project MLM+NSP (Keras AdamW)": "keras-hub MLM",
         "project CLM (Keras AdamW)": "keras-hub CLM"}


@dataclasses.dataclass
class Setup:
    """One measured configuration: a model ``shape`` (key of SHAPES), ``batch`` x
    ``seq_len`` tokens a step, ``predictions`` masked-LM slots per sequence (encoders; 0 for
    a causal LM, which predicts every position), and the contenders timed under each
    variant (``{variant: (contender, ...)}``)."""
    shape: str
    batch: int
    seq_len: int
    predictions: int
    contenders: dict

    @property
    def decoder(self) -> bool:
        return self.predictions == 0

    @property
    def label(self) -> str:
        return f"{self.shape} b{self.batch} T{self.seq_len}"


# --------------------------------------------------------------------------- data


def encoder_data(batch: int, seq_len: int, predictions: int, vocabulary: int,
                 pool_batches: int = 4, seed: int = 0,
                 zipf: float | None = None) -> tf.data.Dataset:
    """Synthetic masked-LM + NSP batches in the project's layout (CONTRACTS §3):
    x = {token_ids, padding_mask (bool), segment_ids, mask_positions}, y = {mlm [B, P],
    nsp [B]}, sample_weight = {mlm [B, P]}. Sequences hold [CLS] A [SEP] B [SEP] with a
    real length between T/2 and T (then padding); about 15% of the real positions are
    predicted, the rest of the P slots are padding predictions (position 0, weight 0).
    ``pool_batches`` distinct batches repeat forever, prefetched. ``zipf``: draw the ids
    from a Zipf distribution with that exponent (a learnable unigram distribution, as in
    text) instead of uniformly."""
    rng = np.random.default_rng(seed)
    count = batch * pool_batches
    token_ids = np.zeros((count, seq_len), np.int32)
    segment_ids = np.zeros((count, seq_len), np.int32)
    positions = np.zeros((count, predictions), np.int32)
    weights = np.zeros((count, predictions), np.float32)
    for row in range(count):
        length = int(rng.integers(max(4, seq_len // 2), seq_len + 1))
        if zipf:
            token_ids[row, :length] = 1000 + (rng.zipf(zipf, length) - 1) % (vocabulary - 1000)
        else:
            token_ids[row, :length] = rng.integers(1000, vocabulary, length)
        middle = length // 2
        token_ids[row, [0, middle, length - 1]] = [101, 102, 102]  # [CLS], [SEP], [SEP]
        segment_ids[row, middle + 1:length] = 1
        chosen = min(predictions, max(1, round(0.15 * length)), length - 2)
        picked = np.sort(rng.choice(np.arange(1, length - 1), chosen, replace=False))
        positions[row, :chosen], weights[row, :chosen] = picked, 1.0
    labels = np.take_along_axis(token_ids, positions, axis=1)
    x = {"token_ids": token_ids, "padding_mask": token_ids > 0, "segment_ids": segment_ids,
         "mask_positions": positions}
    y = {"mlm": labels, "nsp": rng.integers(0, 2, count).astype(np.int32)}
    data = tf.data.Dataset.from_tensor_slices((x, y, {"mlm": weights}))
    return data.repeat().batch(batch, drop_remainder=True).prefetch(tf.data.AUTOTUNE)


def decoder_data(batch: int, seq_len: int, vocabulary: int, pool_batches: int = 4,
                 seed: int = 0) -> tf.data.Dataset:
    """Synthetic causal-LM batches in the project's layout (CONTRACTS §3 ``causal_lm``):
    blocks of T + 1 random ids, x = {token_ids = block[:-1], padding_mask (all true: packed
    blocks)}, y = block[1:], sample_weight = ones [B, T]; repeated, prefetched."""
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, vocabulary, (batch * pool_batches, seq_len + 1)).astype(np.int32)
    x = {"token_ids": blocks[:, :-1], "padding_mask": np.ones_like(blocks[:, :-1], bool)}
    data = tf.data.Dataset.from_tensor_slices(
        (x, blocks[:, 1:], np.ones(blocks[:, 1:].shape, np.float32)))
    return data.repeat().batch(batch, drop_remainder=True).prefetch(tf.data.AUTOTUNE)


def contender_data(contender: str, data: tf.data.Dataset) -> tf.data.Dataset:
    """``data`` in the layout ``contender`` trains on: keras-hub's `BertMaskedLM` takes
    y = mlm ids and sample_weight = mlm weights; the project's MLM-only objective takes
    y = {"mlm"} (its model drops the extra `segment_ids`); the rest take it as is."""
    if contender == "keras-hub MLM":
        return data.map(lambda x, y, w: (x, y["mlm"], w["mlm"]),
                        num_parallel_calls=tf.data.AUTOTUNE)
    if contender == "project MLM":
        return data.map(lambda x, y, w: (x, {"mlm": y["mlm"]}, w),
                        num_parallel_calls=tf.data.AUTOTUNE)
    return data


def pipeline_batches_per_second(data: tf.data.Dataset, batches: int = 200) -> float:
    """How fast the input pipeline alone yields batches (to show it never starves a step)."""
    iterator = iter(data)
    next(iterator)
    started = time.perf_counter()
    for _ in range(batches):
        next(iterator)
    return batches / (time.perf_counter() - started)


# --------------------------------------------------------------------------- models


KERAS_OPTIMIZER = " (Keras AdamW)"  # suffix: a project model compiled with Keras' AdamW


def build_contender(contender: str, shape: dict, seq_len: int):
    """An uncompiled task model for ``contender`` at ``shape`` (random weights)."""
    contender = contender.removesuffix(KERAS_OPTIMIZER)
    max_length = max(512, seq_len)
    if contender == "project MLM+NSP":
        backbone = models.build("bert", "mini", **shape, max_sequence_length=max_length)
        return models.get("bert").pretrainer("bert_mlm_nsp")(backbone)
    if contender == "project MLM":
        backbone = models.build("roberta", "tiny", **shape, max_sequence_length=max_length)
        return models.get("roberta").pretrainer("mlm")(backbone)
    if contender == "keras-hub MLM":
        backbone = keras_hub.models.BertBackbone(**shape, max_sequence_length=max_length)
        return keras_hub.models.BertMaskedLM(backbone)
    max_length = max(1024, seq_len)
    if contender == "project CLM":
        return models.get("gpt2").pretrainer("causal_lm")(
            models.build("gpt2", "tiny", **shape, max_sequence_length=max_length))
    if contender == "keras-hub CLM":
        backbone = keras_hub.models.GPT2Backbone(**shape, max_sequence_length=max_length)
        return keras_hub.models.GPT2CausalLM(backbone)
    raise ValueError(f"unknown contender {contender!r}")


def contender_optimizer(contender: str):
    """AdamW, lr 1e-4, weight decay 0.01 on every variable: the project's own (fused
    update, components/trainer/optimization.py, what its trainer uses) for the project's
    models, Keras' for keras-hub's and for the ``KERAS_OPTIMIZER`` rows."""
    if contender.startswith("project") and not contender.endswith(KERAS_OPTIMIZER):
        return AdamW(learning_rate=1e-4, weight_decay=0.01)
    return keras.optimizers.AdamW(1e-4, weight_decay=0.01)


def compiled_contender(contender: str, shape: dict, seq_len: int, variant: str, strategy):
    """``build_contender`` under the variant's dtype policy (set as the recipe's
    ``runtime.precision`` sets it, `precision_policy`), compiled with its AdamW
    (`contender_optimizer`) inside ``strategy``'s scope (``jit_compile`` per the variant)."""
    jit_compile, policy = VARIANTS[variant]
    with precision_policy(policy), strategy.scope():
        model = build_contender(contender, shape, seq_len)
        model.compile(optimizer=contender_optimizer(contender), jit_compile=jit_compile)
    return model


def block_parameters(shape: dict) -> int:
    """N: the parameters of the Transformer blocks (attention, FFN, LayerNorms), those
    that every token multiplies; embeddings and the output layer are counted apart."""
    d, inner = shape["hidden_dim"], shape["intermediate_dim"]
    per_block = 4 * (d * d + d) + 2 * d * inner + inner + d + 2 * 2 * d
    return shape["num_layers"] * per_block


def flops_per_token(setup: Setup) -> float:
    """Training FLOPs per token: 6 N + 12 L T d + the output layer (see the module note)."""
    shape = SHAPES[setup.shape]
    d, vocabulary = shape["hidden_dim"], shape["vocabulary_size"]
    body = 6 * block_parameters(shape) + 12 * shape["num_layers"] * setup.seq_len * d
    if setup.decoder:
        return body + 6 * d * vocabulary
    return body + setup.predictions / setup.seq_len * 6 * (d * d + d * vocabulary)


# --------------------------------------------------------------------------- timing


class StepTimer(keras.callbacks.Callback):
    """Wall time of every training step of a `fit` (``seconds``)."""

    def __init__(self):
        super().__init__()
        self.seconds, self._started = [], 0.0

    def on_train_batch_begin(self, batch, logs=None):
        self._started = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        self.seconds.append(time.perf_counter() - self._started)


def time_steps(contenders: dict, warmup: int, steps: int, rounds: int) -> dict:
    """{name: fastest step in seconds} for ``contenders`` = {name: (model, dataset)}:
    ``warmup`` untimed steps each, then ``rounds`` turns of ``steps`` timed steps each."""
    for model, data in contenders.values():
        model.fit(data, steps_per_epoch=warmup, epochs=1, verbose=0)
    best = {name: float("inf") for name in contenders}
    for _ in range(rounds):
        for name, (model, data) in contenders.items():
            timer = StepTimer()
            model.fit(data, steps_per_epoch=steps, epochs=1, verbose=0, callbacks=[timer])
            best[name] = min(best[name], *timer.seconds)
    return best


def measure_setup(setup: Setup, strategy, timing: dict) -> list:
    """Times every (variant, contender) of ``setup``; one record (dict) per pair."""
    shape = SHAPES[setup.shape]
    if setup.decoder:
        data = decoder_data(setup.batch, setup.seq_len, shape["vocabulary_size"])
    else:
        data = encoder_data(setup.batch, setup.seq_len, setup.predictions,
                            shape["vocabulary_size"])
    records = []
    for variant, names in setup.contenders.items():
        contenders = {name: (compiled_contender(name, shape, setup.seq_len, variant, strategy),
                             contender_data(name, data)) for name in names}
        seconds = time_steps(contenders, **timing)
        for name in names:
            tokens = setup.batch * setup.seq_len / seconds[name]
            records.append({"config": setup.label, "variant": variant, "contender": name,
                            "step_s": seconds[name], "tokens_per_s": tokens,
                            "flops_per_s": tokens * flops_per_token(setup),
                            "params": contenders[name][0].count_params()})
        del contenders
        keras.backend.clear_session()
    return records


# --------------------------------------------------------------------------- micro


def output_layer_times(cases, repeats: int) -> list:
    """Forward + backward (gradient for the table and the input) of the tied output
    projection, keras-nlp's 3-D call vs `tied_logits`, for each (label, B, T, d, V) case.
    Rows: label, shape, both times (ms), their ratio and whether the logits are equal."""
    rows = []
    for label, batch, length, width, vocabulary in cases:
        embedding = keras_hub.layers.ReversibleEmbedding(vocabulary, width)
        embedding.build((None,))
        hidden = tf.random.normal((batch, length, width))

        def step(project):
            @tf.function
            def forward_backward():
                with tf.GradientTape() as tape:
                    tape.watch(hidden)
                    if project:
                        logits = tied_logits(embedding, hidden)
                    else:
                        logits = embedding(hidden, reverse=True)
                    loss = tf.reduce_sum(tf.square(logits))
                grads = tape.gradient(loss, [embedding.embeddings, hidden])
                return logits, grads[0]
            return forward_backward

        keras_step, project_step = step(False), step(True)
        # Same logits up to float32 rounding: the folded GEMM sums in another order.
        same = np.allclose(keras_step()[0].numpy(), project_step()[0].numpy(), rtol=1e-5,
                           atol=1e-5)
        keras_s = project_s = float("inf")
        for _ in range(repeats):  # alternating, so load from other processes hits both
            keras_s = min(keras_s, common.best_time(lambda: keras_step()[1].numpy(), 1, 0))
            project_s = min(project_s,
                            common.best_time(lambda: project_step()[1].numpy(), 1, 0))
        rows.append([label, f"[{batch}, {length}, {width}] x {vocabulary}", keras_s * 1e3,
                     project_s * 1e3, project_s / keras_s, "yes" if same else "NO"])
    return rows


# --------------------------------------------------------------------------- report


def loss_curves(shape_name: str, steps: int, strategy, seed: int = 0) -> dict:
    """float32 vs mixed_bfloat16 (and float32 with other dropout draws) loss curves of the
    project's MLM + NSP model at ``shape_name``, b32 T128, ``steps`` distinct batches of
    Zipf-distributed ids (`pretraining_precision.loss_curves`)."""
    shape = SHAPES[shape_name]
    data = encoder_data(32, 128, 20, shape["vocabulary_size"], pool_batches=steps, seed=seed,
                        zipf=1.1)

    def build(precision):
        model = build_contender("project MLM+NSP", shape, 128)
        model.compile(optimizer=contender_optimizer("project MLM+NSP"))
        return model

    return pretraining_precision.loss_curves(build, data, steps, seed, strategy)


def plan(scales, quick: bool):
    """(setups, scaling setups, micro cases, timing) for a full or ``quick`` run."""
    if quick:
        setups = [Setup("BERT-tiny", 8, 32, 5, {"default": SCALING_CONTENDERS}),
                  Setup("GPT-2-tiny", 2, 32, 0, {"default": DECODER_CONTENDERS})]
        base, tokens, scales = 8, 256, tuple(scales)[:2]
        cases = [("BERT-tiny MLM", 8, 5, 128, BERT_VOCABULARY)]
        timing = dict(warmup=1, steps=1, rounds=2)
    else:
        every_variant = {"default": ENCODER_CONTENDERS,
                         "xla": ("project MLM+NSP", "keras-hub MLM"),
                         "bf16": ("project MLM+NSP", "keras-hub MLM")}
        setups = [Setup("BERT-mini", 32, 128, 20, every_variant),
                  Setup("BERT-small", 32, 128, 20,
                        {"default": ("project MLM+NSP", "project MLM+NSP" + KERAS_OPTIMIZER,
                                     "keras-hub MLM"),
                         "bf16": ("project MLM+NSP", "keras-hub MLM")}),
                  Setup("GPT-2-small", 4, 128, 0,
                        {"default": DECODER_CONTENDERS + ("project CLM" + KERAS_OPTIMIZER,)})]
        base, tokens = 32, 4096
        cases = [("BERT-mini MLM", 32, 20, 256, BERT_VOCABULARY),
                 ("GPT-2-small CLM", 4, 128, 768, GPT2_VOCABULARY)]
        timing = dict(warmup=2, steps=1, rounds=3)
    shape = "BERT-tiny" if quick else "BERT-mini"
    scaling = [Setup(shape, max(1, tokens // (base * scale)), base * scale,
                     math.ceil(0.15 * base * scale), {"default": SCALING_CONTENDERS})
               for scale in scales]
    return setups, scaling, cases, timing


def measure_peaks(quick: bool) -> dict:
    """{"float32": FLOP/s, "bfloat16": FLOP/s}: this machine's dense-matmul throughput now
    (`common.matmul_peak_flops`; smaller matrices in a ``quick`` run)."""
    size, repeats = (1024, 2) if quick else (2048, 3)
    return {dtype: common.matmul_peak_flops(size, dtype, repeats=repeats)
            for dtype in ("float32", "bfloat16")}


def throughput_table(records: list, peaks: dict, title: str, note: str) -> common.Table:
    """One row per (config, variant, contender), with the ratio to its keras-hub peer."""
    by_key = {(r["config"], r["variant"], r["contender"]): r for r in records}
    rows = []
    for r in records:
        peak = peaks["bfloat16" if r["variant"] == "bf16" else "float32"]
        peer = by_key.get((r["config"], r["variant"], PEERS.get(r["contender"], "")))
        ratio = r["tokens_per_s"] / peer["tokens_per_s"] if peer else "-"
        rows.append([r["config"], r["variant"], r["contender"], r["step_s"] * 1e3,
                     r["tokens_per_s"], r["flops_per_s"] / 1e9,
                     100 * r["flops_per_s"] / peak, ratio])
    return common.Table(title, ["config", "variant", "model", "ms/step", "tokens/s",
                                "GFLOP/s", "% of peak", "ratio project/peer"], rows, note)


def variant_table(records: list) -> common.Table:
    """tokens/s of each non-default variant relative to the same model's default."""
    default = {(r["config"], r["contender"]): r["tokens_per_s"] for r in records
               if r["variant"] == "default"}
    rows = [[r["config"], r["contender"], r["variant"],
             r["tokens_per_s"] / default[(r["config"], r["contender"])]]
            for r in records if r["variant"] != "default"
            and (r["config"], r["contender"]) in default]
    return common.Table("Variants relative to the default TF graph (tokens/s ratio)",
                        ["config", "model", "variant", "variant / default"], rows,
                        "Above 1: the variant trains faster than the same model without it.")


def throughput_plot(path: str, records: list) -> str:
    """A PNG of horizontal bars, tokens/s (log scale), one group per (config, variant) and
    one bar per contender (one colour per contender)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    groups = list(dict.fromkeys((r["config"], r["variant"]) for r in records))
    colours = {name: f"C{i}" for i, name in
               enumerate(dict.fromkeys(r["contender"] for r in records))}
    figure = Figure(figsize=(7.5, 1.2 + 0.3 * len(records) + 0.2 * len(groups)), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot(1, 1, 1)
    position, ticks, labelled = 0.0, [], set()
    for config, variant in groups:
        members = [r for r in records if (r["config"], r["variant"]) == (config, variant)]
        ticks.append((position + (len(members) - 1) / 2, f"{config} {variant}"))
        for r in members:
            name = r["contender"]
            axes.barh(position, r["tokens_per_s"], 0.9, color=colours[name],
                      label=None if name in labelled else name)
            labelled.add(name)
            position += 1
        position += 0.6
    axes.set_yticks([tick for tick, _ in ticks], [label for _, label in ticks])
    axes.invert_yaxis()
    axes.set_xscale("log")
    axes.set_xlim(left=min(r["tokens_per_s"] for r in records) / 2)
    axes.set_xlabel("tokens/s (log scale)")
    axes.set_title("Pretraining throughput, project vs keras-hub")
    axes.grid(alpha=0.3, axis="x")
    axes.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(path)
    return path


def findings(records: list, scaling: list, micro: list, peaks: dict, pipeline: float,
             strategy, curves: dict | None = None) -> list:
    """Short sentences on what the figures show."""
    out = [f"Dense-matmul peak measured in this run: {peaks['float32'] / 1e9:.0f} GFLOP/s "
           f"float32, {peaks['bfloat16'] / 1e9:.0f} GFLOP/s bfloat16 "
           f"({type(strategy).__name__}, {strategy.num_replicas_in_sync} replica(s)); the "
           f"CPU is shared with other processes, so ratios from the same run matter more "
           f"than absolute figures."]
    by_key = {(r["config"], r["variant"], r["contender"]): r for r in records}
    for r in records:
        peer = by_key.get((r["config"], r["variant"], PEERS.get(r["contender"], "")))
        if peer and r["variant"] == "default":
            out.append(f"{r['config']}: {r['contender']} trains at "
                       f"{r['tokens_per_s'] / peer['tokens_per_s']:.2f}x the tokens/s of "
                       f"{peer['contender']} ({r['tokens_per_s']:.0f} vs "
                       f"{peer['tokens_per_s']:.0f}).")
    for variant in ("xla", "bf16"):
        for r in records:
            if r["variant"] == variant:
                base = by_key.get((r["config"], "default", r["contender"]))
                if base:
                    out.append(f"{r['config']} {r['contender']}: {variant} gives "
                               f"{r['tokens_per_s'] / base['tokens_per_s']:.2f}x the "
                               f"default tokens/s.")
    for row in micro:
        out.append(f"Tied output layer, {row[0]} {row[1]}, forward + backward: keras-nlp's "
                   f"3-D call {row[2]:.0f} ms, the project's folded `tied_logits` "
                   f"{row[3]:.0f} ms (same logits: {row[5]}).")
    if micro:
        out.append("What differs between the project's BERT / GPT-2 steps and keras-hub's "
                   "(same keras-nlp Transformer layers): keras-hub's tied output layer "
                   "multiplies [B, T, d] by the [d, V] table with a broadcasting matmul, "
                   "whose table gradient is a [B, d, V] tensor summed over B; the project "
                   "folds the rows to one [B T, d] matrix first (same logits; a rank-2 "
                   "GEMM in both directions). Every tied head (RoBERTa's MLM too) folds "
                   "the same way (models/tied_output.py).")
        out.append("What else differs (profiled with tf.profiler on BERT-mini): the "
                   "project's encoder AND decoder blocks run the attention Q/K/V and output "
                   "projections, as the feed-forward layers, as one [B T, d] GEMM each "
                   "(keras' EinsumDense runs them as broadcasting matmuls with a [B, d, d] "
                   "kernel gradient summed over B; models/folded_dense.py); the tied output "
                   "layer is a rank-2 "
                   "GEMM instead of a batch-of-one BatchMatMul plus a [d, V] transpose "
                   "(202 vs 235 ms CPU for forward + backward + loss at BERT-mini's MLM "
                   "shape); the "
                   "loss is log-sum-exp with a one-pass gradient instead of TensorFlow's "
                   "SparseSoftmaxCrossEntropyWithLogits kernel (31 vs 74 ms CPU on "
                   "640 x 30522 logits; models/task_losses.py), and the MLM accuracy uses "
                   "TensorFlow's ArgMax without keras.ops.argmax's six signed-zero passes "
                   "over the logits (6 vs 26 ms CPU).")
    if any(100 * r["flops_per_s"] / peaks["bfloat16" if r["variant"] == "bf16"
                                          else "float32"] > 100 for r in records):
        out.append("Rows above 100% of peak: the peak matmul measurement was slowed by "
                   "other processes at both of its runs; compare rows with each other.")
    if scaling:
        first, last = scaling[0], scaling[-1]
        out.append(f"Scaling (BERT, fixed tokens per batch): project tokens/s goes from "
                   f"{first[2]:.0f} at T={first[0]} to {last[2]:.0f} at T={last[0]}; "
                   f"keras-hub from {first[3]:.0f} to {last[3]:.0f} (attention's 12 L T d "
                   f"FLOPs per token grow with T).")
    if curves:
        single, mixed, other = (np.asarray(curves[run]) for run in pretraining_precision.RUNS)
        out.append(f"Loss curves over {len(single)} steps from the same seed: bf16 differs "
                   f"from float32 by {np.mean(np.abs(mixed - single)):.4f} on average (max "
                   f"{np.max(np.abs(mixed - single)):.4f}); float32 with other dropout draws "
                   f"differs by {np.mean(np.abs(other - single)):.4f} (max "
                   f"{np.max(np.abs(other - single)):.4f}); the loss goes from "
                   f"{single[0]:.3f} to {single[-1]:.3f}.")
    out.append(f"The input pipeline alone yields {pipeline:.0f} batches/s, far above the "
               f"steps/s of any model here: prefetching in-memory batches leaves nothing "
               f"to parallelise.")
    out.append("Fused attention: Keras's `dot_product_attention` path is skipped whenever "
               "attention dropout is on (0.1 in pretraining, both projects), and on CPU "
               "with the TF backend there is no fused kernel; both sides run the same "
               "einsum + softmax attention of keras-nlp's Transformer layers.")
    return out


def run(scales=(1, 4, 16), out_dir: str = ".", quick: bool = False,
        strategy: str = "default", tpu: str | None = None, configs=None,
        loss_steps: int = 60, rounds: int | None = None) -> common.Result:
    """Runs the whole benchmark (see the module docstring); returns its tables, plots,
    findings and raw figures. ``configs``: only these shapes (e.g. ``["BERT-small"]``),
    without the scaling study and the output-layer micro-benchmark. ``loss_steps``: the
    length of the float32 vs bf16 loss curves (0: none). ``rounds``: timed rounds."""
    started = time.perf_counter()
    os.makedirs(out_dir, exist_ok=True)
    dist = make_strategy(strategy, tpu)
    print(f"load average at start: {os.getloadavg()}", flush=True)
    peaks = measure_peaks(quick)
    setups, scaling_setups, cases, timing = plan(scales, quick)
    if rounds:
        timing["rounds"] = rounds
    if configs:
        setups = [setup for setup in setups if setup.shape in configs]
        scaling_setups, cases = [], []
    pipeline = pipeline_batches_per_second(encoder_data(32, 128, 20, BERT_VOCABULARY))

    records = []
    for setup in setups:
        records += measure_setup(setup, dist, timing)
    scaling_records = []
    for setup in scaling_setups:
        # The scaling point that equals a measured configuration reuses its figures.
        same = any(dataclasses.astuple(setup)[:4] == dataclasses.astuple(other)[:4]
                   for other in setups)
        reused = [r for r in records if same and r["config"] == setup.label
                  and r["variant"] == "default" and r["contender"] in SCALING_CONTENDERS]
        scaling_records += reused or measure_setup(setup, dist, timing)
    micro = output_layer_times(cases, repeats=2 if quick else 4)
    curve_shape = "BERT-tiny" if quick else "BERT-small"
    curves = loss_curves(curve_shape, loss_steps, dist) if loss_steps else None
    # Measured again at the end: the higher figure is the less disturbed one.
    again = measure_peaks(quick)
    peaks = {dtype: max(peak, again[dtype]) for dtype, peak in peaks.items()}

    note = ("tokens/s = batch x sequence length / fastest step (padding included). FLOPs "
            "per token = 6 N + 12 L T d + output layer (6 d V per predicted position, plus "
            "the MLM head's 6 d^2); N = Transformer-block parameters. % of peak: against "
            "the float32 matmul peak measured in this run (bf16 rows: the bfloat16 peak). "
            "ratio: tokens/s of the project row / keras-hub's at the same config and "
            "variant. 'project MLM' is the project's MLM-only objective (RoBERTa's "
            "pretrainer and backbone, same sizes). CPU shared with other processes.")
    tables = [throughput_table(records, peaks, "Training throughput", note)]
    if any(r["variant"] != "default" for r in records):
        tables.append(variant_table(records))
    scaling_rows = []
    for setup in scaling_setups:
        got = {r["contender"]: r for r in scaling_records if r["config"] == setup.label}
        ours, peer = got["project MLM+NSP"], got["keras-hub MLM"]
        scaling_rows.append([setup.seq_len, setup.batch, ours["tokens_per_s"],
                             peer["tokens_per_s"], ours["tokens_per_s"] / peer["tokens_per_s"],
                             100 * ours["flops_per_s"] / peaks["float32"],
                             100 * peer["flops_per_s"] / peaks["float32"]])
    if scaling_setups:
        tables.append(scaling_table(scaling_setups, scaling_rows))
    if micro:
        tables.append(common.Table(
            "Tied output layer, forward + backward", ["case", "hidden x vocabulary",
                                                      "keras-nlp 3-D call ms",
                                                      "project tied_logits ms", "ratio",
                                                      "same logits"], micro,
            "Gradients for the embedding table and the hidden states; best of a few "
            "calls. Same logits: equal within 1e-5 (the folded GEMM sums in another "
            "order: float32 rounding only)."))
    if curves:
        tables.append(pretraining_precision.curve_table(
            curves, f"{curve_shape} b32 T128", max(1, loss_steps // 10)))
    plots = [throughput_plot(os.path.join(out_dir, "pretraining_tokens_per_s.png"), records)]
    if scaling_rows:
        plots.append(common.line_plot(
            os.path.join(out_dir, "pretraining_scaling.png"),
            "BERT training throughput vs sequence length", "sequence length", "tokens/s",
            {"project MLM+NSP": ([row[0] for row in scaling_rows],
                                 [row[2] for row in scaling_rows]),
             "keras-hub MLM": ([row[0] for row in scaling_rows],
                               [row[3] for row in scaling_rows])}, log_x=True))
    if curves:
        plots.append(pretraining_precision.curve_plot(
            os.path.join(out_dir, "pretraining_bf16_loss.png"), curves, curve_shape))
    load = os.getloadavg()
    print(f"load average at end: {load}", flush=True)
    result = common.Result(
        name="Pretraining throughput", tables=tables, plots=plots,
        findings=findings(records, scaling_rows, micro, peaks, pipeline, dist, curves)
        + [f"Load average (1, 5, 15 min) at the end of the run: "
           f"{', '.join(f'{value:.1f}' for value in load)} on {os.cpu_count()} cores."],
        figures={"machine": common.machine_info(), "peaks": peaks, "records": records,
                 "scaling": scaling_records, "output_layer": micro,
                 "pipeline_batches_per_s": pipeline, "strategy": strategy, "quick": quick,
                 "loss_curves": curves, "load_average": load})
    result.seconds = time.perf_counter() - started
    return result


def scaling_table(scaling_setups, scaling_rows) -> common.Table:
    return common.Table(
        f"Scaling with sequence length ({scaling_setups[0].shape}, "
        f"{scaling_setups[0].batch * scaling_setups[0].seq_len} tokens per batch, default)",
        ["seq len", "batch", "project MLM+NSP tokens/s", "keras-hub MLM tokens/s",
         "ratio", "project % of peak", "keras-hub % of peak"], scaling_rows,
        "15% of the positions are predicted at every length; % of peak counts the "
        "attention FLOPs (12 L T d per token), which grow with T.")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out-dir", default="benchmark_results")
    parser.add_argument("--quick", action="store_true", help="smoke run, under a minute")
    parser.add_argument("--scales", type=int, nargs="+", default=[1, 4, 16],
                        help="sequence-length multipliers of the scaling study")
    parser.add_argument("--strategy", choices=("default", "mirrored", "tpu"),
                        default="default", help="tf.distribute strategy (make_strategy)")
    parser.add_argument("--tpu", default=None, help="TPU name or address (--strategy tpu)")
    parser.add_argument("--configs", nargs="+", default=None, choices=sorted(SHAPES),
                        help="only these model shapes (no scaling study, no micro-benchmark)")
    parser.add_argument("--loss-steps", type=int, default=60,
                        help="steps of the float32 vs bf16 loss curves (0: none)")
    parser.add_argument("--rounds", type=int, default=None,
                        help="timed rounds per contender (default 3; 2 with --quick)")
    args = parser.parse_args(argv)
    result = run(tuple(args.scales), args.out_dir, quick=args.quick, strategy=args.strategy,
                 tpu=args.tpu, configs=args.configs, loss_steps=args.loss_steps,
                 rounds=args.rounds)
    common.write_json(result.figures, os.path.join(args.out_dir, "pretraining.json"))
    print(result.markdown())
    return result


if __name__ == "__main__":
    main()
