"""Few-shot evaluation: accuracy vs the number of demonstrations k (`evaluate_few_shot` ->
`FewShotResult`) and its Markdown table (`format_markdown`)."""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Sequence

import numpy as np

from lmfactory.components.evaluator.few_shot.prompts import (fit_prompts,
                                                             sample_demonstrations,
                                                             tokenize_texts)
from lmfactory.components.evaluator.few_shot.scoring import (SCORING_MODES, CompletionScorer,
                                                             candidate_scores,
                                                             model_context_length)
from lmfactory.components.evaluator.few_shot.tasks import (Example,
                                                           FewShotError, get_task)

DEFAULT_KS = (0, 1, 4, 8)


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
            ``data_dir`` (laid out as the shared data folder: ``glue/``,
            ``commonsenseqa/``) when not given.
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
    if data_dir is None and (eval_examples is None
                             or (train_examples is None and max(ks) > 0)):
        raise FewShotError("few-shot evaluation reads the task's files from a data folder: "
                           "give --data-dir (the folder holding glue/ and commonsenseqa/)")
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
