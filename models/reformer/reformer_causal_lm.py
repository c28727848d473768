"""The Reformer as a left-to-right language model (Kitaev et al. 2020 §5: enwik8 and
imagenet64 are modelled autoregressively): the reference's LM head, a dense layer with bias
over the concatenated streams [B, T, 2 * hidden_dim] (untied from the token embedding).
"""

import keras
from keras import ops

from lmfactory.models.generation import CausalLMGeneration
from lmfactory.models.task_losses import sum_over_replicas, with_regularization
from lmfactory.models.task_model import Task, int_inputs


class ReformerCausalLM(CausalLMGeneration, Task):
    """A `ReformerBackbone` with the LM head, trained on next-token prediction.

    Inputs (dict, int32 [batch, seq_len]): `token_ids`, `padding_mask`.
    Output: next-token logits [batch, seq_len, vocabulary_size].
    Targets for `fit` (CONTRACTS §3 `causal_lm`): y [B, L] the next ids, sample_weight
        [B, L]; `compute_loss` is the weighted mean NLL (metric `nll`).

    Generation (`generate_ids`, models/generation.py) goes through the backbone's state,
    the ids decoded so far: each step re-runs the prefix (LSH buckets of a prefix depend on
    the whole prefix through the sort, so no per-layer cache is kept).

    Args:
        backbone: a `ReformerBackbone`.
    """

    def __init__(self, backbone, **kwargs):
        # === Layers ===
        self.backbone = backbone
        self.lm_head = keras.layers.Dense(
            backbone.vocabulary_size, name="lm_head",
            kernel_initializer=keras.initializers.RandomNormal(stddev=0.02),
            dtype=backbone.dtype_policy)

        # === Functional model ===
        inputs = int_inputs(("token_ids", "padding_mask"))
        logits = self.lm_head(backbone(inputs)["sequence_output"])
        super().__init__(inputs=inputs, outputs=logits, **kwargs)

        # === Metrics ===
        self.nll_tracker = keras.metrics.Mean(name="nll")
        self._generation_state()

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        logits = ops.cast(y_pred, "float32")
        nll = keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
        weights = ops.ones(ops.shape(nll), dtype="float32") if sample_weight is None \
            else ops.cast(sample_weight, "float32")
        loss = ops.sum(weights * nll) / ops.maximum(sum_over_replicas(ops.sum(weights)), 1e-9)
        self.nll_tracker.update_state(nll, sample_weight=weights)
        return with_regularization(self, loss)

    def call_with_state(self, token_ids, state, index):
        """(logits [B, n, V], hidden [B, n, 2H], state), the protocol of
        models/generation.py."""
        hidden, state = self.backbone.call_with_state(token_ids, state, index)
        return self.lm_head(hidden), hidden, state
