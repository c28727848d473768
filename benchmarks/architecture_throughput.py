"""Training throughput of every registered architecture's masked-LM or causal-LM
pretraining step at one shared small shape, beside keras-hub's where keras-hub has the
architecture and a pretraining task for it.

    .venv/bin/python benchmarks/architecture_throughput.py            # about 4 minutes
    .venv/bin/python benchmarks/architecture_throughput.py --quick    # smoke run

What runs. The architectures come from the registry (`models.names()`): each one with a
pretraining objective whose records are masked-LM records (``masked_lm_positions``) or
causal (``Objective.causal``: next-token targets), one task model per backbone and task
class (an architecture reusing another's backbone and pretrainer is the same model), and
none that needs linked knowledge-graph entities (ERNIE's dEA; its masked-LM head is BERT's).
Each is built from its smallest preset with the "mini" sizes below, only for the constructor
arguments that preset sets (4 layers, width 256, 4 heads, FFN 1024, an embedding size of
128 where the preset factorises it (ALBERT, ELECTRA), LSTM width 256); the vocabulary is
the smallest preset's own (30522 WordPiece ids for BERT, 50257 BPE ids for GPT-2, 256 bytes
for the character Transformer, ...), and the keras-hub peer gets the same. An architecture
whose invariants those sizes break (e.g. Reformer's axial position widths) runs at its
smallest preset (sequence length raised to 128 where it is shorter), and the table says so. A task model that needs a
teacher (distillation) gets the first other architecture with the same tokenizer kind that
it accepts, at the same sizes, as the pipeline does.

Data: one synthetic batch pool per objective in its own record format (the objective's
``feature_spec``), turned into Keras batches by its own ``converter``: batch 32, sequence
128, 20 masked-LM predictions, random ids, random real lengths from T/2 to T.

keras-hub peers (random weights, built from configs, nothing downloaded), same sizes, same
batches: `BertMaskedLM`, `RobertaMaskedLM`, `AlbertMaskedLM`, `DistilBertMaskedLM` (masked
LM only: keras-hub has no NSP / SOP head and no distillation) and `GPT2CausalLM`. keras-hub
has an ELECTRA backbone but no ELECTRA pretraining task, so ELECTRA has no peer.

Timing: every model is compiled with Keras' AdamW (lr 1e-4, weight decay 0.01), so the
figures compare the models alone (`pretraining.py` also times the project's fused AdamW, what
its trainer uses), and runs `fit` for
2 warm-up steps (tracing), then the project model and its peer take turns, 3 rounds of one
step each; the figure is the fastest step. tokens/s = batch x sequence / step time.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import common  # noqa: E402
import keras  # noqa: E402
import keras_hub  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from lmfactory import models  # noqa: E402
from lmfactory.components.pretraining_data import features, objectives  # noqa: E402

MINI = {"num_layers": 4, "hidden_dim": 256, "num_heads": 4, "intermediate_dim": 1024,
        "lstm_units": 256}
QUICK = {"num_layers": 2, "hidden_dim": 128, "num_heads": 2, "intermediate_dim": 512,
         "lstm_units": 128}
# keras-hub peers: registry name -> (backbone class, task class, backbone arguments taken
# from the project's configuration).
KERAS_HUB = {
    "bert": ("BertBackbone", "BertMaskedLM", ("num_layers", "num_heads", "hidden_dim",
                                              "intermediate_dim")),
    "roberta": ("RobertaBackbone", "RobertaMaskedLM", ("num_layers", "num_heads",
                                                       "hidden_dim", "intermediate_dim")),
    "albert": ("AlbertBackbone", "AlbertMaskedLM", ("num_layers", "num_heads", "embedding_dim",
                                                    "hidden_dim", "intermediate_dim")),
    "distilbert": ("DistilBertBackbone", "DistilBertMaskedLM", ("num_layers", "num_heads",
                                                                "hidden_dim",
                                                                "intermediate_dim")),
    "gpt2": ("GPT2Backbone", "GPT2CausalLM", ("num_layers", "num_heads", "hidden_dim",
                                              "intermediate_dim")),
}
# `total_steps` of a task model whose loss follows the training's progress.
TOTAL_STEPS = 1000
SPECIAL_IDS = {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}


# --------------------------------------------------------------------------- selection


def _preset_size(config: dict) -> float:
    hidden = config.get("hidden_dim") or config.get("embedding_dim") or 1
    layers = config.get("num_layers") or 1
    return layers * hidden * hidden + (config.get("vocabulary_size") or 1) * hidden


def lm_objective(name: str):
    """The architecture's first masked-LM or causal-LM objective (None if it has neither):
    a causal one that reads its records in order (``ordered_streams``) only if it has no
    other."""
    found = []
    for objective in models.get(name).objectives:
        record = objectives.get(objective)
        spec = features.feature_spec(features.resolve_config({"objective": objective}))
        if record.causal or "masked_lm_positions" in spec:
            found.append((record.ordered_streams, objective))
    return min(found)[1] if found else None


def architectures() -> list:
    """(name, objective) of every architecture the benchmark trains (module note)."""
    chosen, seen = [], set()
    for name in models.names():
        arch = models.get(name)
        objective = lm_objective(name)
        if objective is None or arch.links_entities:
            continue
        task = arch.pretrainer(objective)
        if any(task is other_task and issubclass(arch.backbone_cls, other_backbone)
               for other_backbone, other_task in seen):
            continue  # the same backbone (or a subclass of it) and task as one chosen
        seen.add((arch.backbone_cls, task))
        chosen.append((name, objective))
    return chosen


def sizes(name: str, shared: dict, seq_len: int) -> tuple:
    """(smallest preset, constructor overrides) of the shared sizes for ``name``."""
    presets = models.get(name).presets
    preset = min(presets, key=lambda key: _preset_size(presets[key]))
    config = presets[preset]
    overrides = {key: value for key, value in shared.items() if key in config}
    if "embedding_dim" in config:
        factorised = config["embedding_dim"] != config.get("hidden_dim", config["embedding_dim"])
        overrides["embedding_dim"] = shared["hidden_dim"] // (2 if factorised else 1)
    if (config.get("max_sequence_length") or seq_len) < seq_len:
        overrides["max_sequence_length"] = seq_len
    return preset, overrides


def build_backbone(name: str, shared: dict, seq_len: int) -> tuple:
    """(backbone, shape label) at the shared sizes, or at the smallest preset with the
    sequence length raised where those sizes break an invariant."""
    preset, overrides = sizes(name, shared, seq_len)
    try:
        return models.build(name, preset, **overrides), "mini"
    except (ValueError, TypeError) as error:
        kept = {key: value for key, value in overrides.items()
                if key == "max_sequence_length"}
        print(f"   {name}: mini sizes rejected ({error}); preset {preset!r}", flush=True)
        return models.build(name, preset, **kept), f"preset {preset}"


def build_task(name: str, objective: str, shared: dict, seq_len: int) -> tuple:
    """(task model, shape label), with a teacher for a distillation objective."""
    backbone, shape = build_backbone(name, shared, seq_len)
    task_cls = models.get(name).pretrainer(objective)
    make = task_cls
    if "total_steps" in inspect.signature(task_cls.__init__).parameters:
        # A loss that follows the training's progress (the pipeline passes the run's steps).
        make = functools.partial(task_cls, total_steps=TOTAL_STEPS)
    if not getattr(task_cls, "needs_teacher", False):
        return make(backbone), shape
    kind = models.get(name).tokenizer_kind
    errors = []
    for other in models.names():
        arch = models.get(other)
        if other == name or arch.tokenizer_kind != kind:
            continue
        teacher_cls = next((c for c in arch.pretrainers.values()
                            if not getattr(c, "needs_teacher", False)), None)
        if teacher_cls is None:
            continue
        try:
            teacher = teacher_cls(build_backbone(other, shared, seq_len)[0])
            if hasattr(task_cls, "initialize_student"):
                task_cls.initialize_student(backbone, teacher.backbone)
            return make(backbone, teacher=teacher), f"{shape}, teacher {other}"
        except (TypeError, ValueError) as error:
            errors.append(f"{other}: {error}")
    raise ValueError(f"{name}: no teacher accepted: {errors}")


def keras_hub_task(name: str, backbone, seq_len: int):
    """The keras-hub peer of ``name`` at the project backbone's sizes (None without one)."""
    if name not in KERAS_HUB:
        return None
    backbone_cls, task_cls, keys = KERAS_HUB[name]
    config = backbone.get_config()
    arguments = {key: config[key] for key in keys}
    arguments.update(vocabulary_size=config["vocabulary_size"],
                     max_sequence_length=max(seq_len, config.get("max_sequence_length") or 0))
    peer_backbone = getattr(keras_hub.models, backbone_cls)(**arguments)
    return getattr(keras_hub.models, task_cls)(peer_backbone)


# --------------------------------------------------------------------------- data


def _synthetic(name: str, spec, rng, count: int, vocabulary: int, seq_len: int):
    shape = [count] + list(spec.shape)
    if name == "input_mask":
        lengths = rng.integers(seq_len // 2, seq_len + 1, count)
        return (np.arange(shape[1])[None, :] < lengths[:, None]).astype("int64")
    if name == "segment_ids":
        return np.broadcast_to(np.arange(shape[1]) >= shape[1] // 2, shape).astype("int64")
    if name == "masked_lm_positions":
        return np.stack([np.sort(rng.choice(np.arange(1, seq_len // 2), shape[1],
                                            replace=False)) for _ in range(count)])
    if spec.dtype == tf.float32:
        return np.ones(shape, "float32")
    if name.endswith("labels"):
        return rng.integers(0, 2, shape).astype("int64")
    return rng.integers(5, vocabulary, shape).astype("int64")


def objective_data(objective: str, batch: int, seq_len: int, predictions: int,
                   vocabulary: int, pool_batches: int = 4, seed: int = 0) -> tf.data.Dataset:
    """Synthetic ``(x, y, sample_weight)`` batches of ``objective``: random records in its
    format (``features.feature_spec``), batched and turned into Keras batches by its own
    converter; ``pool_batches`` distinct batches repeated, prefetched."""
    config = features.resolve_config({"objective": objective, "max_seq_length": seq_len,
                                      "max_predictions_per_seq": predictions})
    config.update(vocabulary_size=vocabulary, tokenizer_kind="benchmark",
                  special_token_ids=SPECIAL_IDS, end_of_text_id=SPECIAL_IDS["sep"])
    rng = np.random.default_rng(seed)
    count = batch * pool_batches
    records = {name: _synthetic(name, spec, rng, count, vocabulary, seq_len)
               for name, spec in sorted(features.feature_spec(config).items())}
    converter = objectives.get(objective).converter(config)
    data = tf.data.Dataset.from_tensor_slices(records).repeat()
    return data.batch(batch, drop_remainder=True).map(converter).prefetch(tf.data.AUTOTUNE)


def peer_data(model, data: tf.data.Dataset) -> tf.data.Dataset:
    """``data`` in keras-hub's layout: its model's inputs only, y and sample_weight the
    masked-LM (or next-token) tensors."""
    names = list(model.input) if isinstance(model.input, dict) else None

    def convert(x, y, w):
        x = {key: x[key] for key in names} if names else x
        y = y["mlm"] if isinstance(y, dict) else y
        w = w["mlm"] if isinstance(w, dict) else w
        return x, y, w

    return data.map(convert)


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


def compile_model(model) -> None:
    optimizer = keras.optimizers.AdamW(1e-4, weight_decay=0.01)
    if type(model).compute_loss is keras.Model.compute_loss and \
            not isinstance(model, keras_hub.models.Task):
        model.compile(optimizer=optimizer,
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    else:
        model.compile(optimizer=optimizer)


def time_steps(contenders: dict, warmup: int, rounds: int) -> dict:
    """{name: fastest step (s)} of ``contenders`` = {name: (model, data)}, interleaved."""
    for model, data in contenders.values():
        model.fit(data, steps_per_epoch=warmup, epochs=1, verbose=0)
    best = {name: float("inf") for name in contenders}
    for _ in range(rounds):
        for name, (model, data) in contenders.items():
            timer = StepTimer()
            model.fit(data, steps_per_epoch=1, epochs=1, verbose=0, callbacks=[timer])
            best[name] = min(best[name], *timer.seconds)
    return best


def measure(name: str, objective: str, shared: dict, batch: int, seq_len: int,
            predictions: int, timing: dict) -> dict:
    """One architecture's record: tokens/s of the project's step and of its peer's."""
    started = time.perf_counter()
    model, shape = build_task(name, objective, shared, seq_len)
    compile_model(model)
    vocabulary = model.backbone.get_config()["vocabulary_size"]
    data = objective_data(objective, batch, seq_len, predictions, vocabulary)
    contenders = {"project": (model, data)}
    peer = keras_hub_task(name, model.backbone, seq_len)
    if peer is not None:
        compile_model(peer)
        contenders["keras-hub"] = (peer, peer_data(peer, data))
    seconds = time_steps(contenders, **timing)
    record = {"architecture": name, "objective": objective, "task": type(model).__name__,
              "shape": shape, "vocabulary": vocabulary, "tokens": batch * seq_len,
              "project_tokens_per_s": batch * seq_len / seconds["project"],
              "peer": type(peer).__name__ if peer is not None else None,
              "peer_tokens_per_s": (batch * seq_len / seconds["keras-hub"]
                                    if peer is not None else None),
              "seconds": time.perf_counter() - started, "loadavg": os.getloadavg()}
    del contenders, model, peer
    keras.backend.clear_session()
    return record


# --------------------------------------------------------------------------- report


def run(scales=(1,), out_dir: str = ".", quick: bool = False, only=None) -> common.Result:
    """Measures every selected architecture (``only``: those names alone; ``scales`` is
    unused: one shape)."""
    started = time.perf_counter()
    shared, batch, seq_len, predictions = ((QUICK, 8, 64, 10) if quick
                                           else (MINI, 32, 128, 20))
    timing = dict(warmup=1, rounds=1) if quick else dict(warmup=2, rounds=3)
    load_before = os.getloadavg()
    records = []
    # Those with a keras-hub peer first, then the others (each group in name order).
    chosen = sorted(architectures(), key=lambda case: case[0] not in KERAS_HUB)
    for name, objective in chosen:
        if only and name not in only:
            continue
        print(f"== {name} ({objective})", flush=True)
        try:
            records.append(measure(name, objective, shared, batch, seq_len, predictions,
                                   timing))
        except Exception as error:  # one architecture's failure is reported, not fatal
            records.append({"architecture": name, "objective": objective,
                            "error": f"{type(error).__name__}: {error}"[:300]})
        print(f"   {records[-1]}", flush=True)
    rows = []
    for r in records:
        if "error" in r:
            rows.append([r["architecture"], r["objective"], "-", "-", "-",
                         "FAILED: " + r["error"], "-", "-", "-"])
            continue
        peer = r["peer_tokens_per_s"]
        rows.append([r["architecture"], r["objective"], r["task"], r["shape"],
                     r["vocabulary"], r["project_tokens_per_s"], r["peer"] or "-",
                     peer if peer is not None else "-",
                     r["project_tokens_per_s"] / peer if peer else "-"])
    load_after = os.getloadavg()
    sizes_text = ", ".join(f"{key} {value}" for key, value in shared.items())
    table = common.Table(
        f"Pretraining step throughput per architecture (b{batch} T{seq_len})",
        ["architecture", "objective", "project task", "shape", "vocabulary",
         "project tokens/s",
         "keras-hub task", "keras-hub tokens/s", "ratio project/keras-hub"], rows,
        f"Shared sizes: {sizes_text} (only the keys each smallest preset sets; embedding "
        f"size half the width where the preset factorises it; each preset's own "
        f"vocabulary); {predictions} masked-LM "
        f"predictions per sequence. Fastest of 3 interleaved one-step rounds after 2 "
        f"warm-up steps. Not the same work in every pair: the project's BERT and ALBERT add "
        f"the NSP / SOP head, its DistilBERT and TinyBERT run a teacher's forward pass "
        f"(distillation), keras-hub's tasks train the masked LM alone. Load average "
        f"(1, 5, 15 min) {tuple(round(v, 1) for v in load_before)} before, "
        f"{tuple(round(v, 1) for v in load_after)} after.")
    result = common.Result(
        name="Architecture throughput", tables=[table],
        findings=[f"{len([r for r in records if 'error' not in r])} architectures "
                  f"measured, {len([r for r in records if r.get('peer')])} beside keras-hub."],
        figures={"records": records, "load_before": load_before, "load_after": load_after},
        seconds=time.perf_counter() - started)
    return result


def main(argv=None):
    parser = common.argument_parser(__doc__)
    parser.add_argument("--only", default="", help="comma-separated architecture names")
    args = parser.parse_args(argv)
    result = run(out_dir=args.out_dir, quick=args.quick,
                 only=[name for name in args.only.split(",") if name] or None)
    common.print_and_save(result, args.out_dir, "architecture_throughput.json")


if __name__ == "__main__":
    main()
