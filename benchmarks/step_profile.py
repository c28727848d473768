"""Where a training step's time goes: a tf.profiler trace of the project's and keras-hub's
pretraining steps (the shapes and contenders of `pretraining.py`), TF ops grouped by what
they do, and the % of the matmul peak the step could reach at best with that non-GEMM work.

    .venv/bin/python benchmarks/step_profile.py                  # about 3 minutes on 2 cores
    .venv/bin/python benchmarks/step_profile.py --quick          # tiny shapes, smoke run

How. Each contender trains 3 untimed steps, then 3 steps under `tf.profiler`. The trace's
host plane holds one event per executed TF op (named ``name:type``); their durations are
summed per op type and per category below, divided by the traced steps. Ops of a step can
run side by side on TF's inter-op threads, so the summed op time can exceed the step's
wall time; shares are of the summed op time.

Bound. GEMM FLOPs are the model's (`pretraining.flops_per_token` x tokens); if every GEMM
ran at this run's measured matmul peak and the rest of the step kept its measured time
(scaled by wall / summed op time), the step would take FLOPs / peak + that rest: the best
% of peak this step reaches on this machine without removing non-GEMM work.
"""

from __future__ import annotations

import collections
import glob
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import common  # noqa: E402
import keras  # noqa: E402
import pretraining  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.core.profiler.protobuf import xplane_pb2  # noqa: E402

# Op type -> category (first matching rule wins; anything else is "other").
CATEGORIES = (
    ("GEMM", ("MatMul", "BatchMatMul", "Einsum", "Conv")),
    ("optimizer update", ("ApplyAdam", "AssignVariable", "AssignSub", "AssignAdd",
                          "ReadVariable", "ResourceScatter", "Pow", "Sqrt")),
    ("dropout RNG", ("Random", "Philox")),
    ("softmax / loss", ("Softmax", "LogSoftmax", "ReduceLogSumExp", "SparseSoftmax",
                        "CrossEntropy", "Exp", "Log")),
    ("gather / scatter / embedding", ("Gather", "Scatter", "SegmentSum", "OneHot",
                                      "TensorScatter")),
    ("layout (transpose, concat, slice, pad)", ("Transpose", "Concat", "Slice", "Pack",
                                                "Unpack", "Split", "Pad", "Tile",
                                                "BroadcastTo", "Reshape", "Squeeze",
                                                "ExpandDims", "Identity")),
    ("element-wise & reductions (GELU, LayerNorm, bias, masks)",
     ("Mul", "Add", "Sub", "Div", "Tanh", "Erf", "Rsqrt", "Mean", "Sum", "Max", "Min",
      "Square", "Select", "Cast", "Greater", "Less", "Equal", "Neg", "Relu", "Gelu",
      "BiasAdd", "Reciprocal", "Maximum", "Minimum", "FusedBatchNorm", "LayerNorm", "AddN",
      "Sigmoid", "ZerosLike", "OnesLike", "Fill", "Prod", "All", "Any", "LogicalAnd",
      "LogicalNot", "Where")),
)


def category(op_type: str) -> str:
    name = op_type.lstrip("_").removeprefix("Mkl").removeprefix("Fused")
    for label, markers in CATEGORIES:
        if any(marker in name for marker in markers):
            return label
    return "other"


def op_times(trace_dir: str) -> dict:
    """{op type: summed seconds} over the host plane's ``name:type`` events of the newest
    ``*.xplane.pb`` under ``trace_dir``."""
    paths = sorted(glob.glob(os.path.join(trace_dir, "**", "*.xplane.pb"), recursive=True))
    if not paths:
        raise FileNotFoundError(f"tf.profiler wrote no trace under {trace_dir}")
    space = xplane_pb2.XSpace()
    with open(paths[-1], "rb") as f:
        space.ParseFromString(f.read())
    totals = collections.Counter()
    for plane in space.planes:
        if not plane.name.startswith("/host:CPU"):
            continue
        for line in plane.lines:
            if not line.name.startswith("tf_"):  # executor threads, not python's line
                continue
            for event in line.events:
                name = plane.event_metadata[event.metadata_id].name
                if ":" in name and not name.startswith("Executor"):
                    totals[name.rsplit(":", 1)[1]] += event.duration_ps * 1e-12
    return dict(totals)


def profile_contender(name: str, variant: str, setup, data, steps: int = 3) -> dict:
    """Trains ``name`` (under ``variant``, see `pretraining.VARIANTS`) a few steps, traces
    ``steps`` more; {"wall_s": per step, "ops": {op type: seconds per step}}."""
    model = pretraining.compiled_contender(name, pretraining.SHAPES[setup.shape],
                                           setup.seq_len, variant,
                                           tf.distribute.get_strategy())
    data = pretraining.contender_data(name, data)
    model.fit(data, steps_per_epoch=3, epochs=1, verbose=0)
    trace_dir = tempfile.mkdtemp(prefix="step_profile_")
    try:
        tf.profiler.experimental.start(trace_dir)
        started = time.perf_counter()
        model.fit(data, steps_per_epoch=steps, epochs=1, verbose=0)
        wall = (time.perf_counter() - started) / steps
        tf.profiler.experimental.stop()
        ops = {op: seconds / steps for op, seconds in op_times(trace_dir).items()}
    finally:
        shutil.rmtree(trace_dir, ignore_errors=True)
        del model
        keras.backend.clear_session()
    return {"wall_s": wall, "ops": ops}


def by_category(ops: dict) -> dict:
    grouped = collections.Counter()
    for op, seconds in ops.items():
        grouped[category(op)] += seconds
    return dict(grouped)


def run(scales=(1, 4, 16), out_dir: str = "benchmark_results", quick: bool = False):
    del scales  # one shape per configuration: no scaling study here
    started = time.perf_counter()
    peaks = pretraining.measure_peaks(quick)
    if quick:
        plans = [(pretraining.Setup("BERT-tiny", 8, 32, 5, {}),
                  (("project MLM+NSP", "default"), ("keras-hub MLM", "default")))]
    else:
        plans = [(pretraining.Setup("BERT-small", 32, 128, 20, {}),
                  (("project MLM+NSP", "default"), ("keras-hub MLM", "default"),
                   ("project MLM+NSP", "bf16"))),
                 (pretraining.Setup("GPT-2-small", 4, 128, 0, {}),
                  (("project CLM", "default"), ("keras-hub CLM", "default")))]
    labels = [label for label, _ in CATEGORIES] + ["other"]
    share_rows, bound_rows, top_rows, figures = [], [], [], {}
    for setup, names in plans:
        shape = pretraining.SHAPES[setup.shape]
        if setup.decoder:
            data = pretraining.decoder_data(setup.batch, setup.seq_len, shape["vocabulary_size"])
        else:
            data = pretraining.encoder_data(setup.batch, setup.seq_len, setup.predictions,
                                            shape["vocabulary_size"])
        flops = pretraining.flops_per_token(setup) * setup.batch * setup.seq_len
        for name, variant in names:
            profile = profile_contender(name, variant, setup, data)
            groups = by_category(profile["ops"])
            total = sum(groups.values())
            peak = peaks["bfloat16" if variant == "bf16" else "float32"]
            if variant != "default":
                name = f"{name} ({variant})"
            figures[f"{setup.label} {name}"] = {**profile, "categories": groups}
            share_rows.append([setup.label, name, profile["wall_s"] * 1e3, total * 1e3]
                              + [100.0 * groups.get(label, 0.0) / total for label in labels])
            # Non-GEMM time in wall terms: its share of op time times the step's wall time.
            rest = profile["wall_s"] * (1.0 - groups.get("GEMM", 0.0) / total)
            ideal = flops / peak
            bound_rows.append([setup.label, name, profile["wall_s"] * 1e3,
                               100.0 * flops / profile["wall_s"] / peak, rest * 1e3,
                               100.0 * ideal / (ideal + rest)])
            for op, seconds in sorted(profile["ops"].items(), key=lambda kv: -kv[1])[:8]:
                top_rows.append([setup.label, name, op, category(op), seconds * 1e3,
                                 100.0 * seconds / total])
    tables = [
        common.Table("Summed op time by category (% of the step's summed op time)",
                     ["config", "model", "wall ms/step", "summed op ms/step"] + labels,
                     share_rows,
                     "Traced with tf.profiler, 3 steps after 3 untimed ones; AdamW as in "
                     "pretraining.py (the project's fused update for the project's models, "
                     "Keras' for keras-hub's)."),
        common.Table("Best % of the matmul peak with the measured non-GEMM work",
                     ["config", "model", "wall ms/step", "% of peak (traced step)",
                      "non-GEMM ms/step", "% of peak if every GEMM ran at peak"],
                     bound_rows,
                     f"Peaks measured in this run: {peaks['float32'] / 1e9:.0f} GFLOP/s "
                     f"float32, {peaks['bfloat16'] / 1e9:.0f} bfloat16 (the bf16 row's). "
                     "Non-GEMM ms = wall x (1 - GEMM share of op time)."),
        common.Table("The 8 most expensive op types per model",
                     ["config", "model", "op type", "category", "ms/step", "% of op time"],
                     top_rows),
    ]
    findings = [f"{row[0]} {row[1]}: non-GEMM work is {row[4]:.0f} ms of a {row[2]:.0f} ms "
                f"step; with every GEMM at the measured peak the step would reach "
                f"{row[5]:.0f}% of peak (traced: {row[3]:.0f}%)." for row in bound_rows]
    return common.Result("Training step profile", tables, findings=findings,
                         figures={"peak_flops": peaks, "profiles": figures},
                         seconds=time.perf_counter() - started)


def main(argv=None):
    args = common.argument_parser(__doc__).parse_args(argv)
    result = run(out_dir=args.out_dir, quick=args.quick)
    common.print_and_save(result, args.out_dir, "step_profile.json")
    return result


if __name__ == "__main__":
    main()
