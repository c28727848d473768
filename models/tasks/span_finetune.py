"""Span extraction (SQuAD) on the model side: a `span_preprocessor`'s windows of question /
context records as numpy arrays (`featurize`), their start / end training labels
(`training_labels`), the model's inputs (`model_inputs`) and its decoded answers
(`predict`), for the ``span_qa`` task kind (``components/tasks/span_qa.py``).
"""

from __future__ import annotations

import collections

import numpy as np

ARRAY_KEYS = ("token_ids", "segment_ids", "padding_mask", "span_mask", "example_index",
              "token_start", "token_end", "token_doc_index", "max_context")


def featurize(preprocessor, records, batch_size: int = 256) -> dict:
    """The preprocessor's windows of all ``records`` as numpy arrays (``example_index``
    indexes ``records``)."""
    import tensorflow as tf

    parts = collections.defaultdict(list)
    for begin in range(0, len(records), batch_size):
        batch = records[begin:begin + batch_size]
        out = preprocessor(tf.constant([r.question for r in batch]),
                           tf.constant([r.context for r in batch]))
        for key in ARRAY_KEYS:
            value = out[key].numpy()
            parts[key].append(value + begin if key == "example_index" else value)
    return {key: np.concatenate(values) for key, values in parts.items()}


def training_labels(preprocessor, features: dict, records) -> tuple:
    from lmfactory.models.tasks.span_preprocessor import answer_positions

    first = [(r.answers[0] if r.answers and not r.is_impossible else "") for r in records]
    starts = [(r.answer_starts[0] if r.answers and not r.is_impossible else 0)
              for r in records]
    return answer_positions(features, [r.context for r in records], starts, first)


def model_inputs(model, features: dict) -> dict:
    return {name: features[name].astype("int32") for name in model.input.keys()}


def predict(model, records, features: dict, batch_size: int = 64,
            n_best_size: int = 20, max_answer_length: int = 30) -> list:
    """`span_decoding.decode` of the model's logits on ``features``."""
    from lmfactory.models.tasks.span_decoding import decode

    logits = model.predict(model_inputs(model, features), batch_size=batch_size, verbose=0)
    return decode(features, logits["start_logits"], logits["end_logits"],
                  [r.context for r in records], n_best_size, max_answer_length)
