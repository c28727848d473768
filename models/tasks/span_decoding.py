"""From start / end logits of the windows to one answer per question (Devlin et al. 2019
§4.2-4.3; the released ``run_squad.py``'s ``write_predictions``).

§4.2: "The score of a candidate span from position i to position j is defined as S·T_i +
E·T_j, and the maximum scoring span where j >= i is used as a prediction." As in
``run_squad.py``, candidates are the ``n_best_size`` (20) highest start logits times the 20
highest end logits of each window, kept when both are paragraph tokens, the start token is
scored by this window (max-context rule), end >= start and the span has at most
``max_answer_length`` (30) tokens; the best candidate over all windows of a question wins.
§4.3 (v2.0): "We compare the score of the no-answer span: s_null = S·C + E·C to the score
of the best non-null span s_î,j = max_{j>=i} S·T_i + E·T_j. We predict a non-null answer
when s_î,j > s_null + τ, where the threshold τ is selected on the dev set to maximize F1";
s_null is the smallest null score over the question's windows (``run_squad.py``). The null
margin ``s_null - s_î,j`` is what ``squad_metrics.best_no_answer_threshold`` tunes τ on.

The answer text is cut from the ORIGINAL context by the tokens' byte offsets
(``span_preprocessor``), so no ``get_final_text`` re-alignment is needed.

`decode` is the numpy version (it also returns the n-best list); `decode_graph` the same
rule in TensorFlow ops for the serving SavedModel (its top candidate; tests check they
agree).
"""

from __future__ import annotations

import collections
import dataclasses
import math

import numpy as np

from lmfactory.models.backend import tf

N_BEST_SIZE = 20
MAX_ANSWER_LENGTH = 30


@dataclasses.dataclass
class SpanPrediction:
    """One question's decoding: the best non-null span's ``text`` ("" when no span is
    valid) and ``score``, the null score, ``null_margin = null_score - score`` and the
    ``n_best`` list of ``(text, score, start_logit, end_logit)``."""
    text: str
    score: float
    null_score: float
    null_margin: float
    n_best: list


def _best_indexes(logits, n_best_size: int) -> list[int]:
    """Indices of the ``n_best_size`` largest logits, largest first (ties: lower index)."""
    return list(np.argsort(-np.asarray(logits), kind="stable")[:n_best_size])


def decode(features: dict, start_logits, end_logits, contexts: list,
           n_best_size: int = N_BEST_SIZE, max_answer_length: int = MAX_ANSWER_LENGTH
           ) -> list[SpanPrediction]:
    """One `SpanPrediction` per example (row of ``contexts``).

    ``features``: the preprocessor's outputs as numpy (``example_index``, ``token_start``,
    ``token_end``, ``token_doc_index``, ``max_context``); ``start_logits`` / ``end_logits``
    [W, L] for those windows.
    """
    if n_best_size < 1 or max_answer_length < 1:
        raise ValueError(f"n_best_size and max_answer_length must be positive, got "
                         f"{n_best_size} and {max_answer_length}")
    start_logits = np.asarray(start_logits, np.float64)
    end_logits = np.asarray(end_logits, np.float64)
    example = np.asarray(features["example_index"])
    windows = collections.defaultdict(list)
    for w, e in enumerate(example):
        windows[int(e)].append(w)
    predictions = []
    for e, context in enumerate(contexts):
        raw = context.encode("utf-8")
        candidates, null_score = [], math.inf
        for w in windows.get(e, []):
            is_context = features["token_doc_index"][w] >= 0
            null_score = min(null_score, start_logits[w, 0] + end_logits[w, 0])
            for i in _best_indexes(start_logits[w], n_best_size):
                for j in _best_indexes(end_logits[w], n_best_size):
                    if not (is_context[i] and is_context[j]):
                        continue
                    if not features["max_context"][w, i]:
                        continue
                    if j < i or j - i + 1 > max_answer_length:
                        continue
                    candidates.append((start_logits[w, i] + end_logits[w, j], w, i, j))
        # Stable: equal scores keep window / start-rank / end-rank order, as run_squad.py.
        candidates.sort(key=lambda c: -c[0])
        n_best, seen = [], set()
        for score, w, i, j in candidates:
            begin = int(features["token_start"][w, i])
            stop = int(features["token_end"][w, j])
            text = raw[begin:stop].decode("utf-8", errors="replace")
            if text in seen:
                continue
            seen.add(text)
            n_best.append((text, float(score), float(start_logits[w, i]),
                           float(end_logits[w, j])))
            if len(n_best) >= n_best_size:
                break
        text, score = (n_best[0][0], n_best[0][1]) if n_best else ("", -math.inf)
        predictions.append(SpanPrediction(text=text, score=score,
                                          null_score=float(null_score),
                                          null_margin=float(null_score - score),
                                          n_best=n_best))
    return predictions


def answer(prediction: SpanPrediction, null_threshold: float | None) -> str:
    """The answer text: the best span, or "" when ``null_threshold`` is set (v2.0) and the
    null margin is above it."""
    if null_threshold is not None and prediction.null_margin > null_threshold:
        return ""
    return prediction.text


def decode_graph(features: dict, start_logits, end_logits, context, n_best_size: int =
                 N_BEST_SIZE, max_answer_length: int = MAX_ANSWER_LENGTH):
    """`decode`'s top candidate in TensorFlow ops: returns ``text`` [B] string (the best
    non-null span, "" when none is valid), ``score`` [B] and ``null_margin`` [B] float32
    (+inf when no span is valid), for the ``context`` [B] the windows were made from."""
    start_logits = tf.convert_to_tensor(start_logits, tf.float32)
    end_logits = tf.convert_to_tensor(end_logits, tf.float32)
    length = tf.shape(start_logits)[1]
    k = tf.minimum(n_best_size, length)
    top_start, start_index = tf.math.top_k(start_logits, k)       # [W, k]
    top_end, end_index = tf.math.top_k(end_logits, k)
    is_context = features["token_doc_index"] >= 0
    start_ok = tf.gather(is_context & features["max_context"], start_index, batch_dims=1)
    end_ok = tf.gather(is_context, end_index, batch_dims=1)
    i, j = start_index[:, :, None], end_index[:, None, :]
    valid = (start_ok[:, :, None] & end_ok[:, None, :] & (j >= i)
             & (j - i + 1 <= max_answer_length))                  # [W, k, k]
    score = tf.where(valid, top_start[:, :, None] + top_end[:, None, :], -math.inf)
    flat = tf.reshape(score, [tf.shape(score)[0], -1])
    best = tf.argmax(flat, axis=1, output_type=tf.int32)          # first max: rank order
    window_score = tf.reduce_max(flat, axis=1)
    best_start = tf.gather(start_index, best // k, batch_dims=1)
    best_end = tf.gather(end_index, best % k, batch_dims=1)
    window_null = start_logits[:, 0] + end_logits[:, 0]

    example = features["example_index"]
    num_examples = tf.shape(context)[0]
    by_example = tf.RaggedTensor.from_value_rowids(window_score, example,
                                                   nrows=num_examples)
    padded = by_example.to_tensor(default_value=-math.inf)
    chosen = tf.argmax(padded, axis=1, output_type=tf.int32)      # first window on ties
    window = tf.cast(by_example.row_starts(), tf.int32) + chosen
    window = tf.minimum(window, tf.shape(window_score)[0] - 1)
    score = tf.reduce_max(padded, axis=1)
    begin = tf.gather(tf.gather(features["token_start"], window), tf.gather(best_start, window),
                      batch_dims=1)
    stop = tf.gather(tf.gather(features["token_end"], window), tf.gather(best_end, window),
                     batch_dims=1)
    found = tf.math.is_finite(score)
    text = tf.where(found, tf.strings.substr(context, tf.maximum(begin, 0),
                                             tf.maximum(stop - begin, 0), unit="BYTE"), "")
    null_score = tf.math.unsorted_segment_min(window_null, example, num_examples)
    return {"text": text, "score": score, "null_margin": null_score - score}


__all__ = ["MAX_ANSWER_LENGTH", "N_BEST_SIZE", "SpanPrediction", "answer", "decode",
           "decode_graph"]
