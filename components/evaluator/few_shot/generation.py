"""GPT-2's zero-shot task prompting (Radford et al. 2019 §3): `tldr_prompt`,
`translation_prompt`, `zero_shot_generate` (top-k sampling, k = 2) and `first_sentences`."""

from __future__ import annotations

import re
from typing import Sequence

import numpy as np

from lmfactory.components.evaluator.few_shot.prompts import tokenize_texts
from lmfactory.components.evaluator.few_shot.scoring import model_context_length
from lmfactory.components.evaluator.few_shot.tasks import FewShotError


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
    return outputs if return_ids else [detokenize(tokenizer, ids) for ids in outputs]


def detokenize(tokenizer, ids: list[int]) -> str:
    if not ids:
        return ""
    text = tokenizer.detokenize([ids])
    text = text[0] if isinstance(text, (list, tuple)) else np.asarray(text).reshape(-1)[0]
    if hasattr(text, "numpy"):
        text = text.numpy()
    return text.decode("utf-8", errors="replace") if isinstance(text, bytes) else str(text)
