"""The recipe's optional ``lm_finetuning`` section: ULMFiT's target task LM fine-tuning
(Howard & Ruder 2018 §3.2), a causal-LM stage on ``data.target_corpus`` between the
general-domain pretraining and the task fine-tuning (pipelines/pipeline.py
`_target_lm_stage`). It takes a training stage's settings (steps, batch size, learning rate,
the AdamW settings, ``task_args`` for the language model), defaulting to ``pretraining``'s.
"""

from __future__ import annotations

import copy

STAGE = "lm_finetuning"
NOT_INHERITED = ("init_checkpoint", "tokenizer_dir")


def check_lm_finetuning(check, recipe: dict, objective) -> tuple:
    """Completes ``recipe["lm_finetuning"]`` from ``pretraining`` and checks where it fits;
    returns ``("lm_finetuning",)`` for the stage checks, ``()`` without the section."""
    section = recipe.get(STAGE)
    if not section:
        return ()
    if not isinstance(section, dict):
        check.fail(STAGE, "must be a mapping of training settings (steps, learning_rate, ...)")
    from lmfactory.components.tasks.language_model import is_causal

    if objective is None or not is_causal(objective):
        check.fail(STAGE, "target LM fine-tuning continues a causal LM pretrained in the "
                          "recipe (objective.name causal_lm)")
    if recipe["finetuning"].get("task") == "causal_lm":
        check.fail(STAGE, "finetuning.task causal_lm already fine-tunes the LM; drop one")
    check.source("data.target_corpus")
    inherited = {key: value for key, value in recipe["pretraining"].items()
                 if key not in NOT_INHERITED}
    merged = copy.deepcopy(inherited)
    merged.update(section)
    recipe[STAGE] = merged
    return (STAGE,)


__all__ = ["check_lm_finetuning"]
