"""AWD-LSTM with and without the LSTM state carried across BPTT windows (Merity et al. 2018
§4.1 / §5; the reference code's ``batchify`` + ``repackage_hidden``): WikiText-2 held-out
perplexity of the same small network, trained the same number of steps from the same seed,

* carried: objective ``causal_lm_bptt``, 32 parallel streams read in windows of ~N(70, 5)
  words with the (h, c) of every layer carried from one window to the next (gradient
  stopped), the step scaled by seq_len / 70;
* independent: objective ``causal_lm``, shuffled windows of 80 words, each from the zero
  state, a prefix of ~N(70, 5) words trained per step (the recipes' behaviour before);

each scored two ways on the held-out paragraphs: carried over the whole held-out text (10
parallel streams, windows of 70, the paper's evaluation batch size 10) and on independent
windows of 80 from the zero state (the pipeline's evaluation before).

Data: WikiText-2 ``valid.txt`` (the split shipped in ../shared/data), non-empty lines in
order, one in ten held out by a hash of its text; a line is its whitespace words and
``<eos>``; the vocabulary is every word of the training lines (the rest ``<unk>``). The
records are written with the objectives' own ``shard_examples`` and read with
``features.make_dataset``, as the pipeline does. Adam (lr 3e-3, gradient norm clipped at
0.25, the recipe's rate and clip), batch 32.

    python benchmarks/awd_lstm_carried_state.py [--steps 600] [--markdown out.md]
"""

from __future__ import annotations

import argparse
import json
import os
import time
import zlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from common import WIKITEXT_VALID, Table  # noqa: E402

BATCH, EVAL_STREAMS, BPTT, WINDOW = 32, 10, 70, 80
SPECIALS = ("<pad>", "<unk>", "<eos>")


def corpus(path: str):
    """(train ids, held-out ids, vocabulary size): lines -> words + <eos>."""
    lines = [line.split() for line in open(path, encoding="utf-8") if line.strip()]
    held = [zlib.crc32(" ".join(words).encode()) % 10 == 0 for words in lines]
    train = [w for words, h in zip(lines, held) if not h for w in words + ["<eos>"]]
    test = [w for words, h in zip(lines, held) if h for w in words + ["<eos>"]]
    vocabulary = {w: i for i, w in enumerate(SPECIALS)}
    for word in train:
        vocabulary.setdefault(word, len(vocabulary))
    unk = vocabulary["<unk>"]
    return ([vocabulary.get(w, unk) for w in train], [vocabulary.get(w, unk) for w in test],
            len(vocabulary))


def write_records(folder: str, objective: str, ids, length: int) -> dict:
    """The ids as one document of ``objective``'s records (GZIP TFRecords) + its config."""
    import tensorflow as tf

    from lmfactory.components.pretraining_data import objectives

    os.makedirs(folder, exist_ok=True)
    config = {"objective": objective, "max_seq_length": length}
    eos = 2
    records, _ = objectives.get(objective).shard_examples([ids[:-1]], eos, config)
    with tf.io.TFRecordWriter(os.path.join(folder, "data.gz"), "GZIP") as writer:
        for record in records:
            writer.write(record)
    return config


def dataset(folder, config, batch, training, seed=0):
    from lmfactory.components.pretraining_data import features, objectives

    ordered = objectives.get(config["objective"]).ordered_streams
    return features.make_dataset(os.path.join(folder, "*.gz"), config, batch,
                                 shuffle=training and not ordered, repeat=training,
                                 seed=seed, training=training)


def build(vocabulary_size: int, stream_batch_size=None):
    from lmfactory import models
    from lmfactory.models.awd_lstm import AwdLstmCausalLM

    backbone = models.build("awd_lstm", "small", vocabulary_size=vocabulary_size)
    return AwdLstmCausalLM(backbone, bptt=BPTT, stream_batch_size=stream_batch_size)


def perplexity(model, data) -> tuple:
    import numpy as np
    import tensorflow as tf

    nll, tokens = 0.0, 0.0
    for x, y, weight in data:
        logits = tf.cast(model(x, training=False), tf.float32)
        loss = tf.keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
        nll += float(tf.reduce_sum(loss * weight))
        tokens += float(tf.reduce_sum(weight))
    return float(np.exp(nll / tokens)), int(tokens)


def train(mode: str, steps: int, work: str, seed: int) -> dict:
    import keras

    train_ids, test_ids, vocabulary_size = corpus(WIKITEXT_VALID)
    carried = mode == "carried"
    objective, length = ("causal_lm_bptt", BPTT) if carried else ("causal_lm", WINDOW)
    config = write_records(os.path.join(work, mode, "train"), objective, train_ids, length)
    keras.utils.set_random_seed(seed)
    model = build(vocabulary_size, BATCH if carried else None)
    model.compile(optimizer=keras.optimizers.Adam(3e-3, global_clipnorm=0.25))
    start = time.time()
    history = model.fit(dataset(os.path.join(work, mode, "train"), config, BATCH, True, seed),
                        steps_per_epoch=steps, epochs=1, verbose=0).history
    minutes = (time.time() - start) / 60
    scores = {}
    stream_config = write_records(os.path.join(work, "eval_streams"), "causal_lm_bptt",
                                  test_ids, BPTT)
    window_config = write_records(os.path.join(work, "eval_windows"), "causal_lm", test_ids,
                                  WINDOW)
    scorer = build(vocabulary_size, EVAL_STREAMS)
    for target, source in zip(scorer.trainable_weights, model.trainable_weights):
        target.assign(source)
    scores["carried"] = perplexity(scorer, dataset(os.path.join(work, "eval_streams"),
                                                   stream_config, EVAL_STREAMS, False))
    scores["independent"] = perplexity(model, dataset(os.path.join(work, "eval_windows"),
                                                      window_config, BATCH, False))
    return {"mode": mode, "steps": steps, "minutes": minutes, "train_nll": history["nll"][-1],
            "scores": scores, "loadavg": os.getloadavg(),
            "tokens": [len(train_ids), len(test_ids)], "vocabulary": vocabulary_size}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--mode", choices=("carried", "independent", "both"), default="both")
    parser.add_argument("--work-dir", default="/tmp/awd_lstm_carried_state")
    parser.add_argument("--markdown", default=None)
    args = parser.parse_args(argv)
    modes = ("carried", "independent") if args.mode == "both" else (args.mode,)
    results = []
    for mode in modes:
        result = train(mode, args.steps, args.work_dir, args.seed)
        print(json.dumps(result), flush=True)
        results.append(result)
    rows = [[r["mode"], r["scores"]["carried"][0], r["scores"]["independent"][0],
             r["steps"], round(r["minutes"], 1)] for r in results]
    table = Table(
        "AWD-LSTM (small): WikiText-2 held-out perplexity with and without the carried state",
        ["training", "ppl, state carried over the held-out streams",
         "ppl, independent windows of 80", "steps", "train min"], rows,
        note=f"`python benchmarks/awd_lstm_carried_state.py --steps {args.steps} --seed "
             f"{args.seed}`; batch 32, Adam 3e-3, clip 0.25; held-out "
             f"{results[0]['scores']['carried'][1]:,} / "
             f"{results[0]['scores']['independent'][1]:,} tokens scored; load average "
             f"{results[-1]['loadavg'][0]:.1f} on 2 cores.")
    print(table.markdown())
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as f:
            f.write(table.markdown())


if __name__ == "__main__":
    main()
