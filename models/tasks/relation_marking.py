"""Relation classification and entity typing inputs: the raw text with its head and tail
entity mentions (or its one entity mention, `EntityMarkingPreprocessor`) marked, then
packed by the architecture's classification preprocessor.

ERNIE §3.5 (Figure 3, "Relation Classification"): "ERNIE applies a novel way to fine-tune
the relation classification task by modifying the input token sequence by adding two mark
tokens to highlight entity mentions. These extra mark tokens play a similar role like
position embeddings in the conventional relation classification models. Then, we also take
the [CLS] token embedding for classification. Note that we design different tokens [HD]
and [TL] for head entities and tail entities respectively." The released fine-tuning code
(thunlp/ERNIE, code/run_fewrel.py) writes the two marks as ordinary vocabulary characters
around the mentions ("# head #", "$ tail $"), which is what `mark_mentions` does here: a
mark is one token of the model's vocabulary (checked when the layer is built), so BERT and
ERNIE read the same marked sequence and classify it from [CLS] with their ordinary
classification heads (`Architecture.head("classification")`).

A mention is given by its surface string; its first occurrence not glued to a word
character (ASCII \\w, as RE2's) is the one marked (head first, then tail in the head-marked text). The data
builder (components/knowledge_graph/relation_data.py) keeps only examples whose linked
mentions are those first occurrences, so marking by string is exact for them.
keras-nlp / tf-text have no mention marker; this is our own (RE2 ``regex_replace`` per row,
graph ops only, so the exported SavedModel marks raw text the same way)."""

from __future__ import annotations

import re

import keras

from lmfactory.models.backend import tf

DEFAULT_MARKERS = {"head_marker": "*", "tail_marker": "~"}


def _mark_one(text: str, mention: str, marker: str) -> str:
    if not mention:
        return text
    pattern = r"(^|\W)(" + re.escape(mention) + r")(\W|$)"
    return re.sub(pattern, lambda m: f"{m.group(1)}{marker} {m.group(2)} {marker}{m.group(3)}",
                  text, count=1, flags=re.ASCII)


def mark_mentions(text: str, head: str, tail: str, head_marker: str = "*",
                  tail_marker: str = "~") -> str:
    """The reference (Python) marking: ``text`` with the first occurrence of ``head`` not
    glued to a word character put between two ``head_marker``s, then that of ``tail`` between two
    ``tail_marker``s (an empty or absent mention leaves the text as it is)."""
    return _mark_one(_mark_one(text, head, head_marker), tail, tail_marker)


def _tf_mark(texts, mentions, marker: str):
    """`_mark_one` in graph ops: RE2 with the mention quoted literally (\\Q...\\E)."""
    rewrite = f"\\1{marker} \\2 {marker}\\3"
    # \E inside a mention would end the literal quote: escape it as \E\\E\Q.
    quoted = tf.strings.regex_replace(mentions, r"\\E", r"\\E\\\\E\\Q")
    patterns = tf.strings.join(["(^|\\W)(\\Q", quoted, "\\E)(\\W|$)"])

    def one(row):
        text, pattern, mention = row
        marked = tf.strings.regex_replace(text, pattern, rewrite, replace_global=False)
        return tf.where(tf.strings.length(mention) > 0, marked, text)

    return tf.map_fn(one, (texts, patterns, mentions),
                     fn_output_signature=tf.TensorSpec([], tf.string))


def _token_id(tokenizer, token: str):
    try:  # keras-hub's WordPiece raises a ValueError for a token it lacks
        return tokenizer.token_to_id(token)
    except (ValueError, KeyError):
        return None


def check_markers(inner, markers: dict) -> None:
    """Each mark (``{task_args name: mark}``) must be one token of ``inner``'s vocabulary (a
    one-line ValueError naming the recipe field otherwise)."""
    tokenizer = getattr(inner, "tokenizer", None)
    if tokenizer is None:
        return
    for name, marker in markers.items():
        if "\\" in marker or not marker.strip() or _token_id(tokenizer, marker) is None:
            raise ValueError(f"{name} {marker!r} is not a token of the vocabulary; choose a "
                             f"single character the vocabulary holds "
                             f"(finetuning.task_args.{name})")


@keras.saving.register_keras_serializable(package="lmfactory")
class RelationMarkingPreprocessor(keras.layers.Layer):
    """``(text, head, tail)`` batches of raw strings [B] -> the classification head's inputs
    of the marked text (`mark_mentions` in graph ops, then ``inner``).

    Args:
        inner: the architecture's one-segment classification preprocessor (BERT's cls/sep
            packing; ERNIE's, which also links the marked text's entities to the KG).
        head_marker, tail_marker: the two mark tokens; each must be one token of the
            inner preprocessor's vocabulary (a one-line ValueError otherwise).
    """

    def __init__(self, inner, head_marker: str = "*", tail_marker: str = "~", **kwargs):
        super().__init__(**kwargs)
        self.inner = inner
        self.head_marker = str(head_marker)
        self.tail_marker = str(tail_marker)
        if self.head_marker == self.tail_marker:
            raise ValueError(f"head_marker and tail_marker must differ (§3.5 [HD] / [TL]), "
                             f"both are {self.head_marker!r}")
        check_markers(inner, {"head_marker": self.head_marker,
                              "tail_marker": self.tail_marker})

    def mark(self, texts, heads, tails):
        texts, heads, tails = (tf.reshape(tf.convert_to_tensor(value, tf.string), [-1])
                               for value in (texts, heads, tails))
        return _tf_mark(_tf_mark(texts, heads, self.head_marker), tails, self.tail_marker)

    def call(self, segments):
        if not isinstance(segments, (list, tuple)) or len(segments) != 3:
            raise ValueError("RelationMarkingPreprocessor takes (text, head, tail)")
        return self.inner((self.mark(*segments),))

    def get_config(self):
        config = super().get_config()
        config.update({"inner": keras.saving.serialize_keras_object(self.inner),
                       "head_marker": self.head_marker, "tail_marker": self.tail_marker})
        return config

    @classmethod
    def from_config(cls, config):
        config["inner"] = keras.saving.deserialize_keras_object(config["inner"])
        return cls(**config)


DEFAULT_ENTITY_MARKER = "*"


def mark_entity(text: str, mention: str, entity_marker: str = DEFAULT_ENTITY_MARKER) -> str:
    """The reference (Python) marking of entity typing: the first occurrence of ``mention``
    not glued to a word character put between two ``entity_marker``s."""
    return _mark_one(text, mention, entity_marker)


@keras.saving.register_keras_serializable(package="lmfactory")
class EntityMarkingPreprocessor(keras.layers.Layer):
    """``(text, mention)`` batches of raw strings [B] -> the classification head's inputs of
    the text with the mention marked, then ``inner``. Entity typing, ERNIE §3.5 (Figure
    3): the input sequence is modified by a mention mark token [ENT] around the entity
    mention, and the sequence is classified from [CLS] as for relation classification; the
    released thunlp/ERNIE code/run_typing.py writes the mark as one ordinary vocabulary
    character on both sides of the mention, as `mark_entity` does here.

    Args:
        inner: the architecture's one-segment classification preprocessor.
        entity_marker: the mark token ([ENT]); one token of the inner preprocessor's
            vocabulary (a one-line ValueError otherwise).
    """

    def __init__(self, inner, entity_marker: str = DEFAULT_ENTITY_MARKER, **kwargs):
        super().__init__(**kwargs)
        self.inner = inner
        self.entity_marker = str(entity_marker)
        check_markers(inner, {"entity_marker": self.entity_marker})

    def mark(self, texts, mentions):
        texts, mentions = (tf.reshape(tf.convert_to_tensor(value, tf.string), [-1])
                           for value in (texts, mentions))
        return _tf_mark(texts, mentions, self.entity_marker)

    def call(self, segments):
        if not isinstance(segments, (list, tuple)) or len(segments) != 2:
            raise ValueError("EntityMarkingPreprocessor takes (text, mention)")
        return self.inner((self.mark(*segments),))

    def get_config(self):
        config = super().get_config()
        config.update({"inner": keras.saving.serialize_keras_object(self.inner),
                       "entity_marker": self.entity_marker})
        return config

    @classmethod
    def from_config(cls, config):
        config["inner"] = keras.saving.deserialize_keras_object(config["inner"])
        return cls(**config)
