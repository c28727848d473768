"""Quaternion Transformer sizes as `QuaternionTransformerBackbone` constructor kwargs.

Tay et al. 2019 compare the Quaternion Transformer with the real Transformer of the same
sizes (their machine-translation experiments) and report ~75% fewer parameters in the
quaternion layers. The presets are the project's Transformer sizes ("small": Multi30k on a
CPU; "base": Vaswani et al. Table 3), every width a multiple of 4 (d_model, d_ff and
d_model / h), so a quaternion and a real model (``quaternion: false``) of one preset differ
only in the quaternion layers.
"""

from lmfactory.models.transformer.transformer_presets import TRANSFORMER_PRESETS

QUATERNION_TRANSFORMER_PRESETS = {
    name: dict(TRANSFORMER_PRESETS[name], quaternion=True) for name in ("small", "base")
}
