"""Greedy decoding with and without the key/value cache: time per generated token as the
generated length grows.

    .venv/bin/python benchmarks/generation.py
    .venv/bin/python benchmarks/generation.py --markdown generation.md   # also a table file

The model is GPT-2-shaped but narrower (default 4 layers, hidden 256, 4 heads, vocabulary
8000, random weights, `GPT2CausalLM`). For each batch size and each generated length N
(prompt of `--prompt-length` tokens, output of prompt + N tokens):

* "cached": `generate_ids(..., sampler="greedy")` (models/generation.py) inside one
  `tf.function`: the prompt fills the cache in one pass, then each step runs only the newest
  token through the network, attending over the cached keys and values. A step's
  projections and MLP cost the same at every N; what grows with N is the cache of
  prompt + N positions that every step attends over and that keras-nlp's cached attention
  writes into (TensorFlow tensors are immutable, so each step's update copies the
  layers' caches): memory traffic linear in N with a small constant, which shows at
  batch 8 and long outputs.
* "no cache": the same greedy decoding as one `tf.function` with a `tf.while_loop` whose
  step runs the whole prefix through the backbone (`backbone(...)`, as training does) and
  takes the argmax of the last position's logits: step t costs O(t), so the time per token
  grows linearly in N and the whole generation quadratically.

Both compute the same tokens (checked on every row; a difference is flagged). "ms/token" is
the time of one generation divided by N: one decoding step, which makes a token in every
row of the batch. Each time is the fastest of `--repeats` calls (fewer once a measurement
has taken `--budget` seconds: the long no-cache runs are timed once) after warm-up calls
that trace and compile (excluded); the minimum is the least disturbed by other processes on
a shared machine. "ratio" = no cache / cached. The default run takes about 3 minutes on 2
CPU cores.
"""

import argparse
import os
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from lmfactory import models  # noqa: E402
from lmfactory.models.gpt2 import GPT2CausalLM  # noqa: E402


def build_model(args):
    keras.utils.set_random_seed(0)
    backbone = models.build(
        "gpt2", "tiny", vocabulary_size=args.vocab, num_layers=args.layers,
        hidden_dim=args.hidden, num_heads=args.heads, intermediate_dim=4 * args.hidden,
        max_sequence_length=args.prompt_length + max(args.lengths), dropout=0.0)
    return GPT2CausalLM(backbone)


def cached_generator(lm):
    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32),
                                  tf.TensorSpec([], tf.int32)])
    def generate(prompt, max_length):
        return lm.generate_ids(prompt, max_length=max_length, sampler="greedy")["token_ids"]

    return generate


def uncached_generator(lm):
    backbone = lm.backbone

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32),
                                  tf.TensorSpec([], tf.int32)])
    def generate(prompt, max_length):
        batch, prompt_length = tf.shape(prompt)[0], tf.shape(prompt)[1]
        ids = tf.concat([prompt, tf.zeros([batch, max_length - prompt_length], tf.int32)], 1)

        def step(index, ids):
            prefix = ids[:, :index]
            hidden = backbone({"token_ids": prefix,
                               "padding_mask": tf.ones_like(prefix)})["sequence_output"]
            logits = backbone.token_embedding(hidden[:, -1], reverse=True)
            next_ids = tf.argmax(logits, axis=-1, output_type=tf.int32)
            column = tf.one_hot(index, max_length, on_value=1, off_value=0, dtype=tf.int32)
            return index + 1, ids + column[None, :] * next_ids[:, None]

        _, ids = tf.while_loop(lambda index, ids: index < max_length, step,
                               (prompt_length, ids))
        return ids

    return generate


def best_time(fn, prompt, max_length, repeats, budget):
    """The fastest of up to ``repeats`` calls, stopping early once the calls took
    ``budget`` seconds (always at least one call)."""
    max_length = tf.constant(max_length, tf.int32)
    times = []
    while len(times) < repeats and sum(times) < budget:
        start = time.perf_counter()
        result = fn(prompt, max_length).numpy()
        times.append(time.perf_counter() - start)
    return min(times), result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--lengths", type=int, nargs="+", default=[32, 64, 128, 256, 512],
                        help="generated tokens per row")
    parser.add_argument("--prompt-length", type=int, default=8)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--budget", type=float, default=4.0,
                        help="stop repeating a measurement after this many seconds")
    parser.add_argument("--markdown", metavar="PATH", help="also write the table there")
    args = parser.parse_args(argv)

    lm = build_model(args)
    gpu = tf.config.list_physical_devices("GPU")
    device = gpu[0].name if gpu else f"CPU ({os.cpu_count()} cores visible)"
    title = (f"Greedy decoding, GPT-2-shaped model: {args.layers} layers, hidden "
             f"{args.hidden}, {args.heads} heads, vocabulary {args.vocab}, "
             f"{lm.count_params() / 1e6:.1f}M parameters, random weights; prompt "
             f"{args.prompt_length} tokens; device {device}; best of up to {args.repeats} "
             f"calls after a warm-up")
    columns = ["batch", "generated", "cached ms/token", "no cache ms/token", "ratio"]
    print(title)
    print(f"{columns[0]:>5} {columns[1]:>9} {columns[2]:>16} {columns[3]:>18} {columns[4]:>7}")
    rows = []
    rng = np.random.default_rng(0)
    cached_fn, uncached_fn = cached_generator(lm), uncached_generator(lm)
    for batch in args.batch_sizes:
        prompt = tf.constant(rng.integers(0, args.vocab, (batch, args.prompt_length)),
                             tf.int32)
        # Warm-up: one trace per batch size serves every length (max_length is an input).
        shortest = tf.constant(args.prompt_length + min(args.lengths), tf.int32)
        cached_fn(prompt, shortest)
        uncached_fn(prompt, shortest)
        for length in sorted(args.lengths):
            max_length = args.prompt_length + length
            cached_fn(prompt, tf.constant(max_length))  # per-shape kernels of the cache
            cached, cached_ids = best_time(cached_fn, prompt, max_length, args.repeats,
                                           args.budget)
            uncached, uncached_ids = best_time(uncached_fn, prompt, max_length,
                                               args.repeats, args.budget)
            same = np.array_equal(cached_ids, uncached_ids)
            row = (batch, length, cached / length * 1e3, uncached / length * 1e3,
                   uncached / cached)
            rows.append(row + (same,))
            flag = "" if same else "  (tokens differ!)"
            print(f"{row[0]:>5} {row[1]:>9} {row[2]:>16.3f} {row[3]:>18.3f} {row[4]:>7.2f}"
                  f"{flag}", flush=True)

    if args.markdown:
        lines = [title, "", "| " + " | ".join(columns) + " |",
                 "|" + "---:|" * len(columns)]
        for batch, length, cached, uncached, ratio, same in rows:
            lines.append(f"| {batch} | {length} | {cached:.3f} | {uncached:.3f} | "
                         f"{ratio:.2f}{'' if same else ' (tokens differ)'} |")
        with open(args.markdown, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        print(f"wrote {args.markdown}")
    return rows


if __name__ == "__main__":
    main()
