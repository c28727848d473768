"""The Transformer-XL language model: backbone + adaptive softmax, trained segment after
segment with the memory carried across steps (Dai et al. 2019, §3.2, §4)."""

from __future__ import annotations

import keras
from keras import ops

from lmfactory.models.backend import tf
from lmfactory.models.generation import CausalLMGeneration
from lmfactory.models.task_losses import (next_token_loss, sum_over_replicas,
                                          with_regularization)
from lmfactory.models.task_model import SubclassedTask
from lmfactory.models.transformer_xl.transformer_xl_adaptive_softmax import AdaptiveLogSoftmax

CAUSAL_LM_INPUTS = ("token_ids", "padding_mask")
# The optional input of ordered-stream batches (CONTRACTS §3 ``causal_lm_streams``): the
# index of the batch's segment within its streams in this pass (0 = the streams start).
STREAM_POSITION = "stream_position"


class TransformerXLCausalLM(CausalLMGeneration, SubclassedTask):
    """A `TransformerXLBackbone` with the adaptive softmax (`AdaptiveLogSoftmax`; tying as
    the backbone's ``tie_weights`` / ``tie_projections``).

    ``self(x)`` returns log-probabilities [B, T, V] of the next word (valid logits: their
    softmax is themselves) for one segment: with an empty memory, or, for a model with
    ``stream_batch_size`` and inputs that carry ``stream_position`` (ordered streams), after
    the phase's carried memory, which it updates (so held-out perplexity is scored with the
    memory, as the paper evaluates; components/tasks/language_model.py); `generate_ids`
    (`CausalLMGeneration`) decodes through the backbone's memory state.

    Training with memory (§3.2, "the hidden state sequence computed for the previous segment
    is fixed and cached to be reused as an extended context when the model processes the
    next new segment"): built with ``stream_batch_size`` = B (the trainer passes the batch
    size for an objective that declares ``ordered_streams``, whose batch k + 1's row b
    continues batch k's row b), the model keeps per layer a memory [B, mem_len, hidden] in
    non-trainable variables, one set for training and one for evaluation. Each step runs
    the segment after the memory (`TransformerXLBackbone.call_with_memory`), then stores the
    new memory (gradient stopped). The memory is emptied when a batch's ``stream_position``
    is 0 (the streams start again: a new epoch or pass); before it is full, its empty slots
    are masked. Without ``stream_batch_size`` every batch is an independent segment.

    Loss: the mean next-word negative log-likelihood over positions with weight; metrics
    `loss`, `nll` (perplexity = exp(nll)).

    Args:
        backbone: a `TransformerXLBackbone`.
        stream_batch_size: rows of the ordered streams whose memory is carried (None: off).
    """

    def __init__(self, backbone, stream_batch_size=None, **kwargs):
        super().__init__(**kwargs)
        self.backbone = backbone
        self.stream_batch_size = None if stream_batch_size is None else int(stream_batch_size)
        config = backbone.get_config()
        self.adaptive_softmax = AdaptiveLogSoftmax(
            config["vocabulary_size"], config["embedding_dim"], config["hidden_dim"],
            config["cutoffs"], config["div_val"], config["tie_weights"],
            config["tie_projections"], keras.initializers.RandomNormal(stddev=0.02),
            dtype=backbone.dtype_policy, name="adaptive_softmax")
        self.adaptive_softmax.build()
        self.memories = {}
        if self.stream_batch_size and backbone.mem_len > 0:
            shape = (self.stream_batch_size, backbone.mem_len, backbone.hidden_dim)
            for phase in ("train", "eval"):
                self.memories[phase] = (
                    [self.add_weight(name=f"{phase}_memory_{layer}", shape=shape,
                                     initializer="zeros", trainable=False)
                     for layer in range(backbone.num_layers)],
                    self.add_weight(name=f"{phase}_memory_filled", shape=(), dtype="int32",
                                    initializer="zeros", trainable=False))
        self.built = True
        self.nll_tracker = keras.metrics.Mean(name="nll")
        self._generation_state()

    # ------------------------------------------------------------------ forward

    def log_probabilities(self, hidden):
        """The adaptive softmax's log p(next word) [..., V] of hidden states [..., H]."""
        return self.adaptive_softmax(hidden, embedding=self.backbone.token_embedding)

    @staticmethod
    def _inputs(inputs):
        if not isinstance(inputs, dict) or any(k not in inputs for k in CAUSAL_LM_INPUTS):
            raise ValueError(f"TransformerXLCausalLM takes a dict with "
                             f"{list(CAUSAL_LM_INPUTS)}, got "
                             f"{sorted(inputs) if isinstance(inputs, dict) else inputs!r}")
        return {name: inputs[name] for name in CAUSAL_LM_INPUTS}

    def call(self, inputs, training=False):
        phase = "train" if training else "eval"
        if phase in self.memories and isinstance(inputs, dict) and STREAM_POSITION in inputs:
            return self._segment(inputs, phase, training)
        return self._without_memory(inputs, training)

    def _without_memory(self, inputs, training):
        hidden = self.backbone(self._inputs(inputs), training=training)["sequence_output"]
        return self.log_probabilities(hidden)

    def call_with_state(self, token_ids, state, index):
        """One decoding step (models/generation.py): (log-probs [B, n, V], hidden, state)."""
        hidden, state = self.backbone.call_with_state(token_ids, state, index)
        return self.log_probabilities(hidden), hidden, state

    def call_with_memory(self, inputs, memory=None, valid_memory_length=None, training=False):
        """One segment after ``memory`` (`TransformerXLBackbone.call_with_memory`): returns
        (log-probs [B, T, V], new memory)."""
        inputs = self._inputs(inputs)
        outputs = self.backbone.call_with_memory(
            inputs["token_ids"], memory, inputs["padding_mask"], valid_memory_length,
            training=training)
        return self.log_probabilities(outputs["sequence_output"]), outputs["memory"]

    # ------------------------------------------------------------------ memory across steps

    def _segment(self, x, phase, training):
        """Log-probs of the batch's segment, after (and updating) the carried memory."""
        if phase not in self.memories:
            return self._without_memory(x, training)
        variables, filled = self.memories[phase]
        batch = x["token_ids"].shape[0]
        if batch is not None and batch != self.stream_batch_size:
            raise ValueError(f"TransformerXLCausalLM carries the memory of "
                             f"{self.stream_batch_size} streams; the batch has {batch} rows")
        if STREAM_POSITION in x:  # the streams start again: empty memory
            start = ops.any(ops.equal(ops.cast(x[STREAM_POSITION], "int32"), 0))
            filled.assign(ops.where(start, 0, filled))
        log_probs, memory = self.call_with_memory(
            x, [ops.convert_to_tensor(v) for v in variables], valid_memory_length=filled,
            training=training)
        for variable, value in zip(variables, memory):
            variable.assign(ops.cast(value, variable.dtype))
        length = ops.shape(x["token_ids"])[1]
        filled.assign(ops.minimum(filled + length, self.backbone.mem_len))
        return log_probs

    def reset_memory(self):
        """Empties the carried memories (training and evaluation)."""
        for _, filled in self.memories.values():
            filled.assign(0)

    # ------------------------------------------------------------------ loss and steps

    def objective(self, y, sample_weight, log_probs):
        """Mean NLL of next ids ``y`` over positions with weight (`next_token_loss`; the
        log-probabilities are their own logits); updates `nll`."""
        loss = next_token_loss(ops.cast(y, "int32"), log_probs, sample_weight,
                               self.nll_tracker)
        return with_regularization(self, loss)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        return self.objective(y, sample_weight, y_pred)

    def _results(self, loss):
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(sum_over_replicas(ops.stop_gradient(loss)))
        return self.get_metrics_result()

    def train_step(self, data):
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        with tf.GradientTape() as tape:
            loss = self.objective(y, sample_weight, self._segment(x, "train", True))
            scaled_loss = self.optimizer.scale_loss(loss)
        variables = self.trainable_variables
        gradients = tape.gradient(scaled_loss, variables)
        self.optimizer.apply_gradients(zip(gradients, variables))
        return self._results(loss)

    def test_step(self, data):
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        loss = self.objective(y, sample_weight, self._segment(x, "eval", False))
        return self._results(loss)

    def get_config(self):
        config = super().get_config()
        config.update({"stream_batch_size": self.stream_batch_size})
        return config


__all__ = ["STREAM_POSITION", "TransformerXLCausalLM"]
