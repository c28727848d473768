"""Transformer-XL evaluation speed: cached memory vs the vanilla model's sliding window
(Dai et al. 2019, §4 "Evaluation speed", Table 9: up to 1,874x faster at 3,800 tokens).

The vanilla Transformer LM (Al-Rfou et al. 2018) evaluates with a window of C tokens that
slides by one position per predicted token: every prediction recomputes the whole context.
Transformer-XL evaluates segment after segment, each segment's queries attending to the
cached memory of the C previous positions' layer inputs (nothing is recomputed).

For each context length C, both run the same network (random weights: only speed is
measured) over the same token stream:

* sliding window: one forward pass over C tokens per predicted token (windows batched
  ``--window-batch`` at a time, so both sides run as throughput), the last position's
  log-probabilities kept;
* cached memory: segments of ``--segment`` tokens with mem_len = C (each query sees at
  least C previous positions), after a warm-up pass that fills the memory.

Both are `tf.function`s traced once per shape; the time per predicted token is the median of
``--repeats`` timed runs. Output: a markdown table (stdout and ``--out``/README.md) and JSON.

    nice -n 10 python benchmarks/transformer_xl_eval.py --out docs/benchmarks/transformer_xl
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

import numpy as np
import tensorflow as tf

from lmfactory import models
from lmfactory.models.transformer_xl import TransformerXLCausalLM


def build(args, context):
    backbone = models.build("transformer_xl", "tiny", vocabulary_size=args.vocabulary,
                            num_layers=args.layers, hidden_dim=args.hidden, num_heads=args.heads,
                            intermediate_dim=4 * args.hidden, cutoffs=[args.vocabulary // 5],
                            mem_len=context, dropout=0.0, max_sequence_length=context + 1)
    return TransformerXLCausalLM(backbone)


def sliding_window(model, stream, context, predictions, batch):
    """Seconds per predicted token of the vanilla evaluation (window C, stride 1)."""
    @tf.function(reduce_retracing=True)
    def last_positions(windows):
        return model({"token_ids": windows, "padding_mask": tf.ones_like(windows)})[:, -1]

    starts = np.arange(predictions)
    windows = np.stack([stream[s:s + context] for s in starts]).astype("int32")
    last_positions(tf.constant(windows[:batch]))  # trace
    began = time.perf_counter()
    for first in range(0, predictions, batch):
        last_positions(tf.constant(windows[first:first + batch])).numpy()
    return (time.perf_counter() - began) / predictions


def cached_memory(model, stream, context, predictions, segment):
    """Seconds per predicted token with the memory of the C previous positions."""
    backbone = model.backbone

    @tf.function(reduce_retracing=True)
    def step(ids, memory):
        log_probs, memory = model.call_with_memory(
            {"token_ids": ids, "padding_mask": tf.ones_like(ids)}, memory)
        return log_probs, memory

    memory = [tf.zeros((1, 0, backbone.hidden_dim)) for _ in backbone.transformer_layers]
    position = 0
    while position < context:  # fill the memory (traces each memory length once)
        _, memory = step(tf.constant(stream[None, position:position + segment], tf.int32),
                         memory)
        position += segment
    _, memory = step(tf.constant(stream[None, position:position + segment], tf.int32), memory)
    position += segment
    began = time.perf_counter()
    for first in range(position, position + predictions, segment):
        log_probs, memory = step(tf.constant(stream[None, first:first + segment], tf.int32),
                                 memory)
        log_probs.numpy()
    return (time.perf_counter() - began) / predictions


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--contexts", type=int, nargs="+", default=[128, 256, 512, 1024])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--vocabulary", type=int, default=1000)
    parser.add_argument("--segment", type=int, default=32)
    parser.add_argument("--window-predictions", type=int, default=64)
    parser.add_argument("--cached-predictions", type=int, default=512)
    parser.add_argument("--window-batch", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    tf.random.set_seed(0)
    rng = np.random.default_rng(0)
    rows = []
    for context in args.contexts:
        model = build(args, context)
        stream = rng.integers(0, args.vocabulary, 4 * context + 2 * args.cached_predictions
                              + args.window_predictions)
        window = statistics.median(
            sliding_window(model, stream, context, args.window_predictions, args.window_batch)
            for _ in range(args.repeats))
        cached = statistics.median(
            cached_memory(model, stream, context, args.cached_predictions, args.segment)
            for _ in range(args.repeats))
        rows.append({"context": context, "sliding_window_ms_per_token": 1e3 * window,
                     "cached_memory_ms_per_token": 1e3 * cached, "speedup": window / cached})
        print(json.dumps(rows[-1]), flush=True)
    setting = (f"{args.layers} layers, d_model {args.hidden}, {args.heads} heads, d_inner "
               f"{4 * args.hidden}, vocabulary {args.vocabulary} (adaptive softmax, one "
               f"cutoff), cached segments of {args.segment} tokens; {platform.processor() or platform.machine()}, "
               f"{os.cpu_count()} CPU cores (shared), TensorFlow {tf.__version__}")
    lines = ["| context C | sliding window (ms/token) | cached memory (ms/token) | speed-up |",
             "|---:|---:|---:|---:|"]
    lines += [f"| {r['context']} | {r['sliding_window_ms_per_token']:.2f} | "
              f"{r['cached_memory_ms_per_token']:.3f} | {r['speedup']:.0f}x |" for r in rows]
    table = "\n".join(lines)
    print(setting)
    print(table)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "eval_speed.json"), "w") as f:
            json.dump({"setting": setting, "args": vars(args), "rows": rows}, f, indent=1)
        with open(os.path.join(args.out, "eval_speed.md"), "w") as f:
            f.write(f"Setting: {setting}\n\n{table}\n")
    return rows


if __name__ == "__main__":
    main()
