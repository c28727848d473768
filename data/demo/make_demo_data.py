"""Rebuilds the bundled demo data from the public originals (kept for provenance).

    python data/demo/make_demo_data.py ../shared/data

* corpus.txt: WikiText-2 (v1) validation split, re-laid out in the BERT pretraining-corpus
  convention: one sentence per line, a blank line between documents (one document per
  paragraph; section headings dropped).
* sst2/train.tsv: a fixed random 20,000-row sample of GLUE SST-2 train; sst2/dev.tsv: the
  full GLUE SST-2 dev set (872 rows).
"""

import random
import re
import sys
from pathlib import Path

SENTENCE_END = re.compile(r"(?<= [.!?]) (?=[A-Z\"'])")


def wikitext_documents(path: Path):
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("="):
            continue
        sentences = [s.strip() for s in SENTENCE_END.split(line) if s.strip()]
        if sentences:
            yield sentences


def main(shared: Path, out: Path) -> None:
    docs = list(wikitext_documents(shared / "wikitext-2" / "valid.txt"))
    (out / "corpus.txt").write_text(
        "\n\n".join("\n".join(doc) for doc in docs) + "\n", encoding="utf-8")
    rows = (shared / "glue" / "SST-2" / "train.tsv").read_text(encoding="utf-8").splitlines()
    header, rows = rows[0], rows[1:]
    sample = random.Random(20260101).sample(rows, 20_000)
    (out / "sst2").mkdir(exist_ok=True)
    (out / "sst2" / "train.tsv").write_text("\n".join([header, *sample]) + "\n", encoding="utf-8")
    dev = (shared / "glue" / "SST-2" / "dev.tsv").read_text(encoding="utf-8")
    (out / "sst2" / "dev.tsv").write_text(dev, encoding="utf-8")
    print(f"{len(docs)} documents, {sum(map(len, docs))} sentences; 20000 train rows")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(__file__).parent)
