"""GPT-2 as a left-to-right language model (Radford et al. 2019 §2)."""

import keras

from lmfactory.models.generation import CausalLMGeneration
from lmfactory.models.task_losses import next_token_loss, with_regularization
from lmfactory.models.task_model import Task, int_inputs
# The folded tied output layer lives in models/tied_output.py; `tied_logits` and
# `TiedLogits` stay importable from here, their first home.
from lmfactory.models.tied_output import TiedLogits, tied_logits  # noqa: F401

CAUSAL_LM_INPUTS = ("token_ids", "padding_mask")


class GPT2CausalLM(CausalLMGeneration, Task):
    """A `GPT2Backbone` with the tied output layer, trained on next-token prediction.

    §2: language modelling is estimating p(x) = prod_i p(s_i | s_1, ..., s_{i-1}); the
    objective is the negative log-likelihood of each token given its prefix. GPT-1 §3.1:
    P(u) = softmax(h_n W_e^T), the output projection is the transposed token embedding
    matrix W_e (`output_logits`, a `TiedLogits` layer without weights of its own).

    Inputs (dict, int32 [batch, seq_len]): `token_ids`, `padding_mask`.
    Output: next-token logits [batch, seq_len, vocabulary_size].
    Targets for `fit` (CONTRACTS §3 `causal_lm`): y = the ids shifted by one [B, L],
        sample_weight [B, L] (0 on padding). `compute_loss` is the weighted mean NLL over
        positions (of the global batch under `tf.distribute`), so the model trains with
        `compile(optimizer=...)` and no `loss`.
    Metrics: `nll` (token-weighted mean NLL; perplexity = exp(nll)).

    `generate_ids` (from `CausalLMGeneration`, models/generation.py) decodes from prompts
    with a `keras_nlp.samplers` sampler through the decoding-state protocol, the backbone's
    state being its key/value cache (see `GPT2Backbone.call_with_state`). Any backbone with
    that interface (`token_embedding`, `initial_state`, `call_with_state`,
    `max_sequence_length`) works: GPT-3's does.

    Args:
        backbone: a `GPT2Backbone`.
    """

    # Its vocabulary logits are the backbone's token embedding called in reverse, through
    # models/tied_output.py (checked by tests/conformance/test_tied_output.py).
    ties_output_embedding = True

    def __init__(self, backbone, **kwargs):
        # === Layers ===
        self.backbone = backbone

        # === Functional model ===
        inputs = int_inputs(CAUSAL_LM_INPUTS)
        hidden = backbone(inputs)["sequence_output"]
        self.output_logits = TiedLogits(backbone.token_embedding, name="output_logits")
        logits = self.output_logits(hidden)
        super().__init__(inputs=inputs, outputs=logits, **kwargs)

        # === Metrics ===
        self.nll_tracker = keras.metrics.Mean(name="nll")

        # Named samplers and the seed variables of random ones (see CausalLMGeneration).
        self._generation_state()

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        loss = next_token_loss(y, y_pred, sample_weight, self.nll_tracker)
        return with_regularization(self, loss)

    def call_with_state(self, token_ids, state, index):
        """One decoding step of the tokens at positions `index`, ... (the protocol of
        models/generation.py): (logits [B, n, V], hidden [B, n, H], updated state)."""
        hidden, state = self.backbone.call_with_state(token_ids, state, index)
        logits = self.backbone.token_embedding(hidden, reverse=True)
        return logits, hidden, state
