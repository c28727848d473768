"""T5's ``seq2seq_lm`` head (Raffel et al. 2020, §2.1 and §3.1.4): the decoder output
through the output layer of the backbone (`T5Backbone.output_logits`: the shared token
embedding, transposed, after rescaling the decoder output by d_model^-0.5 in T5 v1.0 as
the reference does; T5.1.1's separate output matrix, unscaled), a softmax over the
vocabulary, trained by teacher forcing with the mean cross-entropy of each real target
token ("maximum likelihood", §3.1.4 "teacher forcing"). Generation (greedy or beam
search) is the generic `Seq2SeqLM`'s; T5's decoder starts from id 0 (<pad>).

The generic head's own output layer (a separate dense W_o) is replaced, because T5's
output layer is the (tied or untied) embedding matrix the published checkpoints carry.
"""

import keras

from lmfactory.models.task_model import int_inputs
from lmfactory.models.tasks.seq2seq_lm import SEQ2SEQ_INPUTS, Seq2SeqLM


class T5Seq2SeqLM(Seq2SeqLM):
    """A `T5Backbone` with its output layer: inputs as `Seq2SeqLM`, logits [B, T, V]."""

    # Its vocabulary logits are the backbone's token embedding called in reverse, through
    # models/tied_output.py (checked by tests/conformance/test_tied_output.py).
    ties_output_embedding = True

    def __init__(self, backbone, **kwargs):
        # === Layers === (the output layer is the backbone's `token_embedding`)
        self.backbone = backbone

        # === Functional model ===
        inputs = int_inputs(SEQ2SEQ_INPUTS)
        logits = backbone.output_logits(backbone(inputs)["decoder_sequence_output"])
        super(Seq2SeqLM, self).__init__(inputs=inputs, outputs=logits, **kwargs)

        # === Metrics ===
        self.nll_tracker = keras.metrics.Mean(name="nll")
        self._generation_state()

    def call_with_state(self, token_ids, state, index):
        """The decoding step (models/generation.py): (logits [B, n, V], hidden, state)."""
        hidden, state = self.backbone.call_with_state(token_ids, state, index)
        return self.backbone.output_logits(hidden), hidden, state
