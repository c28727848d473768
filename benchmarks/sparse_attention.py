"""Dense vs masked-dense vs sparse attention: time per forward+backward and memory, as the
sequence grows (Child et al. 2019 §4-5: factorised attention costs O(T sqrt(T)) instead of
O(T^2)).

    .venv/bin/python benchmarks/sparse_attention.py            # T = 256, 512, 1024
    .venv/bin/python benchmarks/sparse_attention.py --long     # adds 2048, 4096

For each length T the stride is l = round(sqrt(T)) and "fixed" uses `--summary` c = 4
summary positions per block, so sparse score memory grows as T * (l + c * T / l) ~ T^1.5.
Every row is one `SparseMultiHeadAttention` layer (batch 1, `--heads` heads of `--head-dim`,
Q/K/V/output projections included) run forward and backward (gradients of a scalar loss
with respect to the input and the weights) inside one `tf.function`; the time is the
fastest of `--repeats` calls after a warm-up call (the minimum is the least disturbed by
other processes on a shared machine).

Memory: on a GPU, the peak of TensorFlow's allocator during one call
(`tf.config.experimental.get_memory_info`), minus what was allocated before. On CPU that
counter is not kept, so the column is the size of the largest intermediate tensor in the
traced forward+backward graph (all shapes are static), which for dense attention is the
[B, heads, T, T] score matrix.

Rows: "dense" = causal attention, "masked <p>" = dense attention with the pattern as a
mask (same cost as dense), "sparse <p>" = the blocked computation that never forms the
T x T scores. Ratios are against "dense" at the same T.
"""

import argparse
import math
import os
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from lmfactory.models.attention import SparseMultiHeadAttention  # noqa: E402

METHODS = [
    ("dense", "dense", "masked_dense"),
    ("masked strided", "strided", "masked_dense"),
    ("sparse strided", "strided", "sparse"),
    ("masked fixed", "fixed", "masked_dense"),
    ("sparse fixed", "fixed", "sparse"),
]


def _largest_intermediate_bytes(concrete):
    largest = 0
    for op in concrete.graph.get_operations():
        for tensor in op.outputs:
            count = tensor.shape.num_elements()
            if count is not None and tensor.dtype.is_numeric:
                largest = max(largest, count * tensor.dtype.size)
    return largest


def run_one(length, pattern, implementation, heads, head_dim, summary, repeats, gpu):
    stride = max(1, round(math.sqrt(length)))
    summary = min(summary, stride)
    hidden = heads * head_dim
    layer = SparseMultiHeadAttention(
        num_heads=heads, key_dim=head_dim, pattern=pattern,
        stride=None if pattern == "dense" else stride, summary=summary,
        implementation=implementation)
    layer.build((1, length, hidden))
    x = tf.constant(np.random.default_rng(0).normal(size=(1, length, hidden)), tf.float32)

    @tf.function(input_signature=[tf.TensorSpec([1, length, hidden], tf.float32)])
    def step(inputs):
        with tf.GradientTape() as tape:
            tape.watch(inputs)
            loss = tf.reduce_sum(tf.square(layer(inputs)))
        grads = tape.gradient(loss, [inputs] + layer.trainable_variables)
        return loss, grads

    concrete = step.get_concrete_function()
    step(x)  # warm-up
    if gpu:
        tf.config.experimental.reset_memory_stats("GPU:0")
        before = tf.config.experimental.get_memory_info("GPU:0")["current"]
        _ = [g.numpy() for g in step(x)[1][:1]]
        memory = tf.config.experimental.get_memory_info("GPU:0")["peak"] - before
    else:
        memory = _largest_intermediate_bytes(concrete)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        loss, grads = step(x)
        grads[0].numpy()  # wait for the result
        times.append(time.perf_counter() - start)
    return min(times), memory, stride, summary


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[256, 512, 1024])
    parser.add_argument("--long", action="store_true", help="also T = 2048 and 4096")
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--head-dim", type=int, default=32)
    parser.add_argument("--summary", type=int, default=4, help="c of the fixed pattern")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    lengths = sorted(set(args.lengths + ([2048, 4096] if args.long else [])))
    gpu = bool(tf.config.list_physical_devices("GPU"))
    device = tf.config.list_physical_devices("GPU")[0].name if gpu else "CPU"
    memory_kind = ("peak GPU allocator memory during one call" if gpu else
                   "largest intermediate tensor of the traced graph (CPU: no allocator stats)")
    print(f"device: {device}; batch 1, {args.heads} heads x {args.head_dim}; "
          f"best of {args.repeats} forward+backward calls")
    print(f"memory column: {memory_kind}")
    header = (f"{'T':>5} {'l':>3} {'c':>2}  {'method':<15} {'ms/step':>9} {'memory MiB':>11} "
              f"{'time/dense':>10} {'mem/dense':>10}")
    print(header)
    print("-" * len(header))
    for length in lengths:
        dense_time = dense_memory = None
        for name, pattern, implementation in METHODS:
            seconds, memory, stride, summary = run_one(
                length, pattern, implementation, args.heads, args.head_dim, args.summary,
                args.repeats, gpu)
            if name == "dense":
                dense_time, dense_memory = seconds, memory
            print(f"{length:>5} {stride:>3} {summary:>2}  {name:<15} {seconds * 1e3:>9.2f} "
                  f"{memory / 2 ** 20:>11.2f} {seconds / dense_time:>10.2f} "
                  f"{memory / dense_memory:>10.3f}", flush=True)


if __name__ == "__main__":
    main()
