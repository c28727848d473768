"""Few-shot prompts: demonstrations drawn at random (`sample_demonstrations`), the prompt
text (`build_prompt`), and prompts fitted into the context by dropping the earliest
demonstrations first (`fit_prompts`)."""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from lmfactory.components.evaluator.few_shot.tasks import Example, FewShotError, FewShotTask


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
