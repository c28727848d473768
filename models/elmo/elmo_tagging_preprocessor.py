"""Word-tokenized sentences (and tags) -> ELMo tagger inputs: the token-classification
packing plus each token's character ids."""

from __future__ import annotations

import keras
import keras_nlp

from lmfactory.models.backend import tf
from lmfactory.models.tasks.token_classification_preprocessor import (
    TokenClassificationPreprocessor, as_ragged_words)
from lmfactory.models.tokenizers.normalization import lowercase_characters
from lmfactory.models.tokenizers.word_characters import (MAX_CHARACTERS_PER_TOKEN,
                                                         padded_character_ids)


@keras.saving.register_keras_serializable(package="lmfactory")
class ElmoTaggingPreprocessor(TokenClassificationPreprocessor):
    """`TokenClassificationPreprocessor` (``<S> w_1 .. w_n </S>`` with the vocabulary's
    ``cls`` / ``sep``, labels on each word's first token, ``word_ids``) plus
    ``character_ids`` [B, S, C]: at each position the characters of the word its token came
    from (`word_characters`; the boundary tokens' own characters; zeros on padding),
    lower-cased only if the vocabulary is. A word keeps its spelling even when its id is
    ``unk``, which is what the biLM's character CNN is for (Peters et al. 2018 §3.4).

    Args: those of `TokenClassificationPreprocessor`, plus ``max_characters_per_token`` (C)
    and ``lowercase``.
    """

    def __init__(self, tokenizer, label_vocabulary, sequence_length: int = 128,
                 special_tokens=None, max_characters_per_token: int = MAX_CHARACTERS_PER_TOKEN,
                 lowercase: bool = False, **kwargs):
        super().__init__(tokenizer, label_vocabulary, sequence_length=sequence_length,
                         special_tokens=special_tokens, **kwargs)
        self.max_characters_per_token = int(max_characters_per_token)
        self.lowercase = bool(lowercase)
        self.word_packer = keras_nlp.layers.StartEndPacker(
            sequence_length=self.sequence_length, start_value=self.special_tokens["cls"],
            end_value=self.special_tokens["sep"], pad_value="", name="word_packer")

    def _featurize(self, words, tags):
        outputs = super()._featurize(words, tags)
        words = as_ragged_words(words)
        pieces = self.tokenizer(words.flat_values)
        spelled = lowercase_characters(words.flat_values) if self.lowercase \
            else words.flat_values
        # The word of each token, per sentence, packed in step with the token ids.
        piece_words = tf.gather(spelled, pieces.value_rowids())
        per_sentence = tf.RaggedTensor.from_row_splits(
            pieces.with_flat_values(piece_words), words.row_splits,
            validate=False).merge_dims(1, 2)
        outputs["character_ids"] = tf.cast(padded_character_ids(
            self.word_packer(per_sentence), outputs["padding_mask"],
            self.max_characters_per_token, begin_sentence=self.special_tokens["cls"],
            end_sentence=self.special_tokens["sep"]), tf.int32)
        return outputs

    def get_config(self):
        config = super().get_config()
        config.update({"max_characters_per_token": self.max_characters_per_token,
                       "lowercase": self.lowercase})
        return config


def elmo_tagging_preprocessor(vocab_dir: str, label_vocabulary,
                              sequence_length: int) -> ElmoTaggingPreprocessor:
    """The `ElmoTaggingPreprocessor` of a vocabulary folder (`Architecture.preprocessors`
    factory of the ``tagging`` kind)."""
    from lmfactory.models.tokenizers import load_tokenizer, read_tokenizer_config

    config = read_tokenizer_config(vocab_dir)
    specials = config.get("special_tokens", {})
    return ElmoTaggingPreprocessor(
        load_tokenizer(vocab_dir), label_vocabulary, sequence_length=sequence_length,
        special_tokens={role: specials[role] for role in ("cls", "sep", "pad")},
        lowercase=bool(config.get("lowercase")))
