"""word2vec skip-gram (SGNS) side by side with gensim's Word2Vec, the field's reference.

Both train on the same corpus with the same settings: WikiText-2's valid.txt (~217k words;
a small corpus, so analogy accuracies are low for both: the paper's figures come from
billions of words), lower-cased, whitespace-split, the literal ``<unk>`` tokens removed;
100-d vectors, window 5, 5 negatives, min count 5, subsampling 1e-3, 5 epochs, alpha
0.025 decaying linearly to 1e-4 * alpha, skip-gram.

lmfactory: the word vocabulary (components/vocabulary/word.py), the window records of
components/pretraining_data/word_windows.py (the function each Beam shard runs, here on
one shard in-process: Beam's own overhead is not counted), then `Word2VecSkipGram` trained
by Keras with SGD over minibatches of records (the pairs' word2vec.c steps summed),
reading the records back through ``features.make_dataset``. gensim: ``build_vocab`` +
``train`` (Cython, per-pair Hogwild SGD) with 2 worker threads (the machine's cores).

Scores: analogy accuracy on gensim's ``questions-words.txt`` and the Spearman correlation
on ``wordsim353.tsv`` (gensim.test.utils.datapath), both computed by
components/evaluator/word_vector_metrics.py over the words the two models share (the same
candidate set and the same answerable questions for both); gensim's own
``evaluate_word_analogies`` / ``evaluate_word_pairs`` on its full vocabulary are shown as a
check of that evaluator.

    /work/main/.venv/bin/python benchmarks/word2vec_gensim.py [--quick]
"""

from __future__ import annotations

import math
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

SETTINGS = {"vector_size": 100, "window": 5, "negative": 5, "min_count": 5, "sample": 1e-3,
            "epochs": 5, "alpha": 0.025, "min_alpha": 0.025 * 1e-4}
BATCH_RECORDS = 128  # window records per Keras step (~ 6 pairs each)
UNK = "<unk>"


def read_sentences(path: str, max_lines: int | None = None) -> list:
    """Lower-cased whitespace-split non-blank lines, literal <unk> removed."""
    sentences = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            words = [w for w in line.lower().split() if w != UNK]
            if words:
                sentences.append(words)
            if max_lines and len(sentences) >= max_lines:
                break
    return sentences


def train_gensim(sentences: list, settings: dict, workers: int):
    from gensim.models import Word2Vec

    started = time.perf_counter()
    model = Word2Vec(sg=1, hs=0, workers=workers, seed=1, **settings)
    model.build_vocab(sentences)
    model.train(sentences, total_examples=len(sentences), epochs=settings["epochs"])
    return model, time.perf_counter() - started


def _vocabulary(sentences: list, folder: str, min_count: int) -> str:
    from lmfactory.components.vocabulary import word as word_vocabulary
    from lmfactory.models import word2vec
    from lmfactory.models.tokenizers import write_tokenizer_config

    specials = word2vec.SPECIAL_TOKENS
    counts = word_vocabulary.count_lines([" ".join(s) for s in sentences], True, specials)
    tokens, token_counts = word_vocabulary.learn_vocabulary(counts, 10 ** 6, min_count,
                                                            specials)
    word_vocabulary.write_files(folder, tokens, token_counts)
    write_tokenizer_config(folder, word_vocabulary.tokenizer_config(True, specials))
    return folder


def train_lmfactory(sentences: list, settings: dict, folder: str) -> tuple:
    """Returns (words, vectors, seconds for records, seconds for training, steps)."""
    import keras
    import numpy as np
    import tensorflow as tf

    from lmfactory.components.pretraining_data import executor, features, word_windows
    from lmfactory.components.trainer.optimization import make_optimizer
    from lmfactory.models import build
    from lmfactory.models.tokenizers import load_tokenizer
    from lmfactory.models.word2vec import Word2VecSkipGram

    started = time.perf_counter()
    vocab_dir = _vocabulary(sentences, os.path.join(folder, "vocabulary"),
                            settings["min_count"])
    tokenizer = load_tokenizer(vocab_dir)
    ragged = tokenizer(tf.constant([" ".join(s) for s in sentences]))
    rows = ragged.to_list() if hasattr(ragged, "to_list") else ragged
    documents = [[np.asarray(ids, np.int32)] for ids in rows]
    config = features.resolve_config({
        "objective": "skipgram", "window": settings["window"],
        "subsample_threshold": settings["sample"], "dupe_factor": settings["epochs"]})
    describe = executor.describe_vocabulary(vocab_dir, "skipgram")
    statistics = word_windows.word_statistics(tokenizer, executor._state_config(vocab_dir))
    records, stats = word_windows.shard_examples(documents, statistics, config,
                                                 (config["random_seed"], "train", 0))
    path = os.path.join(folder, "records.gz")
    with tf.io.TFRecordWriter(path, options="GZIP") as writer:
        for record in records:
            writer.write(record)
    records_seconds = time.perf_counter() - started

    started = time.perf_counter()
    keras.utils.set_random_seed(1)
    data_config = dict(config, **describe)
    steps = math.ceil(len(records) / BATCH_RECORDS)
    backbone = build("word2vec", "small", vocabulary_size=tokenizer.vocabulary_size(),
                     embedding_dim=settings["vector_size"])
    model = Word2VecSkipGram(backbone, negatives=settings["negative"],
                             token_counts=describe["token_counts"], seed=1)
    model.compile(optimizer=make_optimizer(
        settings["alpha"], steps, warmup_fraction=0.0, weight_decay=0.0, clip_norm=0.0,
        final_learning_rate_fraction=settings["min_alpha"] / settings["alpha"],
        optimizer="sgd"))
    dataset = features.make_dataset(path, data_config, BATCH_RECORDS, shuffle=False,
                                    repeat=False)
    history = model.fit(dataset, epochs=1, verbose=0)
    train_seconds = time.perf_counter() - started
    words = tokenizer.get_vocabulary()
    return (words, backbone.word_vectors.numpy(), records_seconds, train_seconds, steps,
            stats, float(history.history["sgns_loss"][-1]))


def shared_scores(vectors_by_model: dict, vocabularies: dict) -> dict:
    """Analogy accuracy and WordSim Spearman of each model over the shared words."""
    from gensim.test.utils import datapath

    from lmfactory.components.evaluator import word_vector_metrics as metrics

    shared = sorted(set.intersection(*(set(words) for words in vocabularies.values()))
                    - {UNK, "<pad>"})
    questions = metrics.read_analogies(datapath("questions-words.txt"))
    pairs = metrics.read_word_pairs(datapath("wordsim353.tsv"))
    scores = {}
    for name, vectors in vectors_by_model.items():
        index = {word: i for i, word in enumerate(vocabularies[name])}
        rows = vectors[[index[word] for word in shared]]
        analogy = metrics.analogy_accuracy(rows, shared, questions)
        similarity = metrics.similarity_spearman(rows, shared, pairs)
        scores[name] = {"analogy_accuracy": analogy["accuracy"],
                        "analogy_questions": analogy["questions"],
                        "spearman": similarity["spearman"], "pairs": similarity["pairs"]}
    scores["shared_words"] = len(shared)
    return scores


def run(scales=(1,), out_dir: str = "benchmark_results", quick: bool = False) -> common.Result:
    del scales  # one corpus size
    from gensim.test.utils import datapath

    started = time.perf_counter()
    settings = dict(SETTINGS, epochs=1) if quick else dict(SETTINGS)
    sentences = read_sentences(common.WIKITEXT_VALID, 1500 if quick else None)
    words_in_corpus = sum(len(s) for s in sentences)
    gensim_model, gensim_seconds = train_gensim(sentences, settings, workers=2)
    with tempfile.TemporaryDirectory() as folder:
        (words, vectors, records_seconds, train_seconds, steps, stats,
         final_loss) = train_lmfactory(sentences, settings, folder)
    gensim_words = list(gensim_model.wv.index_to_key)
    scores = shared_scores({"lmfactory": vectors, "gensim": gensim_model.wv.vectors},
                           {"lmfactory": words, "gensim": gensim_words})
    own_analogy = gensim_model.wv.evaluate_word_analogies(datapath("questions-words.txt"))[0]
    own_pairs = gensim_model.wv.evaluate_word_pairs(datapath("wordsim353.tsv"))[1][0]
    ours, peer = scores["lmfactory"], scores["gensim"]
    table = common.Table(
        title=f"word2vec skip-gram on WikiText-2 valid ({words_in_corpus:,} words, "
              f"{settings['epochs']} epochs)",
        columns=["implementation", "vocabulary", "train seconds", "analogy accuracy",
                 "WordSim-353 Spearman"],
        rows=[["lmfactory (records + Keras SGD)", len(words) - 2,
               records_seconds + train_seconds, ours["analogy_accuracy"], ours["spearman"]],
              ["gensim 4.3.3 (2 threads)", len(gensim_words), gensim_seconds,
               peer["analogy_accuracy"], peer["spearman"]]],
        note=(f"Scores over the {scores['shared_words']:,} words both vocabularies hold: "
              f"{ours['analogy_questions']} answerable analogy questions, {ours['pairs']} "
              f"WordSim pairs. lmfactory's time: {records_seconds:.1f} s building the "
              f"window records ({stats['windows']:,} records, {stats['pairs']:,} pairs) + "
              f"{train_seconds:.1f} s training ({steps} steps of {BATCH_RECORDS} records). "
              f"gensim's own evaluation on its full vocabulary: analogy "
              f"{own_analogy:.4f}, WordSim Spearman {own_pairs:.4f}."))
    figures = {"settings": settings, "words_in_corpus": words_in_corpus, "scores": scores,
               "lmfactory": {"records_seconds": records_seconds, "train_seconds": train_seconds,
                             "steps": steps, "stats": stats, "final_sgns_loss": final_loss},
               "gensim": {"seconds": gensim_seconds, "own_analogy_accuracy": own_analogy,
                          "own_wordsim_spearman": own_pairs}}
    findings = [f"lmfactory takes {(records_seconds + train_seconds) / gensim_seconds:.1f}x "
                f"gensim's time (gensim: optimised Cython per-pair updates; lmfactory: Python "
                f"record building + TF minibatches)",
                "WikiText-2 valid is tiny for word2vec: both analogy accuracies are far "
                "below the paper's (billions of training words)."]
    return common.Result(name="word2vec_gensim", tables=[table], findings=findings,
                         figures=figures, seconds=time.perf_counter() - started)


def main() -> None:
    args = common.argument_parser(__doc__).parse_args()
    result = run(out_dir=args.out_dir, quick=args.quick)
    common.print_and_save(result, args.out_dir, "word2vec_gensim.json")


if __name__ == "__main__":
    main()
