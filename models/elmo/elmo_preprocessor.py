"""Raw sentences -> ELMo's inputs, in graph ops (fine-tuning's tf.data and the SavedModel)."""

from __future__ import annotations

import keras

from lmfactory.models.backend import tf
from lmfactory.models.tokenizers.normalization import lowercase_characters
from lmfactory.models.tokenizers.word import split_words
from lmfactory.models.tokenizers.word_characters import (MAX_CHARACTERS_PER_TOKEN,
                                                         padded_character_ids)


@keras.saving.register_keras_serializable(package="lmfactory")
class ElmoPreprocessor(keras.layers.Layer):
    """A batch of sentences [B] -> ``token_ids`` [B, S], ``character_ids`` [B, S, C],
    ``padding_mask`` [B, S] (S = ``sequence_length``).

    A sentence is split into words as the ``word`` tokenizer splits it (`split_words`: any
    Unicode whitespace; invalid UTF-8 becomes U+FFFD) and framed by the boundary tokens the biLM
    was trained with (``<S> w_1 .. w_n </S>``, the vocabulary's ``cls`` / ``sep``; §3.4's
    biLM reads sentences so framed). Word ids come from the vocabulary's tokenizer (the first
    id of each word; ``unk`` for a word it does not know); character ids come from the raw
    words themselves (`word_character_ids`), lower-cased only if the vocabulary is, so a word
    outside the vocabulary keeps its spelling for the character CNN.

    Defined results: an empty (or all-whitespace) sentence is ``<S> </S>``; a sentence of more
    than S - 2 words keeps its first S - 2 (``words_kept`` tells how many); any character has
    byte ids (no unknown characters); long words are cut (`word_characters`).

    Args:
        tokenizer: the vocabulary's keras-nlp tokenizer.
        sequence_length: S, the boundary tokens included (at least 3).
        begin_token, end_token, pad_token: the ``cls``, ``sep`` and ``pad`` tokens.
        max_characters_per_token: C.
        lowercase: lower-case words before taking their characters.
    """

    def __init__(self, tokenizer, sequence_length: int, begin_token: str = "<S>",
                 end_token: str = "</S>", pad_token: str = "<pad>",
                 max_characters_per_token: int = MAX_CHARACTERS_PER_TOKEN,
                 lowercase: bool = False, **kwargs):
        super().__init__(**kwargs)
        if int(sequence_length) < 3:
            raise ValueError(f"sequence_length must be at least 3 (<S>, a word, </S>), got "
                             f"{sequence_length}")
        self.tokenizer = tokenizer
        self.sequence_length = int(sequence_length)
        self.begin_token, self.end_token, self.pad_token = begin_token, end_token, pad_token
        self.max_characters_per_token = int(max_characters_per_token)
        self.lowercase = bool(lowercase)
        ids = {}
        for token in (begin_token, end_token, pad_token):
            try:
                ids[token] = tokenizer.token_to_id(token)
            except (KeyError, ValueError):
                ids[token] = None
            if ids[token] is None:
                raise ValueError(f"The token {token!r} is not in the vocabulary")
        self.begin_id, self.end_id, self.pad_id = (int(ids[t]) for t in
                                                   (begin_token, end_token, pad_token))

    def split_words(self, sentences):
        """Ragged [B, <= S - 2] words of each sentence, truncated."""
        sentences = tf.reshape(tf.convert_to_tensor(sentences, tf.string), [-1])
        return split_words(sentences, lowercase=False)[:, :self.sequence_length - 2]

    def word_ids(self, words):
        """The tokenizer's first id of each word (ragged like ``words``)."""
        pieces = self.tokenizer(words.flat_values)
        if not isinstance(pieces, tf.RaggedTensor):
            pieces = tf.RaggedTensor.from_tensor(pieces)
        first = pieces[:, :1].to_tensor(default_value=self.pad_id, shape=[None, 1])[:, 0]
        return words.with_flat_values(tf.cast(first, tf.int32))

    def call(self, sentences):
        words = self.split_words(sentences)
        count = words.nrows()
        shape = [None, self.sequence_length]
        ids = tf.concat([tf.fill([count, 1], self.begin_id), self.word_ids(words),
                         tf.fill([count, 1], self.end_id)], axis=1)
        token_ids = ids.to_tensor(default_value=self.pad_id, shape=shape)
        padding_mask = tf.ones_like(ids, tf.bool).to_tensor(default_value=False, shape=shape)
        spelled = words.with_flat_values(lowercase_characters(words.flat_values)) \
            if self.lowercase else words
        framed = tf.concat([tf.fill([count, 1], self.begin_token), spelled,
                            tf.fill([count, 1], self.end_token)], axis=1)
        character_ids = padded_character_ids(framed.to_tensor(default_value="", shape=shape),
                                             padding_mask, self.max_characters_per_token,
                                             begin_sentence=self.begin_token,
                                             end_sentence=self.end_token)
        return {"token_ids": token_ids, "character_ids": tf.cast(character_ids, tf.int32),
                "padding_mask": padding_mask,
                "words_kept": tf.cast(words.row_lengths(), tf.int32)}

    def get_config(self):
        config = super().get_config()
        config.update({"tokenizer": keras.saving.serialize_keras_object(self.tokenizer),
                       "sequence_length": self.sequence_length,
                       "begin_token": self.begin_token, "end_token": self.end_token,
                       "pad_token": self.pad_token,
                       "max_characters_per_token": self.max_characters_per_token,
                       "lowercase": self.lowercase})
        return config

    @classmethod
    def from_config(cls, config):
        config["tokenizer"] = keras.saving.deserialize_keras_object(config["tokenizer"])
        return cls(**config)


def elmo_preprocessor(vocab_dir: str, sequence_length: int, num_text_features: int = 1,
                      task_args=None) -> ElmoPreprocessor:
    """The `ElmoPreprocessor` of a vocabulary folder (`Architecture.preprocessors` factory).
    ELMo's task models read one sentence; pairs are refused."""
    from lmfactory.models.tokenizers import load_tokenizer, read_tokenizer_config

    del task_args
    if num_text_features != 1:
        raise ValueError(f"ELMo's feature-based classifier reads one text feature, got "
                         f"{num_text_features}")
    config = read_tokenizer_config(vocab_dir)
    specials = config.get("special_tokens", {})
    missing = [role for role in ("cls", "sep", "pad") if role not in specials]
    if missing:
        raise ValueError(f"ELMo needs the vocabulary's {missing} tokens (<S>, </S>, padding)")
    return ElmoPreprocessor(load_tokenizer(vocab_dir), sequence_length,
                            begin_token=specials["cls"], end_token=specials["sep"],
                            pad_token=specials["pad"], lowercase=bool(config.get("lowercase")))
