"""Trains a small character Transformer LM on Tiny Shakespeare and reports bits per character.

    python -m lmfactory.models.charlm.train_tiny_shakespeare \
        --data ../shared/data/tiny_shakespeare/input.txt --steps 1000

The text (1,115,394 characters) is split by position: the first 90% trains, the last 10% is
held out. Training draws blocks of `--sequence-length` + 1 characters at random offsets of
the training part and optimises the loss of Al-Rfou et al. 2018 §2 (every position, every
intermediate layer until l/(2n) of the steps, the character two ahead with weight 0.5).
The held-out part is scored with the final layer's predictions only, in windows sliding by
`--eval-stride` characters (`charlm_evaluation`), and reported in bits per character.

The paper trains with momentum 0.99 and a fixed learning rate of 0.003 for millions of
steps; a run of minutes uses Adam with warmup and cosine decay instead (script settings,
not the paper's).
"""

from __future__ import annotations

import argparse
import os
import time


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="the Tiny Shakespeare input.txt")
    parser.add_argument("--steps", type=int, default=1000, help="training steps")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--sequence-length", type=int, default=256, help="context L")
    parser.add_argument("--num-layers", type=int, default=6)
    parser.add_argument("--hidden-dim", type=int, default=256)
    parser.add_argument("--num-heads", type=int, default=4)
    parser.add_argument("--intermediate-dim", type=int, default=1024)
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--learning-rate", type=float, default=2e-3, help="peak learning rate")
    parser.add_argument("--warmup-fraction", type=float, default=0.05)
    parser.add_argument("--no-intermediate-losses", action="store_true")
    parser.add_argument("--no-multiple-targets", action="store_true")
    parser.add_argument("--eval-stride", type=int, default=None,
                        help="characters between evaluation windows (default L/2)")
    parser.add_argument("--eval-characters", type=int, default=None,
                        help="score only the first N held-out characters (default all)")
    parser.add_argument("--train-fraction", type=float, default=0.9)
    parser.add_argument("--log-every", type=int, default=100,
                        help="report every N steps (N divides --steps; default "
                             "min(100, steps))")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    for key in ("steps", "batch_size", "sequence_length", "log_every"):
        if getattr(args, key) < 1:
            parser.error(f"--{key.replace('_', '-')} must be >= 1")
    args.log_every = min(args.log_every, args.steps)
    if args.steps % args.log_every:
        parser.error(f"--log-every ({args.log_every}) must divide --steps ({args.steps})")
    if not 0.0 < args.train_fraction < 1.0:
        parser.error("--train-fraction must lie in (0, 1)")
    return args


def make_optimizer(keras, learning_rate, steps, warmup_fraction):
    warmup = int(round(steps * warmup_fraction))
    schedule = keras.optimizers.schedules.CosineDecay(
        initial_learning_rate=0.0 if warmup else learning_rate,
        decay_steps=max(steps - warmup, 1), alpha=0.1,
        warmup_target=learning_rate if warmup else None, warmup_steps=warmup)
    return keras.optimizers.Adam(learning_rate=schedule, clipnorm=1.0)


def main(argv=None) -> dict:
    args = parse_args(argv)
    import keras

    from lmfactory.models.charlm import charlm_vocabulary as vocabulary
    from lmfactory.models.charlm.charlm_backbone import CharTransformerBackbone
    from lmfactory.models.charlm.charlm_causal_lm import CharTransformerLM
    from lmfactory.models.charlm.charlm_evaluation import evaluate_bits_per_character

    if not os.path.exists(args.data):
        raise SystemExit(f"Tiny Shakespeare not found at {args.data}; pass --data PATH")
    with open(args.data, "rb") as f:
        ids = vocabulary.encode(f.read())
    split = int(len(ids) * args.train_fraction)
    train_ids, heldout_ids = ids[:split], ids[split:]
    if args.eval_characters:
        heldout_ids = heldout_ids[:args.eval_characters]
    print(f"data: {len(ids):,} bytes; train {len(train_ids):,}, held out {len(heldout_ids):,}")

    keras.utils.set_random_seed(args.seed)
    backbone = CharTransformerBackbone(
        vocabulary_size=vocabulary.VOCABULARY_SIZE, num_layers=args.num_layers,
        num_heads=args.num_heads, hidden_dim=args.hidden_dim,
        intermediate_dim=args.intermediate_dim, dropout=args.dropout,
        max_sequence_length=args.sequence_length)
    model = CharTransformerLM(backbone, total_steps=args.steps,
                              intermediate_losses=not args.no_intermediate_losses,
                              multiple_targets=not args.no_multiple_targets)
    model.compile(optimizer=make_optimizer(keras, args.learning_rate, args.steps,
                                           args.warmup_fraction))
    print(f"model: {args.num_layers} layers, hidden {args.hidden_dim}, {args.num_heads} heads, "
          f"FFN {args.intermediate_dim}, context {args.sequence_length}, dropout "
          f"{args.dropout}; parameters {backbone.count_params():,} inference, "
          f"{model.count_params():,} training")

    data = vocabulary.causal_lm_dataset(train_ids, args.sequence_length, args.batch_size,
                                        random_windows=True, seed=args.seed)
    started = time.time()

    def report(epoch, logs):
        print(f"step {(epoch + 1) * args.log_every}: loss {logs['loss']:.4f}  train bpc "
              f"{logs['bpc']:.4f}  active intermediate layers "
              f"{logs.get('active_intermediate_layers', 0.0):.2f}  "
              f"({time.time() - started:.0f} s)", flush=True)

    # One fit call: the random-window iterator continues across the reporting epochs.
    model.fit(data, epochs=args.steps // args.log_every, steps_per_epoch=args.log_every,
              verbose=0, callbacks=[keras.callbacks.LambdaCallback(on_epoch_end=report)])
    train_seconds = time.time() - started

    started = time.time()
    result = evaluate_bits_per_character(model, heldout_ids, args.sequence_length,
                                         stride=args.eval_stride)
    result.update(train_seconds=train_seconds, eval_seconds=time.time() - started)
    print(f"held-out: {result['characters']:,} characters in {result['windows']} windows, "
          f"nll {result['nll']:.4f} nats, bits per character {result['bpc']:.4f} "
          f"(train {train_seconds:.0f} s, eval {result['eval_seconds']:.0f} s)")
    return result


if __name__ == "__main__":
    main()
