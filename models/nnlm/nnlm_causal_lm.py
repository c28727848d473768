"""The NNLM as a language model: its training criterion with the weight decay of §2 (Bengio
et al. 2003) and generation."""

import keras
from keras import ops

from lmfactory.models import backend
from lmfactory.models.generation import CausalLMGeneration
from lmfactory.models.nnlm.nnlm_backbone import NNLM_INPUTS
from lmfactory.models.task_losses import next_token_loss
from lmfactory.models.task_model import Task, int_inputs

# §4: "a weight decay penalty of 10^-4".
WEIGHT_DECAY = 1e-4


class NnlmCausalLM(CausalLMGeneration, Task):
    """An `NnlmBackbone` trained on next-word prediction with the criterion of §2.

    The model's output is the backbone's y = b + W x + U tanh(d + H x) (§2; the output
    layer is the backbone's, see `NnlmBackbone`).

    Training criterion (§2): maximise the mean log-likelihood of the training words
    penalised by a weight decay R applied to the weights of the network and to the feature
    matrix C, not to the biases. `compute_loss` is the mean negative log-likelihood over the
    real positions plus `weight_decay_penalty`, 0.5 * weight_decay * (|H|^2 + |U|^2 + |W|^2
    + |C|^2): its gradient adds weight_decay * theta to each of those, the paper's weight
    decay (§4 uses 10^-4), and nothing to b and d. The penalty lives in the loss, not in the
    optimizer, because an AdamW-style decay would shrink the biases too; a recipe therefore
    sets the optimizer's own ``weight_decay`` to 0.

    Inputs (dict, int32 [batch, seq_len]): `token_ids`, `padding_mask`.
    Output: next-word logits y [batch, seq_len, vocabulary_size].
    Targets for `fit` (CONTRACTS §3 `causal_lm`): y = the ids shifted by one [B, L],
        sample_weight [B, L] (0 on padding).
    Metrics: `nll` (token-weighted mean NLL, perplexity = exp(nll)), `weight_decay_penalty`.

    `generate_ids` (`CausalLMGeneration`) decodes through the backbone's decoding state, the
    ids of the words at each position (`NnlmBackbone.initial_state`).

    Args:
        backbone: an `NnlmBackbone`.
        weight_decay: the coefficient of the penalty (§4: 1e-4).
    """

    def __init__(self, backbone, weight_decay=WEIGHT_DECAY, **kwargs):
        if isinstance(weight_decay, bool) or not isinstance(weight_decay, (int, float)) \
                or weight_decay < 0:
            raise ValueError(f"weight_decay must be a number >= 0, got {weight_decay!r}")
        # === Layers ===
        self.backbone = backbone

        # === Functional model ===
        inputs = int_inputs(NNLM_INPUTS)
        logits = backbone(inputs)["logits"]
        super().__init__(inputs=inputs, outputs=logits, **kwargs)
        self.weight_decay = float(weight_decay)

        # === Metrics ===
        self.nll_tracker = keras.metrics.Mean(name="nll")
        self.penalty_tracker = keras.metrics.Mean(name="weight_decay_penalty")

        # Named samplers and the seed variables of random ones (see CausalLMGeneration).
        self._generation_state()

    def decayed_weights(self) -> list:
        """The weights the penalty applies to (§2): H, U, W (with direct connections) and C;
        never the biases b and d."""
        backbone = self.backbone
        weights = [backbone.word_features.embeddings, backbone.hidden.kernel,
                   backbone.output_layer.kernel]
        if backbone.direct is not None:
            weights.append(backbone.direct.kernel)
        return weights

    def weight_decay_penalty(self):
        """0.5 * weight_decay * the sum of squares of `decayed_weights` (float32 scalar)."""
        squares = [ops.sum(ops.square(ops.cast(weight, "float32")))
                   for weight in self.decayed_weights()]
        return 0.5 * self.weight_decay * ops.sum(ops.stack(squares))

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        loss = next_token_loss(y, y_pred, sample_weight, self.nll_tracker)
        penalty = self.weight_decay_penalty()
        self.penalty_tracker.update_state(penalty)
        # Each replica adds its share: the replicas' gradients sum to one penalty's.
        return loss + penalty / backend.replicas_in_sync()

    def call_with_state(self, token_ids, state, index):
        """One decoding step of the words at positions `index`, ... (the protocol of
        models/generation.py): (logits [B, k, V], tanh(d + H x) [B, k, h], updated state)."""
        outputs, state = self.backbone.call_with_state_outputs(token_ids, state, index)
        return outputs["logits"], outputs["sequence_output"], state

    def get_config(self):
        config = super().get_config()
        config["weight_decay"] = self.weight_decay
        return config


__all__ = ["NnlmCausalLM", "WEIGHT_DECAY"]
