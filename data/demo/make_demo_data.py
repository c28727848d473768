"""Rebuilds the bundled demo data from the public originals (kept for provenance).

    python data/demo/make_demo_data.py ../shared/data

* corpus.txt: WikiText-2 (v1) validation split, re-laid out in the BERT pretraining-corpus
  convention: one sentence per line, a blank line between documents (one document per
  paragraph; section headings dropped).
* sst2/train.tsv, sst2/dev.tsv: GLUE SST-2 train (67,349 rows) and dev (872 rows) as
  published. (A 20,000-row sample was tried first: dev accuracy 0.748-0.756, too close to the
  demo's 0.75 blessing threshold.)
"""

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
    (out / "sst2").mkdir(exist_ok=True)
    for split in ("train", "dev"):
        source = shared / "glue" / "SST-2" / f"{split}.tsv"
        (out / "sst2" / f"{split}.tsv").write_bytes(source.read_bytes())
    print(f"{len(docs)} documents, {sum(map(len, docs))} sentences")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(__file__).parent)
