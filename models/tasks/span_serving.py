"""The serving module of a span-extraction model: raw question and context strings in, answer
text out, everything (tokenization with offsets, windows, model, n-best decoding, the
v2.0 null threshold) in one TensorFlow graph."""

from __future__ import annotations


from lmfactory.models import saved_model
from lmfactory.models.backend import tf
from lmfactory.models.request_length import call_on_longest, serving_multiple
from lmfactory.models.tasks.span_decoding import MAX_ANSWER_LENGTH, N_BEST_SIZE, decode_graph
from lmfactory.models.tasks.span_extractor import MASKED_LOGIT


class SpanServing(tf.Module):
    """``serving_default(question [B] string, context [B] string)`` -> ``answer`` [B] string
    ("" for no answer), ``span`` [B] (the best non-null span whatever the threshold, ""
    when the context has none), ``score`` [B] (its score S·T_i + E·T_j) and
    ``null_margin`` [B] (s_null minus that score; +inf when there is no valid span).

    Args:
        preprocessor: the `SpanPreprocessor` the model was trained with.
        model: a `SpanExtractor` (outputs ``start_logits`` / ``end_logits``).
        null_threshold: v2.0's τ (abstain when ``null_margin > τ``); None = v1.1, always
            answer with the best span.
        n_best_size / max_answer_length: the decoding settings (``run_squad.py``: 20 / 30).
    """

    def __init__(self, preprocessor, model, null_threshold: float | None = None,
                 n_best_size: int = N_BEST_SIZE, max_answer_length: int = MAX_ANSWER_LENGTH):
        super().__init__(name="span_serving")
        self.preprocessor = preprocessor
        self.model = model
        self.model_inputs = tuple(model.input.keys())
        # each request runs at its longest window's length (models/request_length.py)
        self.length_multiple = serving_multiple(model)
        self.null_threshold = None if null_threshold is None else float(null_threshold)
        self.n_best_size = int(n_best_size)
        self.max_answer_length = int(max_answer_length)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="question"),
                                  tf.TensorSpec([None], tf.string, name="context")],
                 autograph=False)
    def serving_default(self, question, context):
        tf.debugging.assert_equal(tf.shape(question), tf.shape(context),
                                  message="question and context must have the same batch "
                                          "size")
        features = self.preprocessor(question, context)
        inputs = {name: tf.cast(features[name], tf.int32) for name in self.model_inputs}
        outputs = call_on_longest(self.model, inputs, self.length_multiple,
                                  sequence_outputs=("start_logits", "end_logits"),
                                  pad_value=MASKED_LOGIT)  # as the model masks padding
        decoded = decode_graph(features, outputs["start_logits"], outputs["end_logits"],
                               context, self.n_best_size, self.max_answer_length)
        text = decoded["text"]
        if self.null_threshold is not None:
            text = tf.where(decoded["null_margin"] > self.null_threshold, "", text)
        return {"answer": text, "span": decoded["text"], "score": decoded["score"],
                "null_margin": decoded["null_margin"]}


def export(preprocessor, model, path: str, null_threshold: float | None = None,
           n_best_size: int = N_BEST_SIZE, max_answer_length: int = MAX_ANSWER_LENGTH) -> str:
    """Writes the SavedModel of `SpanServing` to ``path`` (signature ``serving_default``)."""
    module = SpanServing(preprocessor, model, null_threshold, n_best_size, max_answer_length)
    saved_model.save(module, path, {"serving_default": module.serving_default})
    return path


__all__ = ["SpanServing", "export"]
