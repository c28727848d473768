"""ELMo at tiny scale on CPU: a character-CNN biLM trained a few minutes on WikiText-2 valid
(forward and backward held-out perplexity, Peters et al. 2018 §3.1), then SST-2 with the
frozen biLM's features (§3.3) mixed from all layers (eq. 1) versus the top layer only
(Table 2's "last only"), same task model, budget and seed.

Data: ``../shared/data/wikitext-2/valid.txt`` (the last 10% of its lines held out) and
``../shared/data/glue/SST-2`` (a slice of train, the full dev set). The word vocabulary is
the lowercased words seen at least twice in WikiText's training lines and the SST-2 training
slice (SST-2 is lowercased). Everything runs in
this process through the library's pieces: the `bilm` objective's windows and character
table, `ElmoBiLM`, `ElmoPreprocessor`, `ElmoClassifier`.

    python benchmarks/elmo_features.py --out-dir benchmark_results [--quick]
"""

from __future__ import annotations

import collections
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

SST2_DIR = os.path.join(os.path.dirname(common.REPO), "shared", "data", "glue", "SST-2")
WNUT17_DIR = os.path.join(os.path.dirname(common.REPO), "shared", "data", "wnut17")
TAG_LENGTH = 48  # positions of a tagged sentence: <S>, up to 46 words, </S>
WINDOW = 20


def read_lines(path: str) -> list[str]:
    with open(path, encoding="utf-8") as handle:
        return [line.strip().lower() for line in handle if line.strip()
                and not line.strip().startswith("=")]


def word_vocabulary(lines, special_tokens: dict, min_count: int = 2) -> list[str]:
    counts = collections.Counter(word for line in lines for word in line.split())
    specials = list(dict.fromkeys(special_tokens.values()))
    words = sorted((w for w, c in counts.items() if c >= min_count and w not in specials),
                   key=lambda w: (-counts[w], w))
    return specials + words


def bilm_windows(lines, tokenizer, table, begin_id, end_id):
    """x dict of numpy arrays (windows of WINDOW ids at stride WINDOW - 1) for `ElmoBiLM`."""
    from lmfactory.components.pretraining_data import bilm

    ids = tokenizer(lines) if lines else []
    stream = bilm.sentence_stream([ids], begin_id, end_id)
    cut, _ = bilm.windows(stream, WINDOW)
    token_ids = np.asarray(cut, "int32")
    return {"token_ids": token_ids, "character_ids": table[token_ids].astype("int32"),
            "padding_mask": np.ones_like(token_ids)}


def held_out_perplexity(model, x, batch_size=64) -> dict:
    """exp(mean NLL) of each direction over the held-out windows."""
    import tensorflow as tf

    totals = {"forward": [0.0, 0.0], "backward": [0.0, 0.0]}
    for start in range(0, len(x["token_ids"]), batch_size):
        batch = {k: v[start:start + batch_size] for k, v in x.items()}
        out = model(batch, training=False)
        for direction in totals:
            targets = out[f"{direction}_targets"].numpy()
            weights = (targets >= 0).astype("float64")
            nll = tf.keras.losses.sparse_categorical_crossentropy(
                np.maximum(targets, 0), out[direction], from_logits=True).numpy()
            totals[direction][0] += float((nll * weights).sum())
            totals[direction][1] += float(weights.sum())
    return {d: float(np.exp(s / n)) for d, (s, n) in totals.items()}


def read_sst2(path: str, limit: int | None = None):
    rows = [line.rstrip("\n").split("\t") for line in open(path, encoding="utf-8")][1:]
    rows = [row for row in rows if len(row) == 2][:limit]
    return [row[0] for row in rows], np.asarray([int(row[1]) for row in rows])


def classify(backbone_path, vocabulary_size_args, preprocessor, train, dev, mix, steps,
             seed=0):
    """Dev accuracy of an `ElmoClassifier` (frozen biLM loaded from ``backbone_path``)."""
    import keras
    import tensorflow as tf

    from lmfactory.models.elmo import ElmoBackbone, ElmoClassifier

    keras.utils.set_random_seed(seed)
    backbone = ElmoBackbone(**vocabulary_size_args)
    backbone.load_weights(backbone_path)
    model = ElmoClassifier(backbone, num_classes=2, mix=mix, word_embedding_dim=64,
                           lstm_units=64, elmo_dropout=0.5, l2=0.001, dropout=0.2)
    model.compile(optimizer=keras.optimizers.Adam(1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    names = list(model.input)

    def features(texts, labels):
        packed = preprocessor(tf.constant(texts))
        return {name: packed[name].numpy() for name in names}, labels

    x_train, y_train = features(*train)
    x_dev, y_dev = features(*dev)
    started = time.perf_counter()
    batches = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(
        len(y_train), seed=seed).repeat().batch(32)
    model.fit(batches, steps_per_epoch=steps, epochs=1, verbose=0)
    seconds = time.perf_counter() - started
    _, accuracy = model.evaluate(x_dev, y_dev, batch_size=128, verbose=0)
    weights = [w for w in model.weights if "input_mix" in w.path]
    mix_weights = {w.path.split("/")[-1]: [round(float(v), 3) for v in np.ravel(w.numpy())]
                   for w in weights}
    return float(accuracy), seconds, mix_weights


def read_conll(path: str, limit: int | None = None):
    """(lowercased words, tags) per sentence of a WNUT-17 CoNLL file (blank or lone-tab
    lines separate sentences)."""
    sentences, words, tags = [], [], []
    for line in open(path, encoding="utf-8"):
        parts = line.rstrip("\n").split("\t")
        if len(parts) == 2 and parts[0].strip():
            words.append(parts[0].strip().lower())
            tags.append(parts[1].strip())
        elif words:
            sentences.append((words, tags))
            words, tags = [], []
    if words:
        sentences.append((words, tags))
    return sentences[:limit]


def tag(backbone_path, config, preprocessor, train, dev, mix, steps, seed=0):
    """Entity F1 on ``dev`` of an `ElmoTagger` (frozen biLM from ``backbone_path``) trained
    ``steps`` steps of 32 on ``train`` (lists of (words, tags)); each word is one position
    after <S>, longer sentences are cut to `TAG_LENGTH` - 2 words for both gold and
    predicted tags."""
    import keras
    import tensorflow as tf

    from lmfactory.components.evaluator.entity_metrics import entity_scores
    from lmfactory.models.elmo import ElmoBackbone, ElmoTagger

    labels = sorted({t for _, tags in train for t in tags} | {"O"})
    label_id = {label: i for i, label in enumerate(labels)}
    keras.utils.set_random_seed(seed)
    backbone = ElmoBackbone(**config)
    backbone.load_weights(backbone_path)
    model = ElmoTagger(backbone, num_labels=len(labels), mix=mix, word_embedding_dim=64,
                       lstm_units=64, elmo_dropout=0.5, l2=0.001, dropout=0.2)
    model.compile(optimizer=keras.optimizers.Adam(1e-3))
    names = list(model.input)

    def features(sentences):
        packed = preprocessor(tf.constant([" ".join(words) for words, _ in sentences]))
        x = {name: packed[name].numpy() for name in names}
        y = np.zeros((len(sentences), TAG_LENGTH), "int32")
        weight = np.zeros((len(sentences), TAG_LENGTH), "float32")
        for row, (_, tags) in enumerate(sentences):
            kept = tags[:TAG_LENGTH - 2]
            y[row, 1:1 + len(kept)] = [label_id.get(t, label_id["O"]) for t in kept]
            weight[row, 1:1 + len(kept)] = 1.0
        return x, y, weight

    x_train, y_train, w_train = features(train)
    x_dev, _, _ = features(dev)
    started = time.perf_counter()
    batches = tf.data.Dataset.from_tensor_slices((x_train, y_train, w_train)).shuffle(
        len(y_train), seed=seed).repeat().batch(32)
    model.fit(batches, steps_per_epoch=steps, epochs=1, verbose=0)
    seconds = time.perf_counter() - started
    logits = model.predict(x_dev, batch_size=128, verbose=0)
    predicted = logits.argmax(-1)
    gold, guessed = [], []
    for row, (_, tags) in enumerate(dev):
        kept = tags[:TAG_LENGTH - 2]
        gold.append(list(kept))
        guessed.append([labels[i] for i in predicted[row, 1:1 + len(kept)]])
    scores = entity_scores(gold, guessed)
    weights = [w for w in model.weights if "input_mix" in w.path]
    mix_weights = {w.path.split("/")[-1]: [round(float(v), 3) for v in np.ravel(w.numpy())]
                   for w in weights}
    return float(scores["f1"]), seconds, mix_weights


def run(scales=(1,), out_dir: str = ".", quick: bool = False,
        task: str = "sst2") -> common.Result:
    import keras
    import tensorflow as tf

    from lmfactory import models
    from lmfactory.models.elmo import ElmoBackbone, ElmoBiLM, ElmoPreprocessor
    from lmfactory.models.tokenizers.word import WordTokenizer
    from lmfactory.models.tokenizers.word_characters import word_character_ids

    del scales
    started = time.perf_counter()
    os.makedirs(out_dir, exist_ok=True)
    keras.utils.set_random_seed(0)
    specials = dict(models.get("elmo").special_tokens)
    lines = read_lines(common.WIKITEXT_VALID)
    split = int(len(lines) * 0.9)
    if task == "wnut17":
        train = read_conll(os.path.join(WNUT17_DIR, "wnut17train.conll"),
                           200 if quick else None)
        dev = read_conll(os.path.join(WNUT17_DIR, "emerging.dev.conll"), 50 if quick else None)
        task_lines = [" ".join(words) for words, _ in train]
    else:
        train = read_sst2(os.path.join(SST2_DIR, "train.tsv"), 400 if quick else 8000)
        dev = read_sst2(os.path.join(SST2_DIR, "dev.tsv"), 100 if quick else None)
        task_lines = train[0]
    # One vocabulary for the biLM's softmax and the task model's word embeddings: the LM
    # corpus's words and the task's training words (the paper's task models embed GloVe's
    # large vocabulary; a WikiText-only one would leave most SST-2 words unknown).
    vocabulary = word_vocabulary(lines[:split] + task_lines, specials)
    tokenizer = WordTokenizer(vocabulary, special_tokens=specials)
    table = word_character_ids(tf.constant(vocabulary), 50, begin_sentence=specials["cls"],
                               end_sentence=specials["sep"]).numpy()
    begin_id, end_id = tokenizer.token_to_id(specials["cls"]), tokenizer.token_to_id(
        specials["sep"])
    train_x = bilm_windows(lines[:split], tokenizer, table, begin_id, end_id)
    eval_x = bilm_windows(lines[split:], tokenizer, table, begin_id, end_id)

    config = dict(models.get("elmo").presets["tiny"], vocabulary_size=len(vocabulary),
                  lstm_units=256, projection_dim=64,
                  filters=[[1, 16], [2, 16], [3, 32], [4, 64], [5, 64]])
    backbone = ElmoBackbone(**config)
    bilm = ElmoBiLM(backbone)
    bilm.compile(optimizer=keras.optimizers.Adam(2e-3, clipnorm=10.0))
    before = held_out_perplexity(bilm, eval_x)
    epochs = 1 if quick else 3
    steps = 20 if quick else None
    data = tf.data.Dataset.from_tensor_slices(train_x).shuffle(len(train_x["token_ids"]),
                                                               seed=0)
    data = data.map(lambda x: (x, x["token_ids"])).batch(32, drop_remainder=True)
    bilm_started = time.perf_counter()
    history = bilm.fit(data.take(steps) if steps else data, epochs=epochs, verbose=0)
    bilm_seconds = time.perf_counter() - bilm_started
    after = held_out_perplexity(bilm, eval_x)
    backbone_path = os.path.join(out_dir, "elmo_bilm.weights.h5")
    backbone.save_weights(backbone_path)

    preprocessor = ElmoPreprocessor(tokenizer, TAG_LENGTH, begin_token=specials["cls"],
                                    end_token=specials["sep"], pad_token=specials["pad"])
    task_steps = 10 if quick else 500
    seeds = (0,) if quick else (0, 1, 2)
    evaluate = tag if task == "wnut17" else classify
    runs = {mix: [evaluate(backbone_path, config, preprocessor, train, dev, mix, task_steps,
                           seed=seed) for seed in seeds] for mix in ("all", "top")}
    task_name, score_name = (("WNUT-17 dev entity F1", "dev entity F1") if task == "wnut17"
                             else ("SST-2 dev accuracy", "dev accuracy"))
    results = {mix: (float(np.mean([r[0] for r in rows])), float(np.mean([r[1] for r in rows])),
                     rows[0][2]) for mix, rows in runs.items()}

    unknown = sum(tokenizer.token_to_id(specials["unk"]) == i
                  for i in eval_x["token_ids"].reshape(-1))
    tables = [
        common.Table(
            "biLM held-out perplexity (WikiText-2 valid, last 10% of lines)",
            ["", "forward", "backward"],
            [["before training", before["forward"], before["backward"]],
             [f"after {epochs} epoch(s), {bilm_seconds:.0f} s", after["forward"],
              after["backward"]]],
            note=f"{len(train_x['token_ids'])} training windows of {WINDOW} words, "
                 f"vocabulary {len(vocabulary)} words; {bilm.count_params():,} parameters; "
                 f"{unknown} <unk> ids among the held-out ids."),
        common.Table(
            f"{task_name}, frozen biLM features (§3.3)",
            ["ELMo mix", f"{score_name} (mean)", "per seed", "train seconds",
             "learned mix (seed 0)"],
            [[f"{mix} layers" if mix == "all" else "top layer only", acc,
              " / ".join(f"{r[0]:.4f}" for r in runs[mix]), round(sec), str(weights)]
             for mix, (acc, sec, weights) in results.items()],
            note=f"{len(task_lines)} training sentences, "
                 f"{len(dev) if task == 'wnut17' else len(dev[0])} dev sentences, "
                 f"{task_steps} steps of 32 per run, seeds {list(seeds)}; the same task "
                 f"model (layer-normalised mix, §3.2) for both rows."),
    ]
    findings = [f"mix of all layers {results['all'][0]:.4f} vs top layer only "
                f"{results['top'][0]:.4f}: {task_name} (mean of {len(seeds)} seeds)"]
    result = common.Result(
        name="ELMo: biLM perplexity and the scalar mix of all layers vs the top layer",
        tables=tables, findings=findings,
        figures={"perplexity_before": before, "perplexity_after": after,
                 "bilm_loss": history.history["loss"],
                 task: {mix: {"score": acc, "seconds": sec, "mix": w,
                                "per_seed": [r[0] for r in runs[mix]]}
                          for mix, (acc, sec, w) in results.items()}},
        seconds=time.perf_counter() - started)
    return result


def main(argv=None):
    parser = common.argument_parser(__doc__)
    parser.add_argument("--task", choices=("sst2", "wnut17"), default="sst2",
                        help="the feature-based task: SST-2 accuracy or WNUT-17 entity F1")
    args = parser.parse_args(argv)
    common.print_and_save(run(out_dir=args.out_dir, quick=args.quick, task=args.task),
                          args.out_dir, f"elmo_features_{args.task}.json")


if __name__ == "__main__":
    main()
