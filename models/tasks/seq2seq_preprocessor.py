"""Raw sentence pairs <-> the inputs and targets of a `Seq2SeqLM` (in graph ops, so it runs
inside tf.data and inside the serving SavedModel).

* Source: the sentence's tokens, then the end-of-sentence token (the paper's sentences end
  with one, Bahdanau et al. 2015 §2.1 / Appendix A.2), truncated to ``sequence_length``
  (the end token kept), right-padded to the longest in the batch: ``encoder_token_ids``,
  ``encoder_padding_mask``. An
  empty sentence is the end token alone (a defined input; its translation is whatever
  the model makes of it).
* Target (teacher forcing): decoder inputs y_0 = the start token, then the target tokens
  (``decoder_token_ids``); targets the target tokens then the end token (each position
  predicts the next word); weights 1 on real targets.
* Output: generated ids (start token first) -> text, cut at the first end token, with
  split-off punctuation attached again (`ATTACH_TO_PREVIOUS`, `ATTACH_TO_NEXT`).

``punctuation``: an RE2 character class in a group; each match is split off as a word of
its own before the word tokenizer runs (the rule the ingested text went through).
"""

import keras

from lmfactory.models.backend import tf

# The inverse of the punctuation split, for output text: closing marks attach to the word
# before them, opening ones to the word after (RE2 / Python `re` patterns and rewrites).
ATTACH_TO_PREVIOUS = (r" ([.,!?;:)\]])", r"\1")
ATTACH_TO_NEXT = (r"([(\[]) ", r"\1")


class Seq2SeqPreprocessor(keras.layers.Layer):
    """Tokenizes and packs sentence pairs for an encoder-decoder.

    Args:
        tokenizer: a keras-nlp tokenizer returning ragged ids (``sequence_length=None``)
            whose vocabulary reserves ``start_token`` and ``end_token``.
        sequence_length: the longest source / target in tokens (end token included).
        start_token, end_token: the decoder's first input and the end-of-sentence token.
        punctuation: RE2 group split off words before tokenizing, or None.
    """

    def __init__(self, tokenizer, sequence_length, start_token, end_token, punctuation=None,
                 **kwargs):
        super().__init__(trainable=False, **kwargs)
        self.tokenizer = tokenizer
        self.sequence_length = int(sequence_length)
        self.start_token, self.end_token = start_token, end_token
        self.punctuation = punctuation
        self.start_token_id = int(tokenizer.token_to_id(start_token))
        self.end_token_id = int(tokenizer.token_to_id(end_token))

    def _tokens(self, texts):
        texts = tf.convert_to_tensor(texts, tf.string)
        if self.punctuation:
            texts = tf.strings.regex_replace(texts, self.punctuation, r" \1 ")
        tokens = self.tokenizer(texts)
        if isinstance(tokens, list):  # keras-hub hands eager ragged results back as lists
            return tf.ragged.constant(tokens, dtype=tf.int32, ragged_rank=1)
        return tf.cast(tokens, tf.int32)

    def _dense(self, ragged):
        """Ids right-padded to the batch's longest row (at most ``sequence_length``: no
        step is spent on columns that are padding in every row) and their padding mask."""
        ids = ragged.to_tensor(0)
        return ids, tf.sequence_mask(ragged.row_lengths(), tf.shape(ids)[1], tf.int32)

    def source_inputs(self, texts):
        """Sources [B] -> ``encoder_token_ids``, ``encoder_padding_mask`` [B, L]."""
        tokens = self._tokens(texts)[:, :self.sequence_length - 1]
        ends = tf.fill([tokens.nrows(), 1], self.end_token_id)
        ids, mask = self._dense(tf.concat([tokens, tf.RaggedTensor.from_tensor(ends)], 1))
        return {"encoder_token_ids": ids, "encoder_padding_mask": mask}

    def training_inputs(self, sources, targets):
        """(inputs, targets [B, L], weights [B, L]) of a batch of sentence pairs."""
        tokens = self._tokens(targets)[:, :self.sequence_length - 1]
        rows = tokens.nrows()
        starts = tf.RaggedTensor.from_tensor(tf.fill([rows, 1], self.start_token_id))
        ends = tf.RaggedTensor.from_tensor(tf.fill([rows, 1], self.end_token_id))
        decoder_ids, decoder_mask = self._dense(tf.concat([starts, tokens], 1))
        target_ids, weights = self._dense(tf.concat([tokens, ends], 1))
        inputs = dict(self.source_inputs(sources), decoder_token_ids=decoder_ids,
                      decoder_padding_mask=decoder_mask)
        return inputs, target_ids, tf.cast(weights, tf.float32)

    def detokenize(self, token_ids):
        """Generated ids [B, T] (start token first) -> sentences [B], cut at the end."""
        token_ids = tf.cast(token_ids, tf.int32)[:, 1:]
        is_end = tf.cast(token_ids == self.end_token_id, tf.int32)
        keep = tf.equal(tf.cumsum(is_end, axis=1, exclusive=True) + is_end, 0)
        lengths = tf.reduce_sum(tf.cast(keep, tf.int32), axis=1)
        ragged = tf.RaggedTensor.from_tensor(token_ids, lengths=lengths)
        text = self.tokenizer.detokenize(ragged)
        if self.punctuation:
            for pattern, rewrite in (ATTACH_TO_PREVIOUS, ATTACH_TO_NEXT):
                text = tf.strings.regex_replace(text, pattern, rewrite)
        return text

    def call(self, texts):
        return self.source_inputs(texts)

    def get_config(self):
        config = super().get_config()
        config.update({"tokenizer": keras.layers.serialize(self.tokenizer),
                       "sequence_length": self.sequence_length,
                       "start_token": self.start_token, "end_token": self.end_token,
                       "punctuation": self.punctuation})
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["tokenizer"] = keras.layers.deserialize(config["tokenizer"])
        return cls(**config)
