"""Parallel text (a translation corpus such as Multi30k): one file per language, one
sentence a line, line n of one file the translation of line n of the other (gzip read
transparently). The ``parallel`` format's ``path`` / ``splits`` name the SOURCE-language
files; ``column_names: [source_language, target_language]`` name the two languages, and
each source file ``<stem>.<source>[.gz]`` is paired with ``<stem>.<target>[.gz]`` beside it.

Each line pair becomes one record: ``source`` and ``target`` (the two sentences) and
``text`` (both, one a line: what a corpus reader such as VocabularyGen learns a joint
vocabulary from). Punctuation is split off the words (`split_punctuation`, a stand-in for
the Moses tokenizer the paper's text went through, Bahdanau et al. 2015 §4.1), so a
whitespace word vocabulary does not hold "bushes." beside "bushes"; the serving model
applies the same rule to raw input. A pair with an empty side is a bad record (``empty``);
files of different lengths are an error naming both.
"""

from __future__ import annotations

import re
from typing import Iterator, Sequence

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from lmfactory.components.example_gen import formats
from lmfactory.models.tasks.seq2seq_preprocessor import ATTACH_TO_NEXT, ATTACH_TO_PREVIOUS

SOURCE_FEATURE = "source"
TARGET_FEATURE = "target"
# Punctuation split off the words, as an RE2 / Python `re` character class (both engines
# read it the same way: no \w, whose meaning differs between them).
PUNCTUATION = r"""([.,!?;:"()\[\]])"""


def split_punctuation(sentence: str) -> str:
    """``sentence`` with each punctuation mark a word of its own and single spaces."""
    return " ".join(re.sub(PUNCTUATION, r" \1 ", sentence).split())


def join_punctuation(sentence: str) -> str:
    """The inverse of `split_punctuation` for display and scoring: "Ein Mann ." ->
    "Ein Mann." (the rule the served translations follow)."""
    for pattern, rewrite in (ATTACH_TO_PREVIOUS, ATTACH_TO_NEXT):
        sentence = re.sub(pattern, rewrite, sentence)
    return sentence


def target_path(source_path: str, languages: Sequence[str]) -> str:
    """The target-language file paired with ``source_path`` (``train.en.gz`` ->
    ``train.de.gz`` for languages ``(en, de)``)."""
    source, target = languages
    match = re.search(rf"\.{re.escape(source)}(\.gz)?$", source_path)
    if match is None:
        raise ValueError(f"parallel input {source_path!r} must end in .{source} or "
                         f".{source}.gz (column_names names the languages {list(languages)})")
    return source_path[:match.start()] + f".{target}" + (match.group(1) or "")


def _lines(path: str) -> list[bytes]:
    """The lines of a (possibly gzip-compressed) file, without their line ends."""
    with FileSystems.open(path, compression_type=CompressionTypes.AUTO) as handle:
        return [b"" if line is None else line
                for line in formats.iter_file_lines(handle.read, 1 << 30)]


def read_pairs(source_path: str, languages: Sequence[str]) -> list[tuple[bytes, bytes]]:
    """The aligned (source line, target line) pairs of ``source_path`` and its partner."""
    if not languages or len(languages) != 2:
        raise ValueError(f"the parallel format needs column_names: [source_language, "
                         f"target_language], got {languages!r}")
    partner = target_path(source_path, languages)
    sources, targets = _lines(source_path), _lines(partner)
    if len(sources) != len(targets):
        raise ValueError(f"parallel files {source_path!r} ({len(sources)} lines) and "
                         f"{partner!r} ({len(targets)} lines) are not aligned")
    return list(zip(sources, targets))


def pair_example(source: bytes, target: bytes, max_chars: int):
    """The Example of one line pair, or a `formats.BadRecord`."""
    texts = []
    for payload in (source, target):
        text = formats.decode_record(payload.rstrip(b"\r"), max_chars)
        if isinstance(text, formats.BadRecord):
            return text
        text = split_punctuation(text)
        if not text:
            return formats.BadRecord(formats.EMPTY, "a side of the sentence pair is empty")
        texts.append(text.encode("utf-8"))
    return formats.make_example({
        SOURCE_FEATURE: formats.bytes_feature([texts[0]]),
        TARGET_FEATURE: formats.bytes_feature([texts[1]]),
        formats.TEXT_FEATURE: formats.bytes_feature([texts[0] + b"\n" + texts[1]])})


def iter_examples(source_path: str, options: formats.FormatOptions) -> Iterator:
    """One Example (or BadRecord) per line pair of ``source_path`` and its partner file."""
    for source, target in read_pairs(source_path, options.column_names):
        yield pair_example(source, target, options.max_record_chars)
