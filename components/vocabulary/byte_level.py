"""The byte vocabulary: every UTF-8 byte value is a token (character-level LMs).

The character Transformer LM (Al-Rfou et al. 2018, §3) reads text byte by byte, as its
enwik8 experiments do, so there is nothing to learn: ids 0..255 are the byte values and the
special tokens follow from id 256
(:class:`lmfactory.models.tokenizers.Utf8ByteTokenizer`). VocabularyGen still reads the
corpus, to record which bytes it holds and how often (``byte_counts.json``): cheap, counted
by Beam like the other kinds' word counts, and what tells a user whether a corpus uses a few
dozen characters (Tiny Shakespeare: 65) or the whole byte range.
"""

from __future__ import annotations

import json
import os
from typing import Iterable, Mapping

from lmfactory.models import tokenizers

END_OF_TEXT = "<|endoftext|>"
# One token separates documents (causal_lm examples) and pads, as GPT-2's does.
SPECIAL_TOKENS = {"end_of_text": END_OF_TEXT, "pad": END_OF_TEXT}
STATISTICS_FILE = "byte_counts.json"


def vocabulary_size(special_tokens: Mapping[str, str]) -> int:
    """256 byte values plus the distinct special tokens."""
    return tokenizers.BYTE_VALUES + len(tokenizers.unique_special_tokens(dict(special_tokens)))


def tokenizer_config(special_tokens: Mapping[str, str] | None = None) -> dict:
    """The ``tokenizer.json`` content of a byte vocabulary folder (CONTRACTS §2)."""
    special_tokens = tokenizers.check_byte_special_tokens(
        SPECIAL_TOKENS if special_tokens is None else special_tokens)
    return {"kind": "byte", "special_tokens": special_tokens,
            "statistics_file": STATISTICS_FILE}


def write_files(output_dir: str, byte_counts: Iterable[tuple[str, int]],
                source: str = "") -> dict:
    """Writes ``byte_counts.json``: the corpus's byte statistics (bytes of its non-blank
    lines; line breaks are not counted). Returns what it wrote."""
    import tensorflow as tf

    counts = {ord(token): int(count) for token, count in byte_counts}
    total = sum(counts.values())
    statistics = {
        "source": source,
        "bytes": total,
        "distinct_bytes": len(counts),
        "non_ascii_bytes": sum(count for value, count in counts.items() if value >= 128),
        # byte value (decimal) -> count, most frequent first
        "counts": {str(value): count for value, count in
                   sorted(counts.items(), key=lambda item: (-item[1], item[0]))},
    }
    tf.io.gfile.makedirs(output_dir)
    with tf.io.gfile.GFile(os.path.join(output_dir, STATISTICS_FILE), "w") as f:
        json.dump(statistics, f, indent=1)
    return statistics
