"""Intrinsic evaluations of word vectors (pure numpy): word analogies and word-pair
similarity, in the conventions of the files gensim ships in its test data.

* Analogies (Mikolov et al. 2013a §4.1, ``questions-words.txt``): ``: section`` headers,
  then ``a b c d`` lines, "a is to b as c is to d". A question is answered by the word
  closest (cosine) to ``vec(b) - vec(a) + vec(c)`` among the vocabulary's words other than
  a, b, c (the unit vectors summed, as gensim's ``most_similar`` and word2vec.c's
  ``compute-accuracy`` do); exact match with d counts. Questions with a word outside the
  vocabulary are skipped and counted (gensim's ``evaluate_word_analogies``).
* Similarity (WordSim-353, ``wordsim353.tsv``): ``word1<TAB>word2<TAB>score`` lines,
  ``#`` comments; the Spearman correlation (average ranks for ties) of the human scores
  with the cosine similarities over the pairs whose two words are in the vocabulary.

Words are compared lower-cased when ``lowercase`` (the word vocabularies here are).
"""

from __future__ import annotations

import numpy as np

from lmfactory.components.evaluator import metrics as metric_lib


def read_analogies(path: str, lowercase: bool = True) -> list:
    """``[(section, a, b, c, d)]`` of an analogy file; malformed lines are refused."""
    questions, section = [], ""
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            if line.startswith(":"):
                section = line[1:].strip()
                continue
            words = line.lower().split() if lowercase else line.split()
            if len(words) != 4:
                raise ValueError(f"{path}:{number}: an analogy line holds 4 words, got {line!r}")
            questions.append((section, *words))
    return questions


def read_word_pairs(path: str, lowercase: bool = True) -> list:
    """``[(word1, word2, score)]`` of a tab-separated similarity file (``#`` comments)."""
    pairs = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip() or line.startswith("#"):
                continue
            fields = line.rstrip("\n").split("\t")
            if len(fields) < 3:
                raise ValueError(f"{path}:{number}: expected word1<TAB>word2<TAB>score, got "
                                 f"{line.strip()!r}")
            first, second = (fields[0].lower(), fields[1].lower()) if lowercase \
                else (fields[0], fields[1])
            pairs.append((first, second, float(fields[2])))
    return pairs


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)


def analogy_accuracy(vectors: np.ndarray, words: list, questions: list,
                     batch_size: int = 512) -> dict:
    """Accuracy over the answerable ``questions`` (`read_analogies`) of ``vectors`` [V, d]
    whose row i is ``words[i]``; ``questions`` (answerable), ``skipped`` (a word missing)."""
    index = {word: i for i, word in enumerate(words)}
    answerable = [q for q in questions if all(word in index for word in q[1:])]
    result = {"questions": len(answerable), "skipped": len(questions) - len(answerable)}
    if not answerable:
        return dict(result, accuracy=0.0, correct=0)
    unit = unit_rows(np.asarray(vectors, dtype=np.float32))
    ids = np.array([[index[word] for word in q[1:]] for q in answerable])
    correct = 0
    for start in range(0, len(ids), batch_size):
        batch = ids[start:start + batch_size]
        query = unit[batch[:, 1]] - unit[batch[:, 0]] + unit[batch[:, 2]]
        scores = query @ unit.T
        rows = np.arange(len(batch))[:, None]
        scores[rows, batch[:, :3]] = -np.inf  # the question's own words are not answers
        correct += int(np.sum(scores.argmax(axis=1) == batch[:, 3]))
    return dict(result, accuracy=correct / len(answerable), correct=correct)


def similarity_spearman(vectors: np.ndarray, words: list, pairs: list) -> dict:
    """Spearman correlation of human scores and cosine similarities over the pairs of
    `read_word_pairs` with both words in ``words``; ``pairs`` used, ``skipped``."""
    index = {word: i for i, word in enumerate(words)}
    known = [(index[a], index[b], score) for a, b, score in pairs
             if a in index and b in index]
    result = {"pairs": len(known), "skipped": len(pairs) - len(known)}
    if len(known) < 2:
        return dict(result, spearman=0.0)
    unit = unit_rows(np.asarray(vectors, dtype=np.float32))
    first, second, human = (np.array(column) for column in zip(*known))
    cosine = np.sum(unit[first] * unit[second], axis=1)
    return dict(result, spearman=float(metric_lib.spearman(human, cosine)))
