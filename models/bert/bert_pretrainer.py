"""BERT's pre-training task: masked LM + next sentence prediction (Devlin et al. 2019 §3.1)."""

import keras
import keras_nlp
import tensorflow as tf
from keras import ops

from lmfactory.models.bert.bert_backbone import bert_kernel_initializer
from lmfactory.models.gpt2.gpt2_causal_lm import tied_logits
# `sum_over_replicas` lives in models/task_losses.py; it stays importable from here, its
# first home, for code written against that.
from lmfactory.models.task_losses import (masked_lm_objective, sentence_objective,  # noqa: F401
                                          sum_over_replicas, with_regularization)
from lmfactory.models.task_model import BackboneTask

BERT_PRETRAINER_INPUTS = ("token_ids", "padding_mask", "segment_ids", "mask_positions")


class MaskedLMHead(keras_nlp.layers.MaskedLMHead):
    """keras-nlp's `MaskedLMHead` (same weights, same logits) whose output projection,
    tied to the token embedding, runs through `tied_logits`: the [B, P, H] transformed
    vectors are folded to [1, B * P, H] before the embedding layer's reverse call.

    keras-nlp's head hands [B, P, H] to the layer, whose broadcasting `matmul` builds the
    table's gradient as a [B, H, V] intermediate (250 MB for 32 x 20 predictions over
    30522 tokens) and sums it: about a fifth of a BERT-mini training step on CPU
    (`benchmarks/pretraining.py`). It keeps keras-nlp's class name: Keras weight files
    name a model's layers by it, so weights saved with either head load into the other.
    """

    def call(self, inputs, mask_positions):
        # The encoded tokens at the masked positions: [B, P, H].
        x = tf.gather(inputs, mask_positions, batch_dims=1)
        x = self._intermediate_layer_norm(self._intermediate_dense(x))
        outputs = ops.cast(tied_logits(self.token_embedding, x), self.compute_dtype)
        outputs = outputs + self._bias
        if self.activation is not None:
            outputs = self.activation(outputs)
        return outputs


@keras.saving.register_keras_serializable(package="lmfactory")
class BertPretrainer(BackboneTask, keras.Model):
    """A `BertBackbone` with the two pre-training heads of §3.1.

    Task #1, masked LM: the final hidden vectors at the masked positions go through a
    Dense(H) + GELU + LayerNorm transform and an output projection tied to the input token
    embedding, plus an output bias (Appendix A.1 and the released `get_masked_lm_output`).
    Task #2, next sentence prediction: a binary classifier on the pooled `[CLS]` vector.

    The pre-training loss (Appendix A.2) is the sum of the mean masked-LM likelihood and the
    mean next-sentence likelihood. The MLM mean runs over real predictions only, weighted
    by `masked_lm_weights` (padding predictions carry weight 0):
    `sum(w * nll) / (sum(w) + 1e-5)`. `compute_loss` implements exactly this, so the model
    trains with `compile(optimizer=...)` and no `loss` argument. Under a `tf.distribute`
    strategy the sums run over the global batch (see `models/task_losses.py`).

    Inputs (dict, int32): `token_ids`, `padding_mask`, `segment_ids` [batch, seq_len],
        `mask_positions` [batch, num_predictions].
    Outputs (dict): `mlm` logits [batch, num_predictions, vocabulary_size],
        `nsp` logits [batch, 2] (0 = IsNext, 1 = NotNext).
    Targets for `fit` (CONTRACTS §3): y = {"mlm": ids [B, P], "nsp": labels [B]},
        sample_weight = {"mlm": weights [B, P]}.
    Metrics: `mlm_loss`, `nsp_loss`, `mlm_accuracy` (weighted), `nsp_accuracy`.

    Args:
        backbone: a `BertBackbone`.
    """

    def __init__(self, backbone, **kwargs):
        # === Layers ===
        self.backbone = backbone
        self.masked_lm_head = MaskedLMHead(
            token_embedding=backbone.token_embedding,
            intermediate_activation="gelu",
            layer_norm_epsilon=1e-12,
            kernel_initializer=bert_kernel_initializer(),
            dtype=backbone.dtype_policy,
            name="masked_lm_head",
        )
        self.next_sentence_head = keras.layers.Dense(
            2,
            kernel_initializer=bert_kernel_initializer(),
            dtype=backbone.dtype_policy,
            name="next_sentence_head",
        )

        # === Functional model ===
        inputs = {
            name: keras.Input(shape=(None,), dtype="int32", name=name)
            for name in BERT_PRETRAINER_INPUTS
        }
        encoded = backbone(
            {name: inputs[name] for name in ("token_ids", "padding_mask", "segment_ids")}
        )
        mlm_logits = self.masked_lm_head(
            encoded["sequence_output"], mask_positions=inputs["mask_positions"]
        )
        nsp_logits = self.next_sentence_head(encoded["pooled_output"])
        super().__init__(inputs=inputs, outputs={"mlm": mlm_logits, "nsp": nsp_logits},
                         **kwargs)

        # === Metrics ===
        self.mlm_loss_tracker = keras.metrics.Mean(name="mlm_loss")
        self.nsp_loss_tracker = keras.metrics.Mean(name="nsp_loss")
        self.mlm_accuracy = keras.metrics.SparseCategoricalAccuracy(name="mlm_accuracy")
        self.nsp_accuracy = keras.metrics.SparseCategoricalAccuracy(name="nsp_accuracy")

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        mlm_loss = masked_lm_objective(y["mlm"], y_pred["mlm"], sample_weight,
                                       self.mlm_loss_tracker, self.mlm_accuracy)
        nsp_loss = sentence_objective(y["nsp"], y_pred["nsp"], self.nsp_loss_tracker,
                                      self.nsp_accuracy)
        return with_regularization(self, mlm_loss + nsp_loss)
