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

Modules, one concern each: ``tasks`` (readers, `TASKS`), ``prompts``, ``scoring``,
``evaluation``, ``generation`` and ``artifacts`` (loading a model from pipeline folders).
"""

from lmfactory.components.evaluator.few_shot.tasks import (ANSWER_CONTEXT,
                                                           TASKS, Example, FewShotError,
                                                           FewShotTask, TaskSplit, get_task,
                                                           read_commonsenseqa, read_sst2)
from lmfactory.components.evaluator.few_shot.prompts import (FittedPrompt, build_prompt,
                                                             fit_prompts,
                                                             sample_demonstrations,
                                                             tokenize_texts)
from lmfactory.components.evaluator.few_shot.scoring import (SCORING_MODES, CompletionScorer,
                                                             candidate_scores,
                                                             completion_logprobs,
                                                             model_context_length,
                                                             score_candidates)
from lmfactory.components.evaluator.few_shot.evaluation import (DEFAULT_KS, FewShotResult,
                                                                FewShotRow,
                                                                evaluate_few_shot,
                                                                format_markdown,
                                                                select_examples)
from lmfactory.components.evaluator.few_shot.generation import (detokenize, first_sentences,
                                                                tldr_prompt,
                                                                translation_prompt,
                                                                zero_shot_generate)
from lmfactory.components.evaluator.few_shot.artifacts import (LoadedModel, load_causal_lm,
                                                               resolve_model_artifact)

__all__ = [
    "ANSWER_CONTEXT", "CompletionScorer", "DEFAULT_KS", "Example",
    "FewShotError", "FewShotResult", "FewShotRow", "FewShotTask", "FittedPrompt",
    "LoadedModel", "SCORING_MODES", "TASKS", "TaskSplit", "build_prompt", "candidate_scores",
    "completion_logprobs", "detokenize", "evaluate_few_shot", "first_sentences",
    "fit_prompts", "format_markdown", "get_task", "load_causal_lm", "model_context_length",
    "read_commonsenseqa", "read_sst2", "resolve_model_artifact", "sample_demonstrations",
    "score_candidates", "select_examples", "tldr_prompt", "tokenize_texts",
    "translation_prompt", "zero_shot_generate",
]
