"""A stand-in knowledge graph in ConceptNet's CSV format, built from text co-occurrence.

ConceptNet (Speer et al. 2017), KagNet's KG (Lin et al. 2019 §3.1), cannot be downloaded
here. The KG stages read ConceptNet's assertions CSV, so a user points the recipe at the
real dump; tests and the local benchmark use this stand-in instead. It is NOT ConceptNet:
its concepts are the lowercased content words of the given texts (stop words and words
under 3 letters left out) and its assertions are

* ``/r/RelatedTo`` between two words that occur within ``window`` words of each other in
  at least ``min_count`` texts (the pair's count is the assertion's weight);
* ``/r/FormOf`` from a word ending in "s" to the word without it when both are concepts
  (ConceptNet's inflection relation; it lets a plural answer reach its singular).

Each line: ``/a/[/r/R/,/c/en/x/,/c/en/y/]<TAB>/r/R<TAB>/c/en/x<TAB>/c/en/y<TAB>{"weight": w}``.

    python -m lmfactory.components.concept_paths.cooccurrence --out kg.csv \\
        --commonsenseqa ../shared/data/commonsenseqa/train_rand_split.jsonl \\
        --text ../shared/data/wikitext-2/valid.txt
"""

from __future__ import annotations

import argparse
import collections
import json
import re

from lmfactory.models.kagnet.kagnet_preprocessor import STOP_WORDS

_WORD = re.compile(r"[a-z]+")


def content_words(text: str) -> list:
    return [w for w in _WORD.findall(text.lower()) if len(w) >= 3 and w not in STOP_WORDS]


def cooccurrence_assertions(texts, window: int = 4, min_count: int = 2) -> list:
    """``(relation, head, tail, weight)`` assertions of the module docstring, sorted."""
    counts = collections.Counter()
    for text in texts:
        words = content_words(text)
        pairs = set()
        for i, word in enumerate(words):
            for other in words[i + 1:i + 1 + window]:
                if other != word:
                    pairs.add((min(word, other), max(word, other)))
        counts.update(pairs)
    assertions = [("/r/RelatedTo", a, b, n) for (a, b), n in counts.items() if n >= min_count]
    concepts = {w for _, a, b, _ in assertions for w in (a, b)}
    assertions += [("/r/FormOf", w, w[:-1], 1) for w in sorted(concepts)
                   if w.endswith("s") and w[:-1] in concepts]
    return sorted(assertions)


def conceptnet_line(relation: str, head: str, tail: str, weight) -> str:
    h, t = f"/c/en/{head.replace(' ', '_')}", f"/c/en/{tail.replace(' ', '_')}"
    return (f"/a/[{relation}/,{h}/,{t}/]\t{relation}\t{h}\t{t}\t"
            f"{json.dumps({'weight': float(weight)})}")


def write_conceptnet_csv(assertions, path: str) -> int:
    import tensorflow as tf

    with tf.io.gfile.GFile(path, "w") as f:
        for assertion in assertions:
            f.write(conceptnet_line(*assertion) + "\n")
    return len(assertions)


def commonsenseqa_stems(path: str, limit: int | None = None) -> list:
    """The question stems of a CommonsenseQA file (never the answers)."""
    from lmfactory.components.example_gen.multiple_choice_readers import read_commonsenseqa

    examples = read_commonsenseqa(path, require_labels=False).examples
    return [e.context for e in examples[:limit]]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--commonsenseqa", action="append", default=[],
                        help="CommonsenseQA JSONL whose question stems are counted")
    parser.add_argument("--text", action="append", default=[],
                        help="plain text file, one passage a line")
    parser.add_argument("--window", type=int, default=4)
    parser.add_argument("--min-count", type=int, default=2)
    args = parser.parse_args(argv)
    texts = [stem for path in args.commonsenseqa for stem in commonsenseqa_stems(path)]
    for path in args.text:
        with open(path, encoding="utf-8") as f:
            texts += [line for line in f if line.strip()]
    written = write_conceptnet_csv(cooccurrence_assertions(texts, args.window,
                                                           args.min_count), args.out)
    print(f"{written} assertions from {len(texts)} texts -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
