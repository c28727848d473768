"""Text normalisation steps several tokenizers share, as TensorFlow ops."""

from __future__ import annotations

from lmfactory.models.backend import tf


# Characters for which Python's str.isspace() is true (what `str.split()` splits on);
# RE2's \s is ASCII only. tests/test_tokenizer_import.py checks this against Python.
PYTHON_WHITESPACE = ("\\t-\\r\\x{1c}-\\x{20}\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}"
                     "\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}")


def lowercase_characters(inputs):
    """Lowercases each character on its own, as Hugging Face's tokenizers do.

    ``tf.strings.lower`` (ICU) maps every code point as Python's ``str.lower`` does (checked
    over all of Unicode) but also applies Unicode's Final_Sigma rule to whole strings ("ΟΣ"
    -> "ος"), which per-character lowercasing never does ("οσ"); capital sigma is mapped
    first so the rule cannot fire.
    """
    return tf.strings.lower(tf.strings.regex_replace(inputs, "\u03a3", "\u03c3"),
                            encoding="utf-8")
