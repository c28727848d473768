"""The serving SavedModel of a token tagger (NER): raw sentences in, one tag per word out.

``serving_default(sentences)``: ``sentences`` is a 1-D batch of UTF-8 strings; each is split
into words on whitespace in the graph (``tf.strings.split``, the CoNLL convention of one
token per whitespace-separated word), featurized with the training preprocessor
(``models/tasks/token_classification_preprocessor.py``: WordPiece, ``[CLS] ... [SEP]``,
first sub-tokens), run through the `TokenClassifier`, and the prediction at each word's
first sub-token becomes the word's tag (BERT §4.3). Words beyond the packed length get
``O`` (the label vocabulary's first entry).

Returns ``{"tags": [B, W] string, "words": [B, W] string, "lengths": [B] int32}`` where W
is the longest sentence in words and rows are padded with ``""``; ``lengths`` gives each
sentence's number of words (the ragged result, made dense for TF Serving).
"""

from __future__ import annotations

import tensorflow as tf

from lmfactory.models import saved_model
from lmfactory.models.request_length import serving_multiple
from lmfactory.models.tasks.ner_training import predict_word_label_ids

SERVING_SIGNATURE = "serving_default"


class TaggerServing(tf.Module):
    """``serving_default(sentences) -> {tags, words, lengths}`` (see the module docstring).

    Args:
        preprocessor: a `TokenClassificationPreprocessor` (its ``label_vocabulary`` names
            the tags).
        model: the trained `TokenClassifier`.
    """

    def __init__(self, preprocessor, model):
        super().__init__(name="tagger_serving")
        self.preprocessor = preprocessor
        self.model = model
        self.label_vocabulary = tf.constant(list(preprocessor.label_vocabulary))
        # each request runs at its longest sentence's length (models/request_length.py)
        self.length_multiple = serving_multiple(model)

    def tag(self, sentences):
        check = tf.debugging.assert_rank(
            sentences, 1,
            message="serving_default: 'sentences' must be a 1-D batch of UTF-8 strings")
        with tf.control_dependencies([check]):
            sentences = tf.reshape(sentences, [-1])
        words = tf.strings.split(sentences)
        label_ids = predict_word_label_ids(self.model, self.preprocessor, words,
                                           self.length_multiple)
        tags = label_ids.with_flat_values(tf.gather(self.label_vocabulary,
                                                    label_ids.flat_values))
        return {"tags": tags.to_tensor(default_value=""),
                "words": words.to_tensor(default_value=""),
                "lengths": tf.cast(words.row_lengths(), tf.int32)}

    def signature(self):
        # Unknown rank on purpose (as export.py does): a loaded signature does not enforce
        # its declared shape, and the rank check above gives the clear message.
        @tf.function(input_signature=[tf.TensorSpec(None, tf.string, name="sentences")],
                     autograph=False)
        def serve(sentences):
            return self.tag(sentences)

        return serve.get_concrete_function()


def export_tagger(preprocessor, model, export_dir: str) -> None:
    """Writes the tagger SavedModel with its ``serving_default`` signature."""
    module = TaggerServing(preprocessor, model)
    saved_model.save(module, export_dir, {SERVING_SIGNATURE: module.signature()})


__all__ = ["SERVING_SIGNATURE", "TaggerServing", "export_tagger", "predict_word_label_ids"]
