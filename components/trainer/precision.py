"""The numeric precision of a training stage (recipe ``runtime.precision``).

``float32``: every layer computes and stores in float32 (the papers' setting).
``mixed_bfloat16``: Keras's mixed-precision policy (Micikevicius et al. 2018, "Mixed
Precision Training", §3, with bfloat16 in place of float16, as Kalamkar et al. 2019 train
with it): the variables stay float32 (the optimizer updates float32 master weights, §3.1),
every layer computes in bfloat16 (on CPUs with AMX or AVX512-BF16 the matmuls run as
bfloat16 kernels; on TPUs and recent GPUs natively). bfloat16 keeps float32's exponent
range, so no loss scaling is needed (Kalamkar et al. 2019 §3). The task models compute
their losses in float32 (models/task_losses.py casts the logits), and the serving
signatures return float32.

The stage sets the policy around the building, training and export of its models
(`precision_policy`), and restores the previous one afterwards, so a stage never leaks
its precision into the next one run in the same process.
"""

from __future__ import annotations

import contextlib
import logging

import keras

PRECISIONS = ("float32", "mixed_bfloat16")


def check_precision(precision: str) -> str:
    """``precision`` itself when it is one of `PRECISIONS`; a one-line ValueError otherwise."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}; got "
                         f"{precision!r}")
    return precision


@contextlib.contextmanager
def precision_policy(precision: str):
    """Sets Keras's global dtype policy to ``precision`` for the ``with`` block (the layers
    built in it take that policy) and restores the previous policy after it."""
    check_precision(precision)
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(precision)
    if precision != "float32":
        logging.info("Training in %s: float32 variables, %s compute", precision,
                     keras.config.dtype_policy().compute_dtype)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)


def stage_backbone_config(backbone_config: dict) -> dict:
    """A backbone config saved by an earlier stage, with its precision policy left out (a
    backbone records the global policy it was built under), so the loading stage's own
    ``runtime.precision`` decides how the backbone computes. Any other recorded dtype
    (e.g. a quantisation policy) is kept."""
    config = dict(backbone_config)
    dtype = config.get("dtype")
    name = dtype.get("config", {}).get("name") if isinstance(dtype, dict) else dtype
    if name in PRECISIONS:
        config.pop("dtype")
    return config


__all__ = ["PRECISIONS", "check_precision", "precision_policy", "stage_backbone_config"]
