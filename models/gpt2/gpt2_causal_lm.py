"""GPT-2 as a left-to-right language model (Radford et al. 2019 §2)."""

import keras
from keras import ops

from lmfactory.models.generation import CausalLMGeneration
from lmfactory.models.task_losses import sum_over_replicas, with_regularization
from lmfactory.models.task_model import BackboneTask

CAUSAL_LM_INPUTS = ("token_ids", "padding_mask")


@keras.saving.register_keras_serializable(package="lmfactory")
class GPT2CausalLM(CausalLMGeneration, BackboneTask, keras.Model):
    """A `GPT2Backbone` with the tied output layer, trained on next-token prediction.

    §2: language modelling is estimating p(x) = prod_i p(s_i | s_1, ..., s_{i-1}); the
    objective is the negative log-likelihood of each token given its prefix. GPT-1 §3.1:
    P(u) = softmax(h_n W_e^T), the output projection is the transposed token embedding
    matrix W_e.

    Inputs (dict, int32 [batch, seq_len]): `token_ids`, `padding_mask`.
    Output: next-token logits [batch, seq_len, vocabulary_size].
    Targets for `fit` (CONTRACTS §3 `causal_lm`): y = the ids shifted by one [B, L],
        sample_weight [B, L] (0 on padding). `compute_loss` is the weighted mean NLL over
        positions (of the global batch under `tf.distribute`), so the model trains with
        `compile(optimizer=...)` and no `loss`.
    Metrics: `nll` (token-weighted mean NLL; perplexity = exp(nll)).

    `generate_ids` (from `CausalLMGeneration`, models/generation.py) decodes from prompts
    with a `keras_nlp.samplers` sampler, using the backbone's key/value cache (see
    `GPT2Backbone.call_with_cache`). Any backbone with that interface (`token_embedding`,
    `initial_cache`, `call_with_cache`, `max_sequence_length`) works: GPT-3's does.

    Args:
        backbone: a `GPT2Backbone`.
    """

    def __init__(self, backbone, **kwargs):
        # === Layers ===
        self.backbone = backbone

        # === Functional model ===
        inputs = {
            name: keras.Input(shape=(None,), dtype="int32", name=name)
            for name in CAUSAL_LM_INPUTS
        }
        hidden = backbone(inputs)["sequence_output"]
        logits = backbone.token_embedding(hidden, reverse=True)
        super().__init__(inputs=inputs, outputs=logits, **kwargs)

        # === Metrics ===
        self.nll_tracker = keras.metrics.Mean(name="nll")

        # Named samplers and the seed variables of random ones (see CausalLMGeneration).
        self._generation_state()

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        logits = ops.cast(y_pred, "float32")
        nll = keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
        if sample_weight is None:
            weights = ops.ones(ops.shape(nll), dtype="float32")
        else:
            weights = ops.cast(sample_weight, "float32")
        # max(., 1e-9): a batch that is all padding contributes 0 instead of NaN.
        loss = ops.sum(weights * nll) / ops.maximum(sum_over_replicas(ops.sum(weights)), 1e-9)
        self.nll_tracker.update_state(nll, sample_weight=weights)
        return with_regularization(self, loss)

    def call_with_cache(self, token_ids, cache, cache_update_index):
        """One cached decoding step: (logits [B, n, V], hidden [B, n, H], cache)."""
        hidden, cache = self.backbone.call_with_cache(token_ids, cache, cache_update_index)
        logits = self.backbone.token_embedding(hidden, reverse=True)
        return logits, hidden, cache
