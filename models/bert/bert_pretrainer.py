"""BERT's pre-training task: masked LM + next sentence prediction (Devlin et al. 2019 §3.1)."""

import keras
import keras_nlp
import tensorflow as tf
from keras import ops

from lmfactory.models.bert.bert_backbone import bert_kernel_initializer

BERT_PRETRAINER_INPUTS = ("token_ids", "padding_mask", "segment_ids", "mask_positions")


def sum_over_replicas(value):
    """`value` summed over the replicas of a `tf.distribute` strategy (itself outside one).

    Losses below divide by global counts, so each replica returns its share of the global
    batch's loss; the gradients summed across replicas are then exactly those of one
    device seeing the whole batch, even when replicas hold different numbers of real
    masked-LM predictions."""
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return value
    return context.all_reduce(tf.distribute.ReduceOp.SUM, value)


@keras.saving.register_keras_serializable(package="lmfactory")
class BertPretrainer(keras.Model):
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
    strategy the sums run over the global batch (see `sum_over_replicas`).

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
        self.masked_lm_head = keras_nlp.layers.MaskedLMHead(
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
        mlm_logits = ops.cast(y_pred["mlm"], "float32")
        nsp_logits = ops.cast(y_pred["nsp"], "float32")
        mlm_labels = y["mlm"]
        nsp_labels = ops.reshape(y["nsp"], (-1,))
        if isinstance(sample_weight, dict):
            sample_weight = sample_weight.get("mlm")
        if sample_weight is None:
            mlm_weights = ops.ones(ops.shape(mlm_labels), dtype="float32")
        else:
            mlm_weights = ops.cast(sample_weight, "float32")

        mlm_nll = keras.losses.sparse_categorical_crossentropy(
            mlm_labels, mlm_logits, from_logits=True
        )
        nsp_nll = keras.losses.sparse_categorical_crossentropy(
            nsp_labels, nsp_logits, from_logits=True
        )
        mlm_loss = ops.sum(mlm_weights * mlm_nll) / (
            sum_over_replicas(ops.sum(mlm_weights)) + 1e-5
        )
        nsp_loss = ops.sum(nsp_nll) / sum_over_replicas(
            ops.cast(ops.shape(nsp_nll)[0], "float32")
        )

        self.mlm_loss_tracker.update_state(sum_over_replicas(ops.stop_gradient(mlm_loss)))
        self.nsp_loss_tracker.update_state(sum_over_replicas(ops.stop_gradient(nsp_loss)))
        self.mlm_accuracy.update_state(mlm_labels, mlm_logits, sample_weight=mlm_weights)
        self.nsp_accuracy.update_state(nsp_labels, nsp_logits)

        loss = mlm_loss + nsp_loss
        if self.losses:  # regularisers, if a caller adds any: averaged like Keras does
            regularization = ops.cast(ops.sum(self.losses), "float32")
            loss = loss + regularization / tf.distribute.get_strategy().num_replicas_in_sync
        return loss

    def get_config(self):
        return {
            "name": self.name,
            "trainable": self.trainable,
            "backbone": keras.layers.serialize(self.backbone),
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if isinstance(config.get("backbone"), dict):
            config["backbone"] = keras.layers.deserialize(config["backbone"])
        return cls(**config)
