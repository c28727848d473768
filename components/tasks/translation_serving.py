"""The serving module of a translation model: raw source sentences in, translations out.

``serving_default(text [B] strings) -> {"translation": [B] strings}``: the sentences are
split into words in the graph (`Seq2SeqPreprocessor`: punctuation split off, tokens, the
end token; a sentence longer than the model's ``sequence_length`` is truncated to it, an
empty one is the end token alone), translated with the seq2seq head's beam search with
length normalisation (``num_beams``, ``alpha``; 1 beam = greedy) and detokenized (words
joined by spaces, cut at the end token).
"""

from __future__ import annotations

import tensorflow as tf

from lmfactory.components.trainer.serving import _check_batch_of_strings, _string_batch_spec


class TranslationServing(tf.Module):
    """See the module docstring. ``model``: a `Seq2SeqLM`; ``preprocessor``: its
    `Seq2SeqPreprocessor`; ``max_length``: the longest output in tokens (start token
    included)."""

    def __init__(self, preprocessor, model, max_length: int, num_beams: int = 4,
                 alpha: float = 1.0):
        super().__init__(name="translation_serving")
        self.preprocessor = preprocessor
        self.model = model
        self.max_length = int(max_length)
        self.num_beams = int(num_beams)
        self.alpha = float(alpha)

    def translate(self, text):
        """Source strings [B] -> translations [B] (graph ops)."""
        inputs = self.preprocessor.source_inputs(text)
        output = self.model.translate_ids(
            inputs["encoder_token_ids"], inputs["encoder_padding_mask"],
            self.preprocessor.start_token_id, self.preprocessor.end_token_id,
            max_length=self.max_length, num_beams=self.num_beams, alpha=self.alpha)
        return self.preprocessor.detokenize(output["token_ids"])

    def signature(self):
        @tf.function(input_signature=[_string_batch_spec("text")], autograph=False)
        def serve(text):
            text = _check_batch_of_strings("text", text)
            return {"translation": self.translate(text)}

        return serve.get_concrete_function()
