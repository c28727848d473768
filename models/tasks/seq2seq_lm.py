"""The ``seq2seq_lm`` head of every encoder-decoder: p(y_i | y_<i, x) = softmax(W_o t_i)
over the backbone's decoder outputs t_i (``decoder_sequence_output``, or the output a
backbone names in ``readout_output``), trained with
teacher forcing, generating through the decoding-state protocol (models/generation.py)
with the encoder inputs as ``state_context``.

Bahdanau et al. 2015 §3.1 / Appendix A.2.2: the conditional probability of the next
target word is a softmax over the vocabulary of a linear map of the deep output t_i
(W_o, from N(0, 0.01^2), Appendix B.1); the model is trained to maximise the
log-likelihood of the reference translation given the source (§2.1), i.e. the mean
negative log-likelihood of each real target word given the reference prefix.
"""

import keras
from keras import ops

from lmfactory.models import registry
from lmfactory.models.generation import CausalLMGeneration
from lmfactory.models.task_losses import next_token_loss, with_regularization
from lmfactory.models.task_model import Task, int_inputs
from lmfactory.models.tasks.beam_search import LengthNormalizedBeamSampler

SEQ2SEQ_INPUTS = ("encoder_token_ids", "encoder_padding_mask", "decoder_token_ids",
                  "decoder_padding_mask")


class Seq2SeqLM(CausalLMGeneration, Task):
    """An encoder-decoder backbone with an output softmax over the vocabulary.

    Inputs (dict, int32): `encoder_token_ids`, `encoder_padding_mask` [B, S],
        `decoder_token_ids` (start token + target shifted right), `decoder_padding_mask`
        [B, T].
    Output: logits [B, T, vocabulary_size] of the next target word at every position.
    Targets for `fit`: y = the target ids (the decoder ids shifted left, ending with the
        end token) [B, T], sample_weight [B, T] (0 on padding). `compute_loss` is the
        weighted mean NLL (over the global batch under `tf.distribute`): the model
        compiles with an optimizer and no `loss`. Metric: `nll`.

    Generation: `generate_ids(decoder prompt [B, 1], max_length, sampler, state_context=
    {"encoder_token_ids": ..., "encoder_padding_mask": ...})` (the backbone's
    `initial_state` runs the encoder); `translate_ids` wraps it with a start token and
    length-normalised beam search.

    Args:
        backbone: an encoder-decoder backbone with `initial_state`, `call_with_state`
            (whose hidden is what the output layer reads), `vocabulary_size`,
            `max_sequence_length`; the output layer reads its `decoder_sequence_output`,
            or the output named by its class attribute `readout_output` (RNNsearch's deep
            output t_i).
    """

    def __init__(self, backbone, **kwargs):
        # === Layers ===
        self.backbone = backbone
        self.output_dense = keras.layers.Dense(
            backbone.vocabulary_size, kernel_initializer=keras.initializers.RandomNormal(
                stddev=0.01), dtype=backbone.dtype_policy, name="logits")  # W_o

        # === Functional model ===
        inputs = int_inputs(SEQ2SEQ_INPUTS)
        readout = getattr(backbone, "readout_output", "decoder_sequence_output")
        logits = self.output_dense(backbone(inputs)[readout])
        super().__init__(inputs=inputs, outputs=logits, **kwargs)

        # === Metrics ===
        self.nll_tracker = keras.metrics.Mean(name="nll")
        self._generation_state()

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        loss = next_token_loss(y, y_pred, sample_weight, self.nll_tracker)
        return with_regularization(self, loss)

    def call_with_state(self, token_ids, state, index):
        """The decoding step (models/generation.py): (logits [B, n, V], hidden, state)."""
        hidden, state = self.backbone.call_with_state(token_ids, state, index)
        return self.output_dense(hidden), hidden, state

    def translate_ids(self, encoder_token_ids, encoder_padding_mask, start_token_id,
                      end_token_id, max_length=None, num_beams=1, alpha=1.0):
        """Target ids [B, max_length] (start token first; after the end token, the end
        token as padding) for the sources [B, S]: greedy with ``num_beams=1``, else beam
        search ranking hypotheses by log-probability / ((5 + length) / 6)^alpha."""
        batch_size = ops.shape(encoder_token_ids)[0]
        prompt = ops.full((batch_size, 1), start_token_id, dtype="int32")
        sampler = "greedy" if num_beams == 1 else self._beam_sampler(num_beams, alpha)
        return self.generate_ids(
            prompt, max_length=max_length, sampler=sampler, end_token_id=end_token_id,
            state_context={"encoder_token_ids": encoder_token_ids,
                           "encoder_padding_mask": encoder_padding_mask})

    def _beam_sampler(self, num_beams, alpha):
        samplers, _ = self._generation_state()
        key = ("length_normalized_beam", num_beams, float(alpha))
        if key not in samplers:
            samplers[key] = LengthNormalizedBeamSampler(num_beams=num_beams, alpha=alpha)
        return samplers[key]


registry.register_family_head("encoder_decoder", "seq2seq_lm", Seq2SeqLM)

__all__ = ["SEQ2SEQ_INPUTS", "Seq2SeqLM"]
