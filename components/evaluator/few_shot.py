"""In-context (zero-, one- and few-shot) evaluation of causal language models, and GPT-2's
zero-shot task prompting.

GPT-3 (Brown et al. 2020, "Language Models are Few-Shot Learners") §2 and Figure 2.1 define
the settings without any gradient update: *zero-shot* gives the model a natural-language
description of the task only, *one-shot* adds one demonstration, *few-shot* adds K
demonstrations, "as many as will fit into the model's context window". §2.4: each
evaluated example is conditioned on K examples drawn at random from the task's training set,
separated by newlines (here a blank line, since each example spans two lines). For multiple
choice the model scores every candidate completion by its likelihood given the context,
normalised per token, and for some datasets by the unconditional probability of the
completion, P(completion | context) / P(completion | answer_context) with answer_context
"Answer: "; binary classification is phrased with semantically meaningful label words
("positive" / "negative") scored the same way.

GPT-2 (Radford et al. 2019, "Language Models are Unsupervised Multitask Learners") §3
induces tasks zero-shot by prompting: a summary is what follows ``TL;DR:`` after the
article (§3.6: 100 tokens with top-k sampling, k = 2, the first 3 sentences kept), a
translation what follows ``english sentence =`` after example pairs
``english sentence = french sentence`` (§3.7).

Pieces (all usable on any causal LM task model of the registry: `GPT2CausalLM` (GPT-2,
GPT-3), `Gpt1CausalLM`, `CharTransformerLM`; each takes ``{token_ids, padding_mask}`` and
returns next-token logits [B, T, V]):

* task readers `read_sst2`, `read_commonsenseqa` -> `TaskSplit` of `Example`
  ``(context, completions, gold)``; the tasks in `TASKS`;
* prompt construction: `sample_demonstrations`, `build_prompt`, `fit_prompt` (truncation
  from the left, dropping the earliest demonstrations first);
* scoring: `completion_logprobs` (batched, one forward pass per padded batch of
  prompt + completion sequences), `candidate_scores` (modes "sum", "mean", "unconditional");
* `evaluate_few_shot` -> `FewShotResult` (accuracy vs k) and `format_markdown`;
* generation: `tldr_prompt`, `translation_prompt`, `zero_shot_generate`, `first_sentences`;
* `resolve_model_artifact` / `load_causal_lm`: a trained causal LM and its tokenizer from a
  Model artifact, a local run folder or a pushed model (``lmfactory few-shot``).
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import json
import logging
import math
import os
import re
from typing import Callable, NamedTuple, Sequence

import numpy as np

SCORING_MODES = ("sum", "mean", "unconditional")
DEFAULT_KS = (0, 1, 4, 8)
# Brown et al. 2020 §2.4: the unconditional probability of a completion is its probability
# after "Answer: "; the completion carries its leading space, so the context is "Answer:".
ANSWER_CONTEXT = "Answer:"
# The repository root's sibling holding the shared data sets (../shared/data from the root).
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_DATA_DIR = os.path.join(os.path.dirname(PACKAGE_ROOT), "shared", "data")


class FewShotError(ValueError):
    """Bad input to few-shot evaluation (a malformed data line, a prompt that cannot fit)."""


# --------------------------------------------------------------------------- task data


class Example(NamedTuple):
    """One evaluation item: the text the model conditions on, the candidate completions
    (each with its leading space) and the index of the correct one."""

    context: str
    completions: tuple[str, ...]
    gold: int


@dataclasses.dataclass
class TaskSplit:
    """The examples read from one file, and the malformed lines skipped (``"path:line:
    reason"``; empty unless the reader was asked to skip instead of raising)."""

    examples: list[Example]
    skipped: list[str] = dataclasses.field(default_factory=list)
    path: str = ""

    def __len__(self) -> int:
        return len(self.examples)

    def __iter__(self):
        return iter(self.examples)

    def __getitem__(self, index):
        return self.examples[index]


class _LineErrors:
    """Raises on a malformed line, or records it when skipping (never drops it silently)."""

    def __init__(self, path: str, skip_malformed: bool):
        self.path, self.skip_malformed, self.skipped = path, skip_malformed, []

    def __call__(self, line_number: int, reason: str) -> None:
        message = f"{self.path}:{line_number}: {reason}"
        if not self.skip_malformed:
            raise FewShotError(f"Malformed line {message} (pass skip_malformed=True / "
                               f"--skip-malformed to skip such lines and count them)")
        self.skipped.append(message)


def _open_lines(path: str) -> list[str]:
    # Imported here: the example_gen package pulls in TFX, which scoring does not need.
    from lmfactory.components.example_gen import multiple_choice

    return multiple_choice.read_text(path, FewShotError, "Task data file").splitlines()


SST2_LABEL_WORDS = (" negative", " positive")


def read_sst2(path: str, skip_malformed: bool = False) -> TaskSplit:
    """SST-2 as GLUE ships it: a header naming the columns ``sentence`` and ``label``, then
    one tab-separated sentence and label (0 = negative, 1 = positive) a line.

    Each example reads ``Review: <sentence>\\nSentiment:`` and is completed by the label
    word " negative" or " positive" (Brown et al. 2020 §2.4: binary classification with
    semantically meaningful label words). Blank lines are not records and are passed over;
    any other line without both fields, with an empty sentence or a label other than 0 / 1
    raises a `FewShotError` naming the file and line, or, with ``skip_malformed``, is
    skipped and listed in ``TaskSplit.skipped``.
    """
    lines = _open_lines(path)
    if not lines:
        raise FewShotError(f"{path}: empty file; expected a header 'sentence<TAB>label'")
    header = lines[0].rstrip("\r").split("\t")
    if "sentence" not in header or "label" not in header:
        raise FewShotError(f"{path}:1: the header must name the columns 'sentence' and "
                           f"'label' (tab-separated), got {lines[0][:80]!r}")
    sentence_at, label_at = header.index("sentence"), header.index("label")
    errors = _LineErrors(path, skip_malformed)
    examples = []
    for number, line in enumerate(lines[1:], start=2):
        line = line.rstrip("\r")
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != len(header):
            errors(number, f"expected {len(header)} tab-separated fields, got {len(fields)}")
            continue
        sentence, label = fields[sentence_at].strip(), fields[label_at].strip()
        if not sentence:
            errors(number, "empty sentence")
            continue
        if label not in ("0", "1"):
            errors(number, f"label must be 0 or 1, got {label!r}")
            continue
        examples.append(Example(f"Review: {sentence}\nSentiment:", SST2_LABEL_WORDS,
                                int(label)))
    return TaskSplit(examples, errors.skipped, path)


def read_commonsenseqa(path: str, skip_malformed: bool = False) -> TaskSplit:
    """CommonsenseQA (Talmor et al. 2019) JSONL: one JSON object a line with
    ``question.stem``, ``question.choices`` (a list of ``{label, text}``) and ``answerKey``
    (the label of the correct choice).

    Each example reads ``Question: <stem>\\nAnswer:`` and is completed by each choice's
    text (with a leading space), scored as multiple choice (Brown et al. 2020 §2.4). Blank
    lines are passed over; a line that is not a JSON object, lacks the stem, the choices or
    ``answerKey``, or whose ``answerKey`` names no choice raises a `FewShotError` naming the
    file and line, or, with ``skip_malformed``, is skipped and listed in
    ``TaskSplit.skipped``.
    """
    errors = _LineErrors(path, skip_malformed)
    examples = []
    for number, line in enumerate(_open_lines(path), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            errors(number, f"invalid JSON ({error.msg} at column {error.colno})")
            continue
        question = record.get("question") if isinstance(record, dict) else None
        if not isinstance(question, dict):
            errors(number, "no 'question' object")
            continue
        stem = question.get("stem")
        if not isinstance(stem, str) or not stem.strip():
            errors(number, "no 'question.stem' text")
            continue
        choices = question.get("choices")
        if (not isinstance(choices, list) or len(choices) < 2
                or not all(isinstance(c, dict) and isinstance(c.get("label"), str)
                           and isinstance(c.get("text"), str) and c["text"].strip()
                           for c in choices)):
            errors(number, "'question.choices' must be a list of at least two "
                           "{label, text} objects with non-empty text")
            continue
        labels = [choice["label"] for choice in choices]
        if len(set(labels)) != len(labels):
            errors(number, f"repeated choice labels {labels}")
            continue
        if "answerKey" not in record:
            errors(number, "missing 'answerKey'")
            continue
        if record["answerKey"] not in labels:
            errors(number, f"answerKey {record['answerKey']!r} is not one of the choice "
                           f"labels {labels}")
            continue
        examples.append(Example(
            f"Question: {stem.strip()}\nAnswer:",
            tuple(" " + choice["text"].strip() for choice in choices),
            labels.index(record["answerKey"])))
    return TaskSplit(examples, errors.skipped, path)


@dataclasses.dataclass(frozen=True)
class FewShotTask:
    """A task for in-context evaluation.

    Attributes:
        name: the CLI name.
        description: the natural-language task description that opens every prompt
            (Figure 2.1's "Translate English to French:").
        read: ``read(path, skip_malformed) -> TaskSplit``.
        train_file, eval_file: paths under the data folder; demonstrations come from the
            train file, evaluated examples from the eval file.
        separator: joins the description, the demonstrations and the query.
        answer_context: the context of the unconditional probability of a completion.
    """

    name: str
    description: str
    read: Callable[..., TaskSplit]
    train_file: str
    eval_file: str
    separator: str = "\n\n"
    answer_context: str = ANSWER_CONTEXT

    def demonstration(self, example: Example) -> str:
        """A solved example: its context followed by its correct completion."""
        return example.context + example.completions[example.gold]


TASKS = {
    "sst2": FewShotTask(
        name="sst2",
        description="Classify the sentiment of each movie review as positive or negative.",
        read=read_sst2,
        train_file=os.path.join("glue", "SST-2", "train.tsv"),
        eval_file=os.path.join("glue", "SST-2", "dev.tsv")),
    "commonsenseqa": FewShotTask(
        name="commonsenseqa",
        description="Answer each question with the most sensible choice.",
        read=read_commonsenseqa,
        train_file=os.path.join("commonsenseqa", "train_rand_split.jsonl"),
        eval_file=os.path.join("commonsenseqa", "dev_rand_split.jsonl")),
}


def get_task(task) -> FewShotTask:
    if isinstance(task, FewShotTask):
        return task
    if task not in TASKS:
        raise FewShotError(f"Unknown few-shot task {task!r}; tasks: {sorted(TASKS)}")
    return TASKS[task]


# --------------------------------------------------------------------------- prompts


def sample_demonstrations(train: Sequence[Example], query: Example, k: int,
                          rng: np.random.Generator) -> list[Example]:
    """``k`` distinct training examples drawn at random (§2.4), never one whose context is
    the evaluated example's own (so a query never sees its answer as a demonstration)."""
    if k < 0:
        raise FewShotError(f"The number of demonstrations must be >= 0, got {k}")
    if k == 0:
        return []
    chosen, seen = [], set()
    # Rejection sampling: the pool is large next to k, and few examples are excluded.
    attempts = 0
    while len(chosen) < k:
        attempts += 1
        if attempts > 20 * k + 100:
            eligible = [i for i, example in enumerate(train)
                        if i not in seen and example.context != query.context]
            if len(eligible) < k - len(chosen):
                raise FewShotError(f"The training set has {len(chosen) + len(eligible)} "
                                   f"usable demonstrations, fewer than k={k}")
            rng.shuffle(eligible)
            chosen.extend(train[i] for i in eligible[:k - len(chosen)])
            break
        index = int(rng.integers(len(train)))
        if index in seen or train[index].context == query.context:
            continue
        seen.add(index)
        chosen.append(train[index])
    return chosen


def build_prompt(task: FewShotTask, query: Example, demonstrations: Sequence[Example]) -> str:
    """The task description, each demonstration (context + correct completion) and the
    query's context, joined by the task's separator (Figure 2.1)."""
    parts = [task.description] if task.description else []
    parts += [task.demonstration(example) for example in demonstrations]
    parts.append(query.context)
    return task.separator.join(parts)


def tokenize_texts(tokenizer, texts: Sequence[str]) -> list[list[int]]:
    """Token ids of each text (one batched tokenizer call), as Python lists."""
    if not texts:
        return []
    out = tokenizer(list(texts))
    if hasattr(out, "to_list"):
        out = out.to_list()
    elif hasattr(out, "numpy"):
        out = out.numpy().tolist()
    return [[int(i) for i in (ids.tolist() if hasattr(ids, "tolist") else ids)] for ids in out]


@dataclasses.dataclass
class FittedPrompt:
    """A prompt's token ids after fitting it into the context, and how it was cut."""

    token_ids: list[int]
    demonstrations: int     # demonstrations kept
    dropped: int            # demonstrations dropped from the left
    cut_tokens: int         # tokens cut from the left when even no demonstration fitted

    @property
    def truncated(self) -> bool:
        return self.dropped > 0 or self.cut_tokens > 0


def fit_prompts(task: FewShotTask, queries: Sequence[Example],
                demonstrations: Sequence[Sequence[Example]], tokenizer, context_length: int,
                reserve: Sequence[int], start_ids: Sequence[int] = ()) -> list[FittedPrompt]:
    """Tokenizes the prompt of each query with its demonstrations, truncating from the left.

    A prompt fits when ``len(start_ids) + len(prompt) + reserve[i] <= context_length``
    (``reserve[i]``: the token count of query i's longest candidate completion). A prompt
    that does not fit loses its earliest demonstration, then the next, until it fits
    (GPT-3 §2.4: K is what fits in the context window); if even the description and the
    query alone do not fit, their first tokens are cut. Prompts are tokenized in batches,
    one round per dropped demonstration.
    """
    start_ids = list(start_ids)
    n = len(queries)
    kept = [len(d) for d in demonstrations]
    fitted: list[FittedPrompt | None] = [None] * n
    pending = list(range(n))
    while pending:
        texts = [build_prompt(task, queries[i],
                              demonstrations[i][len(demonstrations[i]) - kept[i]:])
                 for i in pending]
        still = []
        for i, ids in zip(pending, tokenize_texts(tokenizer, texts)):
            room = context_length - reserve[i] - len(start_ids)
            if room < 1:
                raise FewShotError(
                    f"A candidate completion of {reserve[i]} tokens leaves no room for a "
                    f"prompt in a context of {context_length} tokens")
            dropped = len(demonstrations[i]) - kept[i]
            if len(ids) <= room:
                fitted[i] = FittedPrompt(start_ids + ids, kept[i], dropped, 0)
            elif kept[i] > 0:
                kept[i] -= 1
                still.append(i)
            else:
                fitted[i] = FittedPrompt(start_ids + ids[len(ids) - room:], 0, dropped,
                                         len(ids) - room)
        pending = still
    return fitted


# --------------------------------------------------------------------------- scoring


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


# --------------------------------------------------------------------------- evaluation


@dataclasses.dataclass
class FewShotRow:
    k: int                      # demonstrations asked for
    accuracy: float
    correct: int
    examples: int
    truncated: int              # prompts that lost demonstrations (or tokens) to fit
    mean_demonstrations: float  # demonstrations actually in the prompts, on average
    predicted: list[int] = dataclasses.field(default_factory=list)  # count per candidate index


@dataclasses.dataclass
class FewShotResult:
    task: str
    scoring: str
    rows: list[FewShotRow]
    examples: int
    chance: float               # mean over examples of 1 / number of candidates
    majority: float             # accuracy of always answering the most frequent gold index
    context_length: int
    seed: int
    skipped: int = 0            # malformed data lines skipped
    model: str = ""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def select_examples(examples: Sequence[Example], max_examples: int | None,
                    seed: int) -> list[Example]:
    """All examples, or ``max_examples`` of them drawn at random with ``seed`` (kept in file
    order)."""
    examples = list(examples)
    if max_examples is None or max_examples >= len(examples):
        return examples
    if max_examples < 1:
        raise FewShotError(f"max_examples must be >= 1, got {max_examples}")
    chosen = np.random.default_rng([seed, 1]).choice(len(examples), max_examples,
                                                    replace=False)
    return [examples[i] for i in sorted(chosen)]


def _majority(examples: Sequence[Example]) -> float:
    golds = np.bincount([example.gold for example in examples])
    return float(golds.max() / len(examples))


def evaluate_few_shot(task_model, tokenizer, task="sst2", ks: Sequence[int] = DEFAULT_KS,
                      max_examples: int | None = None, scoring: str = "mean", seed: int = 0,
                      train_examples: Sequence[Example] | None = None,
                      eval_examples: Sequence[Example] | None = None,
                      data_dir: str | None = None, skip_malformed: bool = False,
                      context_length: int | None = None, start_token_id: int | None = None,
                      batch_size: int = 16, max_batch_tokens: int = 8192,
                      model_name: str = "") -> FewShotResult:
    """Accuracy of a causal LM on a task with k = each of ``ks`` demonstrations in context.

    For every evaluated example and every k the prompt is the task description, k training
    examples drawn at random with ``seed`` (the same draw for every k: the first k of one
    per-example sample, so the rows differ only in the number of demonstrations), and the
    example's context; prompts that do not fit in ``context_length`` lose their earliest
    demonstrations (counted in each row's ``truncated``). Every candidate completion is
    scored (``scoring``: "mean", "sum" or "unconditional", see `candidate_scores`); the
    prediction is the best-scoring one (the first on ties).

    Args:
        task_model: a causal LM task model: ``{token_ids, padding_mask}`` -> logits [B,T,V].
        tokenizer: the model's keras-nlp tokenizer (``models.tokenizers.load_tokenizer``).
        task: a name in `TASKS` or a `FewShotTask`.
        ks: numbers of demonstrations.
        max_examples: evaluate this many eval examples, drawn at random with ``seed``.
        train_examples, eval_examples: the examples; read from the task's files under
            ``data_dir`` (default ../shared/data) when not given.
        context_length: the prompt + completion budget in tokens; default the backbone's
            number of positions.
        start_token_id: put before every sequence (GPT-2's ``<|endoftext|>``, a document
            start, as the serving signature does).
        batch_size, max_batch_tokens: scoring batches (see `CompletionScorer`).
    """
    task = get_task(task)
    if scoring not in SCORING_MODES:
        raise FewShotError(f"scoring must be one of {SCORING_MODES}, got {scoring!r}")
    ks = [int(k) for k in ks]
    if not ks or min(ks) < 0:
        raise FewShotError(f"ks must be non-negative numbers of demonstrations, got {ks}")
    skipped = 0
    data_dir = data_dir or DEFAULT_DATA_DIR
    if eval_examples is None:
        split = task.read(os.path.join(data_dir, task.eval_file), skip_malformed)
        eval_examples, skipped = split.examples, skipped + len(split.skipped)
    if train_examples is None and max(ks) > 0:
        split = task.read(os.path.join(data_dir, task.train_file), skip_malformed)
        train_examples, skipped = split.examples, skipped + len(split.skipped)
    queries = select_examples(eval_examples, max_examples, seed)
    if not queries:
        raise FewShotError(f"No {task.name} examples to evaluate")
    context_length = context_length or model_context_length(task_model)
    if not context_length:
        raise FewShotError("The model does not say its context length; pass context_length")
    start = [] if start_token_id is None else [int(start_token_id)]
    scorer = CompletionScorer(task_model, batch_size, max_batch_tokens)

    # Every distinct completion is tokenized once.
    completions = sorted({c for example in queries for c in example.completions})
    completion_ids = dict(zip(completions, tokenize_texts(tokenizer, completions)))
    for text, ids in completion_ids.items():
        if not ids:
            raise FewShotError(f"Completion {text!r} has no tokens")
    reserve = [max(len(completion_ids[c]) for c in example.completions) for example in queries]
    token_counts = [len(completion_ids[c]) for example in queries for c in example.completions]
    unconditional = None
    if scoring == "unconditional":
        base = start + tokenize_texts(tokenizer, [task.answer_context])[0]
        table = dict(zip(completions, scorer([(base, completion_ids[c])
                                              for c in completions])))
        unconditional = [table[c] for example in queries for c in example.completions]

    k_max = max(ks)
    samples = [sample_demonstrations(train_examples, query, k_max,
                                     np.random.default_rng([seed, 2, index]))
               if k_max else [] for index, query in enumerate(queries)]
    golds = np.array([example.gold for example in queries])
    rows = []
    for k in ks:
        prompts = fit_prompts(task, queries, [sample[:k] for sample in samples], tokenizer,
                              context_length, reserve, start)
        requests = [(prompt.token_ids, completion_ids[c])
                    for prompt, example in zip(prompts, queries) for c in example.completions]
        scores = candidate_scores(scorer(requests), token_counts, scoring, unconditional)
        predictions, position = [], 0
        for example in queries:
            predictions.append(int(np.argmax(scores[position:position
                                                    + len(example.completions)])))
            position += len(example.completions)
        correct = int(np.sum(np.array(predictions) == golds))
        row = FewShotRow(k=k, accuracy=correct / len(queries), correct=correct,
                         examples=len(queries),
                         truncated=sum(prompt.truncated for prompt in prompts),
                         mean_demonstrations=float(np.mean([p.demonstrations
                                                            for p in prompts])),
                         predicted=np.bincount(predictions, minlength=max(
                             len(e.completions) for e in queries)).tolist())
        logging.info("few-shot %s k=%d: accuracy %.4f (%d/%d), %d prompts truncated",
                     task.name, k, row.accuracy, correct, len(queries), row.truncated)
        rows.append(row)
    return FewShotResult(
        task=task.name, scoring=scoring, rows=rows, examples=len(queries),
        chance=float(np.mean([1.0 / len(example.completions) for example in queries])),
        majority=_majority(queries), context_length=int(context_length), seed=int(seed),
        skipped=skipped, model=model_name)


def format_markdown(result: FewShotResult) -> str:
    """The accuracy-vs-k table of a `FewShotResult` as Markdown."""
    lines = [
        f"Few-shot {result.task}" + (f", model `{result.model}`" if result.model else "")
        + f": {result.examples} examples, scoring `{result.scoring}`, context "
        f"{result.context_length} tokens, seed {result.seed}; chance {result.chance:.4f}, "
        f"majority class {result.majority:.4f}"
        + (f"; {result.skipped} malformed lines skipped" if result.skipped else "") + ".",
        "",
        "| k | accuracy | correct | examples | truncated prompts | mean demonstrations "
        "| predicted per candidate |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in result.rows:
        lines.append(f"| {row.k} | {row.accuracy:.4f} | {row.correct} | {row.examples} | "
                     f"{row.truncated} | {row.mean_demonstrations:.2f} | "
                     f"{' / '.join(map(str, row.predicted))} |")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- generation


def tldr_prompt(article: str) -> str:
    """GPT-2 §3.6: the article followed by ``TL;DR:`` induces a summary."""
    return article.rstrip() + "\nTL;DR:"


def translation_prompt(pairs: Sequence[tuple[str, str]], sentence: str) -> str:
    """GPT-2 §3.7: example pairs ``english sentence = french sentence``, one a line, then
    ``sentence =``; what the model continues with is the translation."""
    lines = [f"{source.strip()} = {target.strip()}" for source, target in pairs]
    return "\n".join(lines + [f"{sentence.strip()} ="])


def first_sentences(text: str, count: int = 3) -> str:
    """The first ``count`` sentences of generated text (GPT-2 §3.6 keeps the first 3
    generated sentences of its 100 tokens as the summary)."""
    sentences = re.split(r"(?<=[.!?])\s+", text.strip())
    return " ".join(sentences[:count])


def zero_shot_generate(task_model, tokenizer, prompts: Sequence[str], max_new_tokens: int = 100,
                       sampler: str = "top_k", k: int = 2, seed: int | None = None,
                       start_token_id: int | None = None, end_token_id: int | None = None,
                       context_length: int | None = None, batch_size: int = 8,
                       return_ids: bool = False, **sampler_kwargs) -> list:
    """Continues each prompt with the model's ``generate_ids`` and returns the new text.

    GPT-2 §3.6 samples 100 tokens with top-k sampling, k = 2 (the defaults). Each prompt
    is tokenized, prefixed with ``start_token_id`` when given (GPT-2's ``<|endoftext|>``)
    and keeps its last tokens when prompt + ``max_new_tokens`` would exceed the context;
    generation of a row stops at ``end_token_id``. Returns the new text of each prompt, or
    with ``return_ids`` its new token ids (the end token excluded).
    """
    generate = getattr(task_model, "generate_ids", None)
    if not callable(generate):
        raise TypeError(f"{type(task_model).__name__} has no generate_ids(); zero-shot "
                        f"generation needs a causal LM that decodes (e.g. GPT2CausalLM)")
    if max_new_tokens < 1:
        raise FewShotError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    context_length = context_length or model_context_length(task_model)
    start = [] if start_token_id is None else [int(start_token_id)]
    room = context_length - max_new_tokens - len(start)
    if room < 1:
        raise FewShotError(f"max_new_tokens={max_new_tokens} leaves no room for a prompt in "
                           f"a context of {context_length} tokens")
    if sampler in ("top_k",):
        sampler_kwargs["k"] = k
    if seed is not None:
        sampler_kwargs["seed"] = seed
    outputs = []
    for first in range(0, len(prompts), batch_size):
        encoded = [start + ids[max(0, len(ids) - room):]
                   for ids in tokenize_texts(tokenizer, list(prompts[first:first + batch_size]))]
        lengths = [len(ids) for ids in encoded]
        if min(lengths) < 1:
            raise FewShotError("An empty prompt needs a start_token_id to condition on")
        width = max(lengths)
        token_ids = np.zeros((len(encoded), width), dtype=np.int32)
        for row, ids in enumerate(encoded):
            token_ids[row, :len(ids)] = ids
        result = generate(token_ids, prompt_lengths=np.array(lengths, dtype=np.int32),
                          max_length=min(context_length, width + max_new_tokens),
                          sampler=sampler, end_token_id=end_token_id, **sampler_kwargs)
        ids = np.asarray(result["token_ids"])
        mask = np.asarray(result["padding_mask"]).astype(bool)
        for row, length in enumerate(lengths):
            new = [int(t) for t, keep in zip(ids[row, length:length + max_new_tokens],
                                             mask[row, length:length + max_new_tokens])
                   if keep and t != end_token_id]
            outputs.append(new)
    return outputs if return_ids else [_detokenize(tokenizer, ids) for ids in outputs]


def _detokenize(tokenizer, ids: list[int]) -> str:
    if not ids:
        return ""
    text = tokenizer.detokenize([ids])
    text = text[0] if isinstance(text, (list, tuple)) else np.asarray(text).reshape(-1)[0]
    if hasattr(text, "numpy"):
        text = text.numpy()
    return text.decode("utf-8", errors="replace") if isinstance(text, bytes) else str(text)


# --------------------------------------------------------------------------- artifacts

# Where a local run keeps its trained models, most wanted first: the fine-tuned model (what
# gets pushed), then the pre-trained one, then any other trainer's.
_TRAINERS = ("FineTuner", "Pretrainer")


def _artifact_id(path: str) -> int:
    name = os.path.basename(path.rstrip("/"))
    return int(name) if name.isdigit() else -1


def _is_causal_lm(model_dir: str) -> bool:
    from lmfactory.components.trainer.model_artifact import read_model_config

    task = read_model_config(model_dir).get("task") or {}
    return task.get("objective") == "causal_lm"


def _file_digest(path: str) -> str:
    import tensorflow as tf

    with tf.io.gfile.GFile(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def resolve_model_artifact(path: str) -> str:
    """The Model artifact folder (the one holding ``keras/``) that ``path`` names.

    ``path`` may be the Model artifact itself (``.../Pretrainer/model/<id>``) or its
    ``Format-Serving`` folder; a local run folder (``runs/<recipe>``, or its ``pipeline``
    root), where the newest causal-LM model of the FineTuner, else the Pretrainer, else any
    trainer is taken; or a pushed model (``runs/<recipe>/serving/<name>/<version>``), whose
    source is the run's Model artifact with the same SavedModel.
    """
    from lmfactory.components.trainer.model_artifact import MODEL_CONFIG, keras_dir_of

    path = os.path.abspath(path.rstrip("/"))
    if os.path.exists(os.path.join(keras_dir_of(path), MODEL_CONFIG)):
        return os.path.dirname(keras_dir_of(path))
    if not os.path.isdir(path):
        raise FileNotFoundError(f"No model at {path!r}")

    def artifacts(root: str) -> list[str]:
        found = glob.glob(os.path.join(root, "*", "model", "*", "keras", MODEL_CONFIG))
        return [os.path.dirname(os.path.dirname(p)) for p in found]

    pushed = os.path.join(path, "saved_model.pb")
    if os.path.exists(pushed):
        # <run>/serving/<model name>/<version>: compare with the run's exported models.
        run = os.path.dirname(os.path.dirname(os.path.dirname(path)))
        digest = _file_digest(pushed)
        for candidate in artifacts(os.path.join(run, "pipeline")):
            exported = os.path.join(candidate, "Format-Serving", "saved_model.pb")
            if os.path.exists(exported) and _file_digest(exported) == digest:
                return candidate
        raise FileNotFoundError(
            f"{path!r} is a pushed SavedModel, which holds no Keras model or vocabulary, and "
            f"no Model artifact under {os.path.join(run, 'pipeline')!r} exported it; pass the "
            f"Model artifact (runs/<recipe>/pipeline/<Trainer>/model/<id>) instead")
    candidates = artifacts(path) + artifacts(os.path.join(path, "pipeline"))
    candidates = [c for c in candidates if _is_causal_lm(c)]
    if not candidates:
        raise FileNotFoundError(
            f"No causal-LM Model artifact in {path!r}: expected a Model artifact folder "
            f"(with keras/{MODEL_CONFIG}), a run folder (runs/<recipe>) or a pushed model")

    def preference(candidate: str):
        trainer = os.path.basename(os.path.dirname(os.path.dirname(candidate)))
        rank = _TRAINERS.index(trainer) if trainer in _TRAINERS else len(_TRAINERS)
        return (rank, -_artifact_id(candidate))

    return min(candidates, key=preference)


@dataclasses.dataclass
class LoadedModel:
    task_model: object
    tokenizer: object
    model_config: dict
    artifact: str
    start_token_id: int | None
    end_token_id: int | None
    trained_length: int | None   # the sequence length the model was trained on


def load_causal_lm(path: str) -> LoadedModel:
    """The trained causal LM of a Model artifact (see `resolve_model_artifact`), its
    tokenizer, and its end-of-text id (used as the start of every sequence)."""
    from lmfactory.components.trainer.model_artifact import (
        load_task_model, read_model_config, vocabulary_dir_of)
    from lmfactory.models.tokenizers import load_tokenizer, read_tokenizer_config

    artifact = resolve_model_artifact(path)
    model_config = read_model_config(artifact)
    task = model_config.get("task") or {}
    if task.get("objective") != "causal_lm":
        raise FewShotError(
            f"{artifact} holds a {task.get('kind', 'unknown')} model "
            f"({task.get('objective') or task.get('name') or 'no objective'}); few-shot "
            f"evaluation scores completions with a causal language model")
    vocab_dir = vocabulary_dir_of(artifact)
    tokenizer = load_tokenizer(vocab_dir)
    end_of_text = read_tokenizer_config(vocab_dir).get("special_tokens", {}).get("end_of_text")
    end_id = None
    if end_of_text is not None:
        end_id = int(tokenizer.token_to_id(end_of_text))
    return LoadedModel(load_task_model(artifact), tokenizer, model_config, artifact,
                       start_token_id=end_id, end_token_id=end_id,
                       trained_length=task.get("sequence_length"))


__all__ = [
    "ANSWER_CONTEXT", "CompletionScorer", "DEFAULT_DATA_DIR", "Example", "FewShotError",
    "FewShotResult", "FewShotRow", "FewShotTask", "FittedPrompt", "LoadedModel",
    "SCORING_MODES", "TASKS", "TaskSplit", "build_prompt", "candidate_scores",
    "completion_logprobs", "evaluate_few_shot", "first_sentences", "fit_prompts",
    "format_markdown", "get_task", "load_causal_lm", "model_context_length",
    "read_commonsenseqa", "read_sst2",
    "resolve_model_artifact", "sample_demonstrations", "score_candidates", "select_examples",
    "tldr_prompt", "tokenize_texts", "translation_prompt", "zero_shot_generate",
]
