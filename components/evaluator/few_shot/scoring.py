"""Scoring candidate completions with a causal LM: `CompletionScorer` (batched
log-probabilities of completions given contexts), `candidate_scores` (modes "sum", "mean",
"unconditional") and `score_candidates`."""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from lmfactory.components.evaluator.few_shot.prompts import tokenize_texts
from lmfactory.components.evaluator.few_shot.tasks import ANSWER_CONTEXT, FewShotError

SCORING_MODES = ("sum", "mean", "unconditional")


def model_context_length(task_model) -> int | None:
    """The number of positions of the task model's backbone (``max_sequence_length``)."""
    backbone = getattr(task_model, "backbone", None)
    length = getattr(backbone, "max_sequence_length", None)
    return int(length) if length else None


def _model_vocabulary_size(task_model) -> int | None:
    size = getattr(getattr(task_model, "backbone", None), "vocabulary_size", None)
    return int(size) if size else None


class CompletionScorer:
    """Log-probabilities of completions given contexts under a causal LM task model.

    One forward pass per padded batch of ``context + completion`` sequences: the model's
    next-token log-probabilities at every position are gathered at the following token
    inside one ``tf.function``, so only [B, T] numbers (never [B, T, V] logits) leave it.
    Sequences are right-padded with ``padding_mask`` 0 (a causal model's real positions
    never see the padding), sorted by length and batched under a token budget; lengths are
    padded up to a multiple of ``length_multiple`` to bound retracing.
    """

    def __init__(self, task_model, batch_size: int = 16, max_batch_tokens: int = 8192,
                 length_multiple: int = 16):
        import tensorflow as tf

        if batch_size < 1 or max_batch_tokens < 1:
            raise FewShotError("batch_size and max_batch_tokens must be >= 1")
        self.task_model = task_model
        self.batch_size, self.max_batch_tokens = int(batch_size), int(max_batch_tokens)
        self.length_multiple = int(length_multiple)
        self.max_positions = model_context_length(task_model)
        self.vocabulary_size = _model_vocabulary_size(task_model)

        @tf.function(reduce_retracing=True)
        def token_logprobs(token_ids, padding_mask):
            logits = task_model({"token_ids": token_ids, "padding_mask": padding_mask},
                                training=False)
            if isinstance(logits, dict):
                logits = logits["logits"]
            logits = tf.cast(logits[:, :-1, :], tf.float32)
            # log softmax(logits)[next token] = -cross-entropy with the next token.
            return -tf.nn.sparse_softmax_cross_entropy_with_logits(
                labels=token_ids[:, 1:], logits=logits)

        self._token_logprobs = token_logprobs

    def _check(self, sequence: list[int]) -> None:
        if self.max_positions and len(sequence) > self.max_positions:
            raise FewShotError(f"A sequence of {len(sequence)} tokens exceeds the model's "
                               f"{self.max_positions} positions")
        if self.vocabulary_size and sequence and (max(sequence) >= self.vocabulary_size
                                                  or min(sequence) < 0):
            raise FewShotError(
                f"Token id {max(sequence)} is outside the model's vocabulary of "
                f"{self.vocabulary_size} ids: the tokenizer does not match the model")

    def __call__(self, requests: Sequence[tuple[Sequence[int], Sequence[int]]]) -> np.ndarray:
        """Sum of log P(completion token | everything before it) over each request's
        completion tokens, for ``requests`` = [(context_ids, completion_ids), ...];
        float64 [len(requests)]."""
        sequences = []
        for context, completion in requests:
            if len(context) < 1 or len(completion) < 1:
                raise FewShotError(f"Scoring needs at least one context token and one "
                                   f"completion token, got {len(context)} and "
                                   f"{len(completion)}")
            sequence = [int(i) for i in context] + [int(i) for i in completion]
            self._check(sequence)
            sequences.append(sequence)
        totals = np.zeros(len(sequences), dtype=np.float64)
        order = sorted(range(len(sequences)), key=lambda i: -len(sequences[i]))
        start = 0
        while start < len(order):
            padded = self._padded_length(len(sequences[order[start]]))
            size = max(1, min(self.batch_size, self.max_batch_tokens // padded))
            batch = order[start:start + size]
            start += size
            token_ids = np.zeros((len(batch), padded), dtype=np.int32)
            mask = np.zeros((len(batch), padded), dtype=np.int32)
            for row, index in enumerate(batch):
                token_ids[row, :len(sequences[index])] = sequences[index]
                mask[row, :len(sequences[index])] = 1
            logprobs = self._token_logprobs(token_ids, mask).numpy().astype(np.float64)
            for row, index in enumerate(batch):
                context_length = len(requests[index][0])
                # Position p's output predicts token p + 1: the completion's tokens
                # (positions c .. c + n - 1) are predicted at c - 1 .. c + n - 2.
                totals[index] = logprobs[row, context_length - 1:
                                         len(sequences[index]) - 1].sum()
        return totals

    def _padded_length(self, length: int) -> int:
        padded = math.ceil(length / self.length_multiple) * self.length_multiple
        return min(padded, self.max_positions) if self.max_positions else padded


def completion_logprobs(task_model, requests, batch_size: int = 16,
                        max_batch_tokens: int = 8192) -> np.ndarray:
    """``sum_i log P(completion_i | context, completion_<i)`` for each
    ``(context_ids, completion_ids)`` request (see `CompletionScorer`)."""
    return CompletionScorer(task_model, batch_size, max_batch_tokens)(requests)


def candidate_scores(logprob_sums, token_counts, scoring: str = "mean",
                     unconditional_sums=None) -> np.ndarray:
    """A candidate's score from the sum of its completion's token log-probabilities.

    * ``sum``: log P(completion | context);
    * ``mean``: that divided by the completion's token count (per-token likelihood,
      Brown et al. 2020 §2.4, the default);
    * ``unconditional``: log P(completion | context) - log P(completion | answer_context),
      the log of §2.4's ratio P(completion | context) / P(completion | answer_context).
    """
    logprob_sums = np.asarray(logprob_sums, dtype=np.float64)
    if scoring == "sum":
        return logprob_sums
    if scoring == "mean":
        counts = np.asarray(token_counts, dtype=np.float64)
        if np.any(counts < 1):
            raise FewShotError("Every completion needs at least one token")
        return logprob_sums / counts
    if scoring == "unconditional":
        if unconditional_sums is None:
            raise FewShotError("scoring='unconditional' needs the completions' log "
                               "probabilities given the answer context")
        return logprob_sums - np.asarray(unconditional_sums, dtype=np.float64)
    raise FewShotError(f"scoring must be one of {SCORING_MODES}, got {scoring!r}")


def score_candidates(task_model, tokenizer, contexts: Sequence[str],
                     candidates: Sequence[Sequence[str]], scoring: str = "mean",
                     answer_context: str = ANSWER_CONTEXT, start_token_id: int | None = None,
                     scorer: CompletionScorer | None = None) -> list[np.ndarray]:
    """The score of every candidate completion of every context (see `candidate_scores`);
    each context and completion is tokenized on its own and the ids concatenated.
    ``start_token_id`` (e.g. GPT-2's ``<|endoftext|>``) is put before every context."""
    scorer = scorer or CompletionScorer(task_model)
    start = [] if start_token_id is None else [int(start_token_id)]
    context_ids = [start + ids for ids in tokenize_texts(tokenizer, list(contexts))]
    flat = [c for options in candidates for c in options]
    unique = sorted(set(flat))
    completion_ids = dict(zip(unique, tokenize_texts(tokenizer, unique)))
    requests = [(context_ids[i], completion_ids[c])
                for i, options in enumerate(candidates) for c in options]
    sums = scorer(requests)
    unconditional = None
    if scoring == "unconditional":
        base = start + tokenize_texts(tokenizer, [answer_context])[0]
        table = dict(zip(unique, scorer([(base, completion_ids[c]) for c in unique])))
        unconditional = [table[c] for c in flat]
    scores = candidate_scores(sums, [len(completion_ids[c]) for c in flat], scoring,
                              unconditional)
    out, position = [], 0
    for options in candidates:
        out.append(scores[position:position + len(options)])
        position += len(options)
    return out
