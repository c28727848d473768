"""Feature-based use of a pre-trained encoder (Devlin et al. 2019 §5.3, Table 7).

§5.3 "Feature-based Approach with BERT": instead of fine-tuning, fixed contextual
embeddings are read from one or more layers of the pre-trained encoder and fed to a
downstream model (there, a two-layer BiLSTM for CoNLL-2003 NER). Table 7 compares which
layers to use; the modes here are its rows:

===================  ===============================================  =========
mode                 features of each token                           width
===================  ===============================================  =========
``first_layer``      the embedding output ("Embeddings")              H
``second_to_last``   the output of block L-1 ("Second-to-Last Hidden") H
``last_hidden``      the output of block L ("Last Hidden")            H
``sum_last_four``    blocks L-3 .. L, summed                          H
``concat_last_four`` blocks L-3 .. L, concatenated (oldest first)     4H
``sum_all``          blocks 1 .. L, summed ("... All 12 Layers")      H
===================  ===============================================  =========

Conventions. ``hidden_states`` of `call_with_states` holds L + 1 tensors: the embedding
output, then each block's output. "All 12 layers" of BERT-base are its 12 Transformer
blocks, so ``sum_all`` sums ``hidden_states[1:]`` and leaves the embedding output out (it is
not a layer of the Transformer, and Table 7 lists it as its own row). Table 7 reports
"weighted" sums without giving weights; these modes use plain (equal-weight) sums, which a
downstream model can rescale. ``concat_last_four`` concatenates in layer order
(``[h_{L-3}; h_{L-2}; h_{L-1}; h_L]``), Table 7's best row (96.1 dev F1).

Padding positions carry whatever the encoder computed there; mask them downstream with the
same ``padding_mask``.
"""

from __future__ import annotations

import keras
from keras import ops

from lmfactory.models.task_model import deserialize_models

FEATURE_MODES = ("first_layer", "last_hidden", "sum_all", "second_to_last",
                 "sum_last_four", "concat_last_four")
# Transformer blocks a mode needs (hidden_states has one more entry).
_MIN_LAYERS = {"first_layer": 0, "last_hidden": 1, "sum_all": 1, "second_to_last": 2,
               "sum_last_four": 4, "concat_last_four": 4}


def feature_width(mode: str, hidden_dim: int) -> int:
    """F, the feature size ``mode`` gives for an encoder of hidden size ``hidden_dim``."""
    _check_mode(mode)
    return 4 * hidden_dim if mode == "concat_last_four" else hidden_dim


def _check_mode(mode):
    if mode not in FEATURE_MODES:
        raise ValueError(f"Unknown feature mode {mode!r}; modes: {FEATURE_MODES}")


def _check_depth(mode, num_layers):
    if num_layers < _MIN_LAYERS[mode]:
        raise ValueError(f"Feature mode {mode!r} needs an encoder with at least "
                         f"{_MIN_LAYERS[mode]} Transformer layers; this one has {num_layers}")


def select_features(hidden_states, mode: str):
    """[B, T, F] features of ``mode`` from the L + 1 ``hidden_states`` of `call_with_states`
    (embedding output first)."""
    _check_mode(mode)
    hidden_states = list(hidden_states)
    _check_depth(mode, len(hidden_states) - 1)
    if mode == "first_layer":
        return hidden_states[0]
    if mode == "last_hidden":
        return hidden_states[-1]
    if mode == "second_to_last":
        return hidden_states[-2]
    if mode == "sum_all":
        return ops.sum(ops.stack(hidden_states[1:], axis=0), axis=0)
    if mode == "sum_last_four":
        return ops.sum(ops.stack(hidden_states[-4:], axis=0), axis=0)
    return ops.concatenate(hidden_states[-4:], axis=-1)  # concat_last_four


@keras.saving.register_keras_serializable(package="lmfactory")
class EncoderFeatures(keras.layers.Layer):
    """Token features [B, T, F] from a pre-trained encoder's hidden states (§5.3).

    Works with any encoder backbone that implements ``call_with_states(inputs, training)``
    (the registry's encoder interface). keras-nlp has no layer that reads intermediate
    encoder layers, hence this one.

    Inputs: the backbone's input dict (e.g. ``token_ids``, ``padding_mask``,
        ``segment_ids``, int32 [B, T]).
    Output: float [B, T, F], F = H (``concat_last_four``: 4H).

    Args:
        backbone: the encoder backbone.
        mode: one of ``FEATURE_MODES`` (see the module docstring).
        freeze_backbone: if True (the default, the paper's feature-based setting), the
            backbone's weights are set non-trainable and it always runs in inference mode
            (no dropout), so the features are fixed.
    """

    def __init__(self, backbone, mode="concat_last_four", freeze_backbone=True, **kwargs):
        super().__init__(**kwargs)
        _check_mode(mode)
        if not callable(getattr(backbone, "call_with_states", None)):
            raise TypeError(f"EncoderFeatures needs an encoder backbone with "
                            f"call_with_states(); {type(backbone).__name__} has none")
        num_layers = getattr(backbone, "num_layers", None)
        if num_layers is not None:
            _check_depth(mode, int(num_layers))
        self.backbone = backbone
        self.mode = mode
        self.freeze_backbone = bool(freeze_backbone)
        if self.freeze_backbone:
            backbone.trainable = False

    def build(self, input_shape=None):
        self.built = True

    def call(self, inputs, training=None):
        if not isinstance(inputs, dict):
            raise TypeError(f"EncoderFeatures takes the backbone's input dict, got "
                            f"{type(inputs).__name__}")
        states = self.backbone.call_with_states(
            inputs, training=False if self.freeze_backbone else bool(training))
        return select_features(states["hidden_states"], self.mode)

    def get_config(self):
        config = super().get_config()
        config.update({
            "backbone": keras.layers.serialize(self.backbone),
            "mode": self.mode,
            "freeze_backbone": self.freeze_backbone,
        })
        return config

    @classmethod
    def from_config(cls, config):
        return cls(**deserialize_models(config))


__all__ = ["EncoderFeatures", "FEATURE_MODES", "feature_width", "select_features"]
