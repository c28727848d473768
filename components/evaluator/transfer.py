"""The transfer control: what pre-training bought, measured in the same run.

With ``evaluation.control: from_scratch`` the DAG fine-tunes the task model a second time,
from a fresh backbone shaped like the pretrained one (ControlInitializer -> Control stage:
same task model, data, vocabulary, steps, schedule and seed), and the Evaluator scores both
with the same code. ``transfer_gain`` is the pretrained model's figure minus the control's,
for every scalar metric; the blessing may require it to be a gain in the blessing metric's
direction (``evaluation.require_transfer_gain``). ULMFiT §4.4 (Figure 3), BERT §5 and GPT
§5 make their case with exactly this comparison.
"""

from __future__ import annotations

import numbers

import numpy as np

CONTROL_FROM_SCRATCH = "from_scratch"
CONTROLS = (CONTROL_FROM_SCRATCH,)


def check_recipe(check, recipe: dict) -> None:
    """``evaluation.control`` / ``evaluation.require_transfer_gain``, in one-line errors."""
    control = check.get("evaluation.control", required=False)
    if control is not None:
        check.choice("evaluation.control", CONTROLS)
        if recipe.get("pretraining") is None:
            check.fail("evaluation.control", "compares a pretrained model with one trained "
                                             "from scratch; with pretraining: null there is "
                                             "no pretrained model to compare")
    required = check.get("evaluation.require_transfer_gain", required=False)
    if required is not None and not isinstance(required, bool):
        check.fail("evaluation.require_transfer_gain", f"must be true or false, got "
                                                       f"{required!r}")
    if required and control is None:
        check.fail("evaluation.require_transfer_gain", "needs evaluation.control: "
                                                       "from_scratch (the model to beat)")


def _is_number(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) \
        and np.isfinite(value)


def gains(results: dict, control: dict) -> dict:
    """Pretrained minus control for every scalar metric both report."""
    return {name: float(value) - float(control[name]) for name, value in results.items()
            if _is_number(value) and _is_number(control.get(name))}


def passes(metric: str, gain: float | None, higher_is_better: bool) -> tuple[bool, str]:
    """The transfer rule: the pretrained model beats the control on ``metric``."""
    if gain is None:
        return False, f"{metric}: no figure of the control to compare with"
    improved = gain > 0 if higher_is_better else gain < 0
    verdict = "beats" if improved else "does not beat"
    return improved, (f"the pretrained model {verdict} the from-scratch control on {metric} "
                      f"(transfer gain {gain:+.4f})")
