"""Pretraining steps on an accelerator under JAX: the project's BERT-base (masked LM + next
sentence prediction, sequences of 128 and 512) and GPT-2 small (causal LM, sequence 1024)
beside keras-hub's `BertMaskedLM` and `GPT2CausalLM` at the same sizes, batch, optimizer
(AdamW) and precision (``mixed_bfloat16``), on synthetic batches.

    python benchmarks/accelerator_pretraining.py --json accelerator.json   # an accelerator
    python benchmarks/accelerator_pretraining.py --tiny --json tiny.json   # CPU, < 60 s

It needs only ``jax``, ``keras``, ``keras-hub`` / ``keras-nlp`` and the project's ``models/``
(benchmarks/accelerator/README.md says how to carry them to a machine that lacks them);
TensorFlow is blocked from being imported. Each (case, implementation) runs in a fresh
child process of this script, so its peak device memory is its own and one failure does not
stop the others; a first child measures the device's bf16 matmul peak. With ``--tiny`` the
runs of one implementation share a child, the two children side by side.

What one child measures. The training step is Keras's own (`Model.train_step`: forward,
loss, gradients, AdamW update, metrics), jitted once with the state donated as `fit` does;
the batch stays on the device, so the input pipeline is outside the measurement. After
``--warmup`` steps (the compilation is timed on its own), ``--windows`` windows of
``--steps`` steps are each timed from dispatch to `jax.block_until_ready`; the step time is
the median of the windows' per-step times.

Model FLOPs per step (Chowdhery et al. 2022, PaLM, Appendix B): 6 per weight per token that
goes through it (forward 2, backward 4) plus 12 * L * d * T per token for the attention
scores and their weighted sum (full T x T, masking not discounted). The weights are the
matmul kernels only (biases, LayerNorms and embedding lookups add no matmul): every token
goes through the L layers' 4 d^2 + 2 d f; BERT's masked-LM head (d^2 transform and the d x V
tied output) runs on the masked positions only, its pooler and NSP classifier
(d^2 + 2 d) once per sequence; GPT-2's tied output (d x V) on every token. MFU is the model
FLOPs per second over the bf16 matmul peak measured in the same run (jitted ``n x n x n``
products on random data, the best of a few repeats).
"""

from __future__ import annotations

import argparse
import atexit
import concurrent.futures
import dataclasses
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

os.environ["KERAS_BACKEND"] = "jax"
# A None entry makes `import tensorflow` raise ImportError: keras and keras-hub then take
# their paths without it, as on a machine where it is not installed.
if "tensorflow" not in sys.modules:
    sys.modules["tensorflow"] = None

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IMPLEMENTATIONS = ("lmfactory", "keras-hub")
POLICY = "mixed_bfloat16"
# The objective each implementation trains: the project's pretraining objective (its
# registry key), keras-hub's task.
OBJECTIVES = {"lmfactory": {"bert": "bert_mlm_nsp", "gpt2": "causal_lm"},
              "keras-hub": {"bert": "masked_lm", "gpt2": "causal_lm"}}
PRESETS = {"bert": "base", "gpt2": "124M"}
NOTES = (
    "keras-hub's BertMaskedLM has no next-sentence head: it trains the masked LM only, the "
    "project's BertPretrainer trains MLM + NSP (the NSP head is a d x 2 layer on the pooled "
    "vector; its FLOPs and the pooler's are counted for the project's model only).",
    "Both implementations train with the same AdamW, batch and synthetic data; keras-hub's "
    "tasks are compiled with their default loss and weighted accuracy, the project's "
    "compute their own loss and metrics.",
)


@dataclasses.dataclass(frozen=True)
class Size:
    """A Transformer's size (the backbone constructor arguments both libraries share)."""
    num_layers: int
    hidden_dim: int
    num_heads: int
    intermediate_dim: int
    vocabulary_size: int
    max_sequence_length: int


@dataclasses.dataclass(frozen=True)
class Case:
    """One benchmarked training configuration; ``masked_predictions`` is the number of
    masked-LM predictions per sequence (BERT's 15% of the sequence), 0 for a causal LM."""
    name: str
    architecture: str
    sequence_length: int
    batch_size: int
    masked_predictions: int = 0


FULL_SIZES = {"bert": Size(12, 768, 12, 3072, 30522, 512),
              "gpt2": Size(12, 768, 12, 3072, 50257, 1024)}
TINY_SIZES = {"bert": Size(2, 64, 2, 256, 1000, 64),
              "gpt2": Size(2, 64, 2, 256, 1000, 64)}
# 16,384 tokens a step in each case: enough work per step to keep a large GPU busy.
FULL_CASES = (Case("bert-128", "bert", 128, 128, 20), Case("bert-512", "bert", 512, 32, 76),
              Case("gpt2-1024", "gpt2", 1024, 16))
TINY_CASES = (Case("bert-32", "bert", 32, 2, 5), Case("bert-64", "bert", 64, 2, 10),
              Case("gpt2-64", "gpt2", 64, 2))
# (warm-up steps, steps per timed window, windows, matmul size for the peak)
FULL_TIMING = (3, 10, 5, 8192)
TINY_TIMING = (1, 2, 2, 512)


# ---------------------------------------------------------------- model FLOPs and sizes


def flops_per_sequence(size: Size, case: Case, sentence_head: bool) -> int:
    """Training FLOPs of one sequence by the formula of the module docstring."""
    d, length = size.hidden_dim, case.sequence_length
    layer_weights = size.num_layers * (4 * d * d + 2 * d * size.intermediate_dim)
    attention = 12 * size.num_layers * d * length * length
    if case.architecture == "gpt2":
        return 6 * (layer_weights + d * size.vocabulary_size) * length + attention
    head_weights = (d * d + d * size.vocabulary_size) * case.masked_predictions
    pooled_weights = d * d + 2 * d if sentence_head else 0
    return 6 * (layer_weights * length + head_weights + pooled_weights) + attention


def flops_per_step(size: Size, case: Case, implementation: str) -> int:
    sentence_head = case.architecture == "bert" and implementation == "lmfactory"
    return case.batch_size * flops_per_sequence(size, case, sentence_head)


# ---------------------------------------------------------------- child: imports


def import_models():
    """``lmfactory.models``. The repository root is the package ``lmfactory``; where it is
    not installed (a bare checkout on a lent machine), a link named ``lmfactory`` in a
    temporary folder on ``sys.path`` makes it importable."""
    try:
        from lmfactory import models
    except ModuleNotFoundError as error:
        if error.name != "lmfactory":
            raise
        folder = tempfile.mkdtemp(prefix="lmfactory-path-")
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        os.symlink(REPO, os.path.join(folder, "lmfactory"))
        sys.path.insert(0, folder)
        from lmfactory import models
    return models


def tensorflow_loaded() -> bool:
    return any(module is not None and (name == "tensorflow" or name.startswith("tensorflow."))
               for name, module in list(sys.modules.items()))


def environment() -> dict:
    """The backend, device and library versions of this process."""
    import jax
    import jaxlib
    import keras
    import keras_hub

    device = jax.devices()[0]
    try:
        import keras_nlp
        keras_nlp_version = keras_nlp.__version__
    except ImportError:
        keras_nlp_version = None
    return {"backend": jax.default_backend(), "device": device.device_kind,
            "device_count": jax.device_count(),
            "versions": {"python": platform.python_version(), "jax": jax.__version__,
                         "jaxlib": jaxlib.__version__, "keras": keras.__version__,
                         "keras_hub": keras_hub.__version__, "keras_nlp": keras_nlp_version}}


# ---------------------------------------------------------------- child: matmul peak


def matmul_peak(size: int, calls: int = 10, repeats: int = 5) -> dict:
    """The device's bf16 matmul throughput: ``calls`` jitted ``size``^3 products of random
    bf16 matrices dispatched back to back and timed to the last one's completion; the best
    of ``repeats`` such runs, in TFLOP/s."""
    import jax
    import jax.numpy as jnp

    first, second = jax.random.split(jax.random.key(0))
    a = jax.random.normal(first, (size, size), jnp.bfloat16)
    b = jax.random.normal(second, (size, size), jnp.bfloat16)
    matmul = jax.jit(jnp.matmul)
    jax.block_until_ready(matmul(a, b))
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            product = matmul(a, b)
        jax.block_until_ready(product)
        best = min(best, (time.perf_counter() - start) / calls)
    return {"peak_tflops": 2 * size ** 3 / best / 1e12, "peak_matmul_size": size,
            "peak_matmul_seconds": best, "peak_matmul_repeats": repeats}


# ---------------------------------------------------------------- child: models and batches


def build_lmfactory(case: Case, size: Size):
    """The project's pretraining task model of ``case``: ``pretrainers[objective](backbone)``
    on a backbone of ``size``."""
    models = import_models()
    backbone = models.build(case.architecture, PRESETS[case.architecture], dtype=POLICY,
                            **dataclasses.asdict(size))
    objective = OBJECTIVES["lmfactory"][case.architecture]
    return models.get(case.architecture).pretrainers[objective](backbone)


def build_keras_hub(case: Case, size: Size):
    """keras-hub's `BertMaskedLM` / `GPT2CausalLM` on a backbone of ``size``, with no
    preprocessor (it takes token ids, as the project's models do)."""
    import keras_hub

    if case.architecture == "bert":
        backbone = keras_hub.models.BertBackbone(dtype=POLICY, **dataclasses.asdict(size))
        return keras_hub.models.BertMaskedLM(backbone, preprocessor=None)
    backbone = keras_hub.models.GPT2Backbone(dtype=POLICY, **dataclasses.asdict(size))
    return keras_hub.models.GPT2CausalLM(backbone, preprocessor=None)


def masked_lm_arrays(case: Case, size: Size, rng) -> dict:
    """A BERT batch: two segments of random ids, and distinct sorted masked positions
    inside the sequence (never the first or last token)."""
    import numpy as np

    batch, length = case.batch_size, case.sequence_length
    token_ids = rng.integers(0, size.vocabulary_size, (batch, length), dtype=np.int32)
    segment_ids = np.zeros((batch, length), np.int32)
    segment_ids[:, length // 2:] = 1
    order = np.argsort(rng.random((batch, length - 2)), axis=1)
    positions = np.sort(order[:, :case.masked_predictions], axis=1).astype(np.int32) + 1
    return {"token_ids": token_ids, "segment_ids": segment_ids,
            "padding_mask": np.ones((batch, length), np.int32),
            "mask_positions": positions,
            "mask_ids": np.take_along_axis(token_ids, positions, axis=1),
            "mask_weights": np.ones(positions.shape, np.float32),
            "next_sentence_labels": rng.integers(0, 2, (batch,), dtype=np.int32)}


def masked_lm_batch(case: Case, size: Size, implementation: str, rng) -> tuple:
    """``(x, y, sample_weight)``: CONTRACTS §3's bert_mlm_nsp batch for the project's
    model, the masked-LM targets alone for keras-hub's."""
    arrays = masked_lm_arrays(case, size, rng)
    x = {name: arrays[name]
         for name in ("token_ids", "segment_ids", "padding_mask", "mask_positions")}
    if implementation == "keras-hub":
        return x, arrays["mask_ids"], arrays["mask_weights"]
    return (x, {"mlm": arrays["mask_ids"], "nsp": arrays["next_sentence_labels"]},
            {"mlm": arrays["mask_weights"]})


def causal_lm_batch(case: Case, size: Size, rng) -> tuple:
    """``(x, y, sample_weight)``: random ids, the next ids as targets, every position
    weighted (CONTRACTS §3 causal_lm); the same for both implementations."""
    import numpy as np

    batch, length = case.batch_size, case.sequence_length
    ids = rng.integers(0, size.vocabulary_size, (batch, length + 1), dtype=np.int32)
    x = {"token_ids": ids[:, :-1], "padding_mask": np.ones((batch, length), np.int32)}
    return x, ids[:, 1:], np.ones((batch, length), np.float32)


def synthetic_batch(case: Case, size: Size, implementation: str, seed: int) -> tuple:
    import numpy as np

    rng = np.random.default_rng(seed)
    if case.architecture == "bert":
        return masked_lm_batch(case, size, implementation, rng)
    return causal_lm_batch(case, size, rng)


# ---------------------------------------------------------------- child: the training step


def training_state(model) -> tuple:
    """The values Keras's JAX `train_step` takes and returns: trainable, non-trainable,
    optimizer and metric variables."""
    return tuple([variable.value for variable in variables]
                 for variables in (model.trainable_variables, model.non_trainable_variables,
                                   model.optimizer.variables, model.metrics_variables))


def compiled_train_step(model, batch):
    """Keras's `train_step`, jitted with the state donated (as `fit` compiles it) and
    compiled ahead for ``batch``: (compiled step, initial state, compile seconds, XLA's
    peak memory estimate of the step in bytes)."""
    import jax

    # What fit and train_on_batch do before their first step: builds the optimizer's and
    # the compiled loss's and metrics' variables, without compiling a training program.
    model._symbolic_build(data_batch=batch)  # noqa: SLF001
    state = training_state(model)
    start = time.perf_counter()
    compiled = jax.jit(model.train_step, donate_argnums=0).lower(state, batch).compile()
    compile_seconds = time.perf_counter() - start
    analysis = compiled.memory_analysis()
    estimate = getattr(analysis, "peak_memory_in_bytes", None) if analysis else None
    return compiled, state, compile_seconds, estimate


def timed_steps(step, state, batch, warmup: int, steps: int, windows: int) -> dict:
    """Runs ``warmup`` steps, then ``windows`` windows of ``steps`` steps, each timed from
    its first dispatch to the completion of its last step's outputs."""
    import jax

    logs = None
    for _ in range(warmup):
        logs, state = step(state, batch)
    jax.block_until_ready((logs, state))
    per_step = []
    for _ in range(windows):
        start = time.perf_counter()
        for _ in range(steps):
            logs, state = step(state, batch)
        jax.block_until_ready((logs, state))
        per_step.append((time.perf_counter() - start) / steps)
    return {"step_time_s": statistics.median(per_step), "step_time_min_s": min(per_step),
            "step_time_max_s": max(per_step), "timed_steps": steps * windows,
            "final_loss": float(logs["loss"])}


def device_peak_memory() -> tuple:
    """(peak bytes the device's allocator has held in this process, or None; a note when
    None)."""
    import jax

    stats = jax.devices()[0].memory_stats()
    if stats and stats.get("peak_bytes_in_use"):
        return int(stats["peak_bytes_in_use"]), ""
    return None, (f"the {jax.default_backend()} backend reports no allocator statistics "
                  "(memory_stats() has no peak_bytes_in_use)")


def benchmark_one(case: Case, size: Size, implementation: str, args) -> dict:
    """Builds, compiles and times one (case, implementation) in this process."""
    import jax
    import keras

    keras.config.set_dtype_policy(POLICY)
    keras.utils.set_random_seed(args.seed)
    build = build_lmfactory if implementation == "lmfactory" else build_keras_hub
    model = build(case, size)
    model.compile(optimizer=keras.optimizers.AdamW(learning_rate=1e-4, weight_decay=0.01))
    batch = jax.device_put(synthetic_batch(case, size, implementation, args.seed))
    step, state, compile_seconds, estimate = compiled_train_step(model, batch)
    timing = timed_steps(step, state, batch, args.warmup, args.steps, args.windows)
    peak_bytes, memory_note = device_peak_memory()
    return {"case": case.name, "architecture": case.architecture,
            "objective": OBJECTIVES[implementation][case.architecture],
            "implementation": implementation, "model_class": type(model).__name__,
            "batch": case.batch_size, "seq": case.sequence_length,
            "masked_predictions": case.masked_predictions, "dtype_policy": POLICY,
            "size": dataclasses.asdict(size), "parameters": int(model.count_params()),
            "compile_s": compile_seconds, **timing,
            "tokens_per_s": case.batch_size * case.sequence_length / timing["step_time_s"],
            "peak_memory_bytes": peak_bytes, "peak_memory_note": memory_note,
            "compiled_memory_bytes": estimate,
            "flops_per_step": flops_per_step(size, case, implementation)}


def benchmark_in_turn(runs: list, args) -> list:
    """The records of ``runs`` ((case name, implementation) pairs), one after the other in
    this process. After the first, the allocator's peak is that of every run so far."""
    import keras

    cases = {case.name: case for case in selected_cases(args)}
    records = []
    for case_name, implementation in runs:
        case = cases[case_name]
        size = (TINY_SIZES if args.tiny else FULL_SIZES)[case.architecture]
        record = benchmark_one(case, size, implementation, args)
        if records and record["peak_memory_bytes"] is not None:
            record["peak_memory_note"] = "the peak of this process's runs up to this one"
        records.append(record)
        keras.backend.clear_session()
    return records


def run_worker(args) -> int:
    """Child process: the matmul peak (``--worker peak``) or benchmark runs (``--worker
    CASE:IMPLEMENTATION[,CASE:IMPLEMENTATION...]``); writes its records to ``--output``."""
    if args.worker == "peak":
        records = [matmul_peak(args.peak_size)]
    else:
        runs = [tuple(run.split(":")) for run in args.worker.split(",")]
        records = benchmark_in_turn(runs, args)
    if tensorflow_loaded():
        raise AssertionError("TensorFlow was imported; this benchmark runs without it")
    for record in records:
        record.update(environment(), tensorflow_imported=False)
    with open(args.output, "w", encoding="utf-8") as file:
        json.dump(records, file)
    return 0


# ---------------------------------------------------------------- parent: orchestration


def selected_cases(args) -> tuple:
    """The cases of the mode, restricted to ``--cases``, with ``--batch`` applied."""
    cases = TINY_CASES if args.tiny else FULL_CASES
    if args.cases:
        wanted = args.cases.split(",")
        unknown = sorted(set(wanted) - {case.name for case in cases})
        if unknown:
            raise SystemExit(f"unknown case(s) {unknown}; cases: "
                             f"{[case.name for case in cases]}")
        cases = tuple(case for case in cases if case.name in wanted)
    if args.batch:
        cases = tuple(dataclasses.replace(case, batch_size=args.batch) for case in cases)
    return cases


def worker_command(args, worker: str, output: str) -> list:
    command = [sys.executable, os.path.abspath(__file__), "--worker", worker,
               "--output", output, "--warmup", str(args.warmup), "--steps", str(args.steps),
               "--windows", str(args.windows), "--peak-size", str(args.peak_size),
               "--seed", str(args.seed)]
    if args.tiny:
        command.append("--tiny")
    if args.cases:
        command += ["--cases", args.cases]
    if args.batch:
        command += ["--batch", str(args.batch)]
    return command


def child_environment(args) -> dict:
    """This process's environment; with ``--tiny``, XLA's code generation at its lowest
    optimisation level (unless XLA_FLAGS is set): a tiny model's step takes milliseconds,
    while its compilation takes seconds, most of the run on a CPU."""
    environment = dict(os.environ)
    if args.tiny and "XLA_FLAGS" not in environment:
        environment["XLA_FLAGS"] = "--xla_backend_optimization_level=0"
    return environment


def run_child(args, runs: list, folder: str) -> list:
    """Runs ``runs`` ((case name, implementation) pairs; ``[("peak",)]`` for the matmul
    peak) in one fresh process: their records, or one ``{"error": ...}`` record for each,
    with the end of the process's output."""
    worker = ",".join(":".join(run) for run in runs)
    output = os.path.join(folder, worker.replace(":", "_").replace(",", "+") + ".json")
    try:
        process = subprocess.run(worker_command(args, worker, output), capture_output=True,
                                 text=True, timeout=args.child_timeout,
                                 env=child_environment(args))
        failure = None if process.returncode == 0 and os.path.exists(output) else {
            "error": f"exit {process.returncode}",
            "log_tail": (process.stdout + process.stderr)[-4000:]}
    except subprocess.TimeoutExpired:
        failure = {"error": f"timed out after {args.child_timeout} s"}
    if failure:
        return [dict(failure, case=run[0], implementation=run[-1]) for run in runs]
    with open(output, encoding="utf-8") as file:
        return json.load(file)


def with_utilisation(record: dict, peak: dict) -> dict:
    """``record`` plus the measured peak, the achieved model FLOP/s and the MFU."""
    achieved = record["flops_per_step"] / record["step_time_s"]
    return {**record, "achieved_tflops": achieved / 1e12,
            "peak_tflops": peak["peak_tflops"], "peak_matmul_size": peak["peak_matmul_size"],
            "mfu": achieved / (peak["peak_tflops"] * 1e12)}


def all_runs(args) -> list:
    """Every (case name, implementation) pair, in report order."""
    return [(case.name, implementation) for case in selected_cases(args)
            for implementation in IMPLEMENTATIONS]


def process_groups(args) -> list:
    """The runs of each child process. Each (case, implementation) has its own, so that its
    peak device memory is its own; with ``--tiny``, the runs of one implementation share
    one, as a tiny run's time goes mostly to starting Python and compiling."""
    runs = all_runs(args)
    if not args.tiny:
        return [[run] for run in runs]
    return [[run for run in runs if run[1] == implementation]
            for implementation in IMPLEMENTATIONS]


def benchmark_runs(args, peak: dict, folder: str) -> list:
    """The records of every (case, implementation), their children run ``--jobs`` at a
    time, each printed as its child finishes; in case order."""

    def run(group):
        records = [record if "error" in record else with_utilisation(record, peak)
                   for record in run_child(args, group, folder)]
        for record in records:
            print(one_line(record), flush=True)
        return records

    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        records = [record for group in pool.map(run, process_groups(args))
                   for record in group]
    order = {run: index for index, run in enumerate(all_runs(args))}
    return sorted(records, key=lambda record: order[record["case"], record["implementation"]])


def run_all(args) -> int:
    """Parent process: the peak alone, then the benchmark runs, each in a child."""
    selected_cases(args)  # an unknown case name stops the run before any child starts
    with tempfile.TemporaryDirectory(prefix="accelerator-benchmark-") as folder:
        (peak,) = run_child(args, [("peak",)], folder)
        if "error" in peak:
            print(f"matmul peak FAILED ({peak['error']}):\n{peak.get('log_tail', '')}")
            return 1
        print(f"bf16 matmul peak on {peak['device']} ({peak['backend']}): "
              f"{peak['peak_tflops']:.4g} TFLOP/s ({peak['peak_matmul_size']}^3, best of "
              f"{peak['peak_matmul_repeats']})",
              flush=True)
        records = benchmark_runs(args, peak, folder)
    print()
    print(table(records, peak))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as file:
            json.dump(records, file, indent=1)
    failed = [record for record in records if "error" in record]
    for record in failed:
        print(f"\n{record['case']} / {record['implementation']} FAILED ({record['error']}):\n"
              f"{record.get('log_tail', '')}")
    return 1 if failed else 0


# ---------------------------------------------------------------- parent: report


def memory_text(record: dict) -> str:
    if record["peak_memory_bytes"] is None:
        return "n/a"
    return f"{record['peak_memory_bytes'] / 2 ** 30:.2f}"


def one_line(record: dict) -> str:
    if "error" in record:
        return f"{record['case']} / {record['implementation']}: FAILED ({record['error']})"
    return (f"{record['case']} / {record['implementation']}: "
            f"{record['step_time_s'] * 1e3:.4g} ms/step, {record['tokens_per_s']:,.0f} "
            f"tokens/s, MFU {record['mfu']:.2%} (compiled in {record['compile_s']:.1f} s)")


def table(records: list, peak: dict) -> str:
    """A Markdown table of the runs, notes under it."""
    columns = ["case", "implementation", "batch", "seq", "step ms", "tokens/s",
               "peak GiB", "TFLOP/step", "TFLOP/s", "MFU", "vs keras-hub"]
    step_times = {(r["case"], r["implementation"]): r["step_time_s"]
                  for r in records if "error" not in r}
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for record in records:
        if "error" in record:
            lines.append(f"| {record['case']} | {record['implementation']} | FAILED: "
                         f"{record['error']} |")
            continue
        reference = step_times.get((record["case"], "keras-hub"))
        ratio = ("-" if not reference or record["implementation"] == "keras-hub"
                 else f"{reference / record['step_time_s']:.2f}x")
        cells = [record["case"], record["implementation"], record["batch"], record["seq"],
                 f"{record['step_time_s'] * 1e3:.4g}", f"{record['tokens_per_s']:,.0f}",
                 memory_text(record), f"{record['flops_per_step'] / 1e12:.4g}",
                 f"{record['achieved_tflops']:.4g}", f"{record['mfu']:.2%}", ratio]
        lines.append("| " + " | ".join(str(cell) for cell in cells) + " |")
    notes = [f"Device: {peak['device']} ({peak['backend']}), jax {peak['versions']['jax']}, "
             f"keras {peak['versions']['keras']}, keras-hub {peak['versions']['keras_hub']}; "
             f"policy {POLICY}. MFU against the bf16 matmul peak measured in this run, "
             f"{peak['peak_tflops']:.4g} TFLOP/s. 'vs keras-hub': keras-hub's step time "
             "over this row's (above 1: faster than keras-hub).", *NOTES]
    memory_notes = {("n/a: " if r["peak_memory_bytes"] is None else "") + r["peak_memory_note"]
                    for r in records if "error" not in r and r["peak_memory_note"]}
    notes += [f"Peak memory {note}." for note in sorted(memory_notes)]
    return "\n".join(lines) + "\n\n" + "\n".join(f"- {note}" for note in notes)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true",
                        help="2-layer models of width 64 at sequences 32 / 64, batch 2: "
                             "every case on a CPU in seconds")
    parser.add_argument("--json", help="write the records (a list of dicts) here")
    parser.add_argument("--cases", help="comma-separated case names (default: all)")
    parser.add_argument("--batch", type=int, help="one batch size for every case")
    parser.add_argument("--warmup", type=int, help="untimed steps after compiling")
    parser.add_argument("--steps", type=int, help="steps per timed window")
    parser.add_argument("--windows", type=int, help="timed windows (the median is reported)")
    parser.add_argument("--peak-size", type=int, help="n of the n x n x n peak matmul")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--child-timeout", type=float, default=1200.0,
                        help="seconds one child process may take")
    parser.add_argument("--jobs", type=int,
                        help="child processes run at a time after the peak (default: 1; "
                             "with --tiny, one per implementation, both at once where there "
                             "are two cores: on a CPU the figures only test the code)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--output", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    defaults = TINY_TIMING if args.tiny else FULL_TIMING
    for name, default in zip(("warmup", "steps", "windows", "peak_size"), defaults):
        if getattr(args, name) is None:
            setattr(args, name, default)
    if args.jobs is None:
        args.jobs = min(len(IMPLEMENTATIONS), os.cpu_count() or 1) if args.tiny else 1
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.worker:
        return run_worker(args)
    return run_all(args)


if __name__ == "__main__":
    sys.exit(main())
