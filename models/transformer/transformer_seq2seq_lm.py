"""The Transformer's ``seq2seq_lm`` head (Vaswani et al. 2017): the generic encoder-decoder
head (models/tasks/seq2seq_lm.py: teacher forcing, decoding through the state protocol,
length-normalised beam search) with the paper's output layer and loss.

* §3.4: "we share the same weight matrix between the two embedding layers and the
  pre-softmax linear transformation": logits = h E^T with E the backbone's
  `token_embedding` (keras-nlp `ReversibleEmbedding`, ``reverse=True``, through GPT-2's
  `TiedLogits`, which folds the positions into one product for a cheaper gradient); no
  output bias, no matrix of its own.
* §5.4, "Label Smoothing": training uses label smoothing of value eps_ls = 0.1 (Szegedy et
  al. 2016 §7): the target distribution is (1 - eps) on the reference token plus eps / V
  on every token, so the per-token loss is (1 - eps) * NLL + eps * mean_k(-log p_k). The
  reported metric ``nll`` stays the plain negative log-likelihood (what perplexity is
  computed from; the paper notes smoothing "hurts perplexity").
* §6.1: beam search with beam size 4 and length penalty alpha = 0.6 (Wu et al. 2016), the
  inherited `translate_ids` with ``num_beams=4, alpha=0.6`` (the translation task's
  ``task_args``).
"""

import keras
from keras import ops

from lmfactory.models.task_losses import sum_over_replicas, with_regularization
from lmfactory.models.task_model import Task, int_inputs
from lmfactory.models.tasks.seq2seq_lm import SEQ2SEQ_INPUTS, Seq2SeqLM
from lmfactory.models.tied_output import TiedLogits


def label_smoothed_nll(labels, logits, label_smoothing):
    """Per-token (smoothed loss, plain NLL), both [...]: the cross-entropy against
    (1 - eps) * one_hot(label) + eps / V (Szegedy et al. 2016), and -log p(label)."""
    log_probs = ops.log_softmax(ops.cast(logits, "float32"), axis=-1)
    labels = ops.cast(labels, "int32")
    nll = -ops.squeeze(ops.take_along_axis(log_probs, labels[..., None], axis=-1), axis=-1)
    uniform = -ops.mean(log_probs, axis=-1)
    return (1.0 - label_smoothing) * nll + label_smoothing * uniform, nll


class TransformerSeq2SeqLM(Seq2SeqLM):
    """A `TransformerBackbone` with the tied pre-softmax projection and the label-smoothed
    loss (module docstring).

    Inputs, outputs, targets and generation: as `Seq2SeqLM`. ``compute_loss`` is the
    weighted mean of the smoothed per-token loss (over the global batch under
    `tf.distribute`); metric ``nll``: the plain NLL.

    Args:
        backbone: a `TransformerBackbone` (its `token_embedding` is the output matrix).
        label_smoothing: eps_ls in [0, 1) (0.1, §5.4; 0 gives the plain NLL).
    """

    # Its vocabulary logits are the backbone's token embedding called in reverse, through
    # models/tied_output.py (checked by tests/conformance/test_tied_output.py).
    ties_output_embedding = True

    def __init__(self, backbone, label_smoothing=0.1, **kwargs):
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1), got {label_smoothing!r}")
        # === Layers ===
        self.backbone = backbone
        self.label_smoothing = float(label_smoothing)
        self.output_logits = TiedLogits(backbone.token_embedding, name="output_logits")

        # === Functional model ===
        inputs = int_inputs(SEQ2SEQ_INPUTS)
        hidden = backbone(inputs)["decoder_sequence_output"]
        logits = self.output_logits(hidden)
        # Seq2SeqLM's constructor would add an untied output layer: skip to Task's.
        Task.__init__(self, inputs=inputs, outputs=logits, **kwargs)

        # === Metrics ===
        self.nll_tracker = keras.metrics.Mean(name="nll")
        self._generation_state()

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        smoothed, nll = label_smoothed_nll(y, y_pred, self.label_smoothing)
        if sample_weight is None:
            weights = ops.ones(ops.shape(nll), dtype="float32")
        else:
            weights = ops.cast(sample_weight, "float32")
        loss = ops.sum(weights * smoothed) / ops.maximum(
            sum_over_replicas(ops.sum(weights)), 1e-9)
        self.nll_tracker.update_state(nll, sample_weight=weights)
        return with_regularization(self, loss)

    def call_with_state(self, token_ids, state, index):
        """The decoding step (models/generation.py): (logits [B, n, V], hidden, state)."""
        hidden, state = self.backbone.call_with_state(token_ids, state, index)
        return self.output_logits(hidden), hidden, state

    def get_config(self):
        config = super().get_config()
        config["label_smoothing"] = self.label_smoothing
        return config
