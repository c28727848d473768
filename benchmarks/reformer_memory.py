"""Reformer memory figures (Kitaev et al. 2020 §3 and §5): peak memory of one training step
(forward + backward, gradients of every weight) against

1. depth, reversible layers vs the same layers run as standard residual layers (autodiff
   stores every layer's activations): reversible should be flat in depth, standard linear;
2. sequence length (1k .. 16k tokens), LSH attention vs full attention (the same code with
   one chunk as long as the sequence: full causal dot-product attention over T x T scores),
   both with reversible layers so that the attention's own memory shows.

Measure: each configuration runs in its own subprocess with TensorFlow's BFC allocator on
the CPU (``TF_CPU_ALLOCATOR_USE_BFC=true``, which keeps the statistics that
`tf.config.experimental.get_memory_info` reads on GPUs); it builds the model, traces the
step (`tf.function`, graph mode, as `fit` runs it) on a batch of one, resets the
allocator's peak and runs the measured batch: the figure is the allocator's peak during the
step minus what was allocated before it (weights), i.e. the tensors the step itself held at
its high-water mark. (Peak RSS is useless here: memory freed after tracing stays mapped and
is reused.) Full
attention is skipped where its estimated score tensors (heads x T^2 floats, a handful of
copies) would exceed ``--full-limit-gb``, so as not to exhaust a shared machine; the
tables say so.

    nice -n 10 .venv/bin/python benchmarks/reformer_memory.py [--quick] [--markdown PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# TensorFlow's BFC allocator on the CPU keeps allocation statistics
# (tf.config.experimental.get_memory_info), which the default CPU allocator does not.
os.environ["TF_CPU_ALLOCATOR_USE_BFC"] = "true"

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from common import REPO, Table  # noqa: E402

DEPTH = dict(hidden_dim=128, num_heads=2, head_dim=64, intermediate_dim=512,
             attention_layers=["local", "lsh"], chunk=64, batch=8, length=1024)
LENGTH = dict(hidden_dim=64, num_heads=2, head_dim=32, intermediate_dim=256, num_layers=2,
              chunk=64, num_hashes=2, batch=1)
SCORE_COPIES = 6  # score-sized tensors alive at once in full attention's forward/backward


def measure(config: dict) -> dict:
    """Runs in the subprocess: builds the configured backbone and times nothing; returns
    {"peak_mb": ..., "baseline_mb": ...}."""
    import numpy as np
    import tensorflow as tf

    from lmfactory.models.reformer import ReformerBackbone

    length, batch = config["length"], config["batch"]
    columns = 1 << ((length.bit_length() + 1) // 2)
    backbone = ReformerBackbone(
        vocabulary_size=256, num_layers=config["num_layers"], num_heads=config["num_heads"],
        hidden_dim=config["hidden_dim"], head_dim=config["head_dim"],
        intermediate_dim=config["intermediate_dim"],
        attention_layers=config["attention_layers"], max_sequence_length=length,
        axial_pos_shape=[-(-length // columns), columns],
        lsh_attn_chunk_length=config["lsh_chunk"], local_attn_chunk_length=config["local_chunk"],
        num_hashes=config.get("num_hashes", 1),
        num_buckets=max(2, 2 * length // config["lsh_chunk"]), dropout=0.0,
        local_attention_dropout=0.0, reversible=config["reversible"])
    weights = backbone.trainable_variables

    @tf.function(input_signature=[tf.TensorSpec([None, length], tf.int32)])
    def step(ids):
        with tf.GradientTape() as tape:
            out = backbone({"token_ids": ids, "padding_mask": tf.ones_like(ids)},
                           training=True)["sequence_output"]
            # Not mean(out^2): the final LayerNorm makes that constant (zero gradients).
            loss = tf.reduce_mean(out * tf.sin(tf.range(out.shape[-1], dtype=out.dtype)))
        grads = tape.gradient(loss, weights)
        # Every gradient is an output (a product by 0 would let Grappler prune them).
        return loss, tf.add_n([tf.reduce_sum(tf.convert_to_tensor(g)) for g in grads])

    rng = np.random.default_rng(0)
    step(tf.constant(rng.integers(0, 256, (1, length)), tf.int32))  # trace
    ids = tf.constant(rng.integers(0, 256, (batch, length)), tf.int32)

    tf.config.experimental.reset_memory_stats("CPU:0")
    baseline = tf.config.experimental.get_memory_info("CPU:0")["current"]
    [value.numpy() for value in step(ids)]
    peak = tf.config.experimental.get_memory_info("CPU:0")["peak"]
    return {"peak_mb": (peak - baseline) / 2 ** 20, "baseline_mb": baseline / 2 ** 20}


def run_config(config: dict) -> dict:
    completed = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--measure", json.dumps(config)],
        capture_output=True, text=True, cwd=REPO)
    if completed.returncode:
        return {"error": (completed.stderr.strip().splitlines() or ["?"])[-1][:120]}
    return json.loads(completed.stdout.strip().splitlines()[-1])


def depth_table(depths) -> Table:
    rows = []
    for depth in depths:
        row = [depth]
        for reversible in (True, False):
            config = dict(DEPTH, num_layers=depth, reversible=reversible,
                          lsh_chunk=DEPTH["chunk"], local_chunk=DEPTH["chunk"], num_hashes=2)
            result = run_config(config)
            row.append(result.get("peak_mb", result.get("error")))
            print("depth", depth, "reversible" if reversible else "standard", result,
                  flush=True)
        rows.append(row)
    return Table(
        "Reformer: peak memory of one training step against depth (MB)",
        ["layers", "reversible (MB)", "standard residual (MB)"], rows,
        note=f"Batch {DEPTH['batch']} x {DEPTH['length']} tokens, d_model "
             f"{DEPTH['hidden_dim']}, d_ff {DEPTH['intermediate_dim']}, 2 heads of 64, "
             f"layers alternating local / LSH (chunks of 64, 2 hashes), fp32, CPU; "
             f"allocator peak of the step over the allocation before it (one subprocess "
             f"per cell).",
        digits=5)


def length_table(lengths, full_limit_gb) -> Table:
    rows = []
    for length in lengths:
        row = [length]
        for kind in ("lsh", "full"):
            if kind == "lsh":
                config = dict(LENGTH, length=length, attention_layers=["lsh"],
                              lsh_chunk=LENGTH["chunk"], local_chunk=LENGTH["chunk"],
                              reversible=True)
            else:
                estimate = SCORE_COPIES * LENGTH["num_heads"] * length ** 2 * 4 / 2 ** 30
                if estimate > full_limit_gb:
                    row.append(f"skipped (est. {estimate:.0f} GB)")
                    print("length", length, kind, "skipped", flush=True)
                    continue
                config = dict(LENGTH, length=length, attention_layers=["local"],
                              lsh_chunk=length, local_chunk=length, reversible=True)
            result = run_config(config)
            row.append(result.get("peak_mb", result.get("error")))
            print("length", length, kind, result, flush=True)
        rows.append(row)
    return Table(
        "Reformer: peak memory of one training step against sequence length (MB)",
        ["tokens", "LSH attention (MB)", "full attention (MB)"], rows,
        note=f"Batch 1, {LENGTH['num_layers']} reversible layers, d_model "
             f"{LENGTH['hidden_dim']}, 2 heads of {LENGTH['head_dim']}, d_ff "
             f"{LENGTH['intermediate_dim']}; LSH: chunks of {LENGTH['chunk']}, "
             f"{LENGTH['num_hashes']} hashes, 2 * T / 64 buckets; full: the same layer with "
             f"one chunk of T (T x T causal scores). fp32, CPU; full attention skipped where "
             f"{SCORE_COPIES} score tensors of heads x T^2 floats would exceed "
             f"{full_limit_gb} GB.", digits=5)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--full-limit-gb", type=float, default=4.0)
    parser.add_argument("--markdown")
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(json.loads(args.measure))))
        return
    depths = (2, 4) if args.quick else (2, 4, 8, 16)
    lengths = (1024, 2048) if args.quick else (1024, 2048, 4096, 8192, 16384)
    tables = [depth_table(depths), length_table(lengths, args.full_limit_gb)]
    text = "\n".join(table.markdown() for table in tables)
    print(text)
    if args.markdown:
        os.makedirs(os.path.dirname(os.path.abspath(args.markdown)), exist_ok=True)
        with open(args.markdown, "w", encoding="utf-8") as f:
            f.write(text)


if __name__ == "__main__":
    main()
