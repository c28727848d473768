"""ERNIE's pre-training task: masked LM + NSP + the denoising entity auto-encoder (dEA),
Zhang et al. 2019 §3.4."""

import keras
from keras import ops

from lmfactory.models.backend import tf
from lmfactory.models.bert.bert_backbone import bert_kernel_initializer
from lmfactory.models.ernie.ernie_backbone import ERNIE_BACKBONE_INPUTS
from lmfactory.models.task_losses import (masked_lm_objective, sentence_objective,
                                          sum_over_replicas, track_loss, with_regularization)
from lmfactory.models.task_model import MaskedLMPretrainer, int_inputs
from lmfactory.models.tied_output import MaskedLMHead

DEA = "dea"


def dea_loss(projected, table, labels, weights):
    """The dEA negative log-likelihood (§3.4, Eq. 7) and its accuracy counts.

    For each token i aligned to an entity (``weights`` > 0; the alignment before the
    corruption, so masked and replaced alignments are predicted too), p(e_j | w_i) =
    softmax_j(linear(w_i) · e_j) over the candidate entities, which are "the entities in the
    given entity sequence" of the batch: the distinct entities aligned in it (§3.4: "we
    only ask the model to predict entities based on the given entity sequence instead of
    all entities in KGs"). The e_j are the frozen TransE rows of ``table``.

    Args:
        projected: linear(w_i), [B, T, d_e].
        table: the entity table [E, d_e].
        labels: the aligned entity ids [B, T] (any value where ``weights`` is 0).
        weights: [B, T], 1 where a token has an aligned entity.

    Returns ``(sum of the NLL, number of predictions, number correct)`` of this replica.
    """
    aligned = ops.cast(weights, "float32") > 0
    ids = tf.boolean_mask(ops.cast(labels, "int32"), aligned)               # [N]
    vectors = ops.cast(tf.boolean_mask(projected, aligned), "float32")      # [N, d_e]
    candidates, targets = tf.unique(ids)                                    # [C], [N]
    logits = ops.matmul(vectors, ops.transpose(
        ops.cast(ops.take(table, candidates, axis=0), "float32")))          # [N, C]
    # One column more that no softmax can pick, so a batch without any aligned entity
    # (N = C = 0) still has a class axis; it adds exp(-1e9) = 0 to every normaliser.
    logits = ops.concatenate([logits, ops.full((ops.shape(logits)[0], 1), -1e9)], axis=-1)
    nll = keras.losses.sparse_categorical_crossentropy(targets, logits, from_logits=True)
    correct = ops.cast(ops.equal(ops.cast(ops.argmax(logits, axis=-1), "int32"),
                                 ops.cast(targets, "int32")), "float32")
    count = ops.cast(ops.shape(ids)[0], "float32")
    return ops.sum(nll), count, ops.sum(correct)


class ErniePretrainer(MaskedLMPretrainer):
    """An `ErnieBackbone` with BERT's two pre-training heads and the dEA (§3.4).

    §3.4: "In addition to the dEA, ERNIE also adopts the masked language model (MLM) and the
    next sentence prediction (NSP) as pre-training tasks ... The overall pre-training loss
    is the sum of the dEA, MLM and NSP loss." MLM and NSP are BERT's heads
    (`BertPretrainer`'s: the MLM output projection tied to the token embedding, the NSP
    Dense(2) on the pooled [CLS]). The dEA projects each final token vector to the entity
    dimension (the `linear` of Eq. 7, `entity_prediction_dense`) and scores it against the
    batch's candidate entities by a dot product with their TransE vectors (`dea_loss`); the
    table is the backbone's frozen `entity_embedding`. The corruption of the inputs (5%
    replaced, 15% masked, §3.4) is done by the ``ernie_dea`` record builder.

    Inputs (dict, int32): the backbone's (`token_ids`, `padding_mask`, `segment_ids`,
        `entity_ids`, `entity_mask`: the corrupted alignment) [B, T], `mask_positions` [B, P].
    Outputs: `mlm` logits [B, P, V], `nsp` logits [B, 2], `dea` the projected token vectors
        [B, T, d_e].
    Targets for `fit`: y = {"mlm": ids [B, P], "nsp": labels [B], "dea": the aligned entity
        ids before corruption [B, T]}, sample_weight = {"mlm": [B, P], "dea": 1 where a
        token has an aligned entity [B, T]}.
    Metrics: `mlm_loss`, `nsp_loss`, `dea_loss`, `mlm_accuracy`, `nsp_accuracy`,
        `dea_accuracy` (among the batch's candidates).

    Args:
        backbone: an `ErnieBackbone`.
        dea_weight: the dEA loss's weight in the sum (the paper: 1).
    """

    backbone_inputs = ERNIE_BACKBONE_INPUTS
    sentence_task = "nsp"

    def __init__(self, backbone, dea_weight=1.0, **kwargs):
        # === Layers ===
        self.masked_lm_head = MaskedLMHead(
            token_embedding=backbone.token_embedding, intermediate_activation="gelu",
            layer_norm_epsilon=1e-12, kernel_initializer=bert_kernel_initializer(),
            dtype=backbone.dtype_policy, name="masked_lm_head")
        self.next_sentence_head = keras.layers.Dense(
            2, kernel_initializer=bert_kernel_initializer(), dtype=backbone.dtype_policy,
            name="next_sentence_head")
        self.entity_prediction_dense = keras.layers.Dense(
            backbone.entity_dim, kernel_initializer=bert_kernel_initializer(),
            dtype=backbone.dtype_policy, name="entity_prediction_dense")

        # === Functional model ===
        self.backbone = backbone
        inputs = int_inputs(self.backbone_inputs + ("mask_positions",))
        encoded = backbone({name: inputs[name] for name in self.backbone_inputs})
        outputs = {
            "mlm": self.masked_lm_head(encoded["sequence_output"],
                                       mask_positions=inputs["mask_positions"]),
            "nsp": self.next_sentence_head(encoded["pooled_output"]),
            DEA: self.entity_prediction_dense(encoded["sequence_output"]),
        }
        super(MaskedLMPretrainer, self).__init__(inputs=inputs, outputs=outputs, **kwargs)
        self.dea_weight = float(dea_weight)

        # === Metrics ===
        self.mlm_loss_tracker = keras.metrics.Mean(name="mlm_loss")
        self.nsp_loss_tracker = keras.metrics.Mean(name="nsp_loss")
        self.dea_loss_tracker = keras.metrics.Mean(name="dea_loss")
        self.mlm_accuracy = keras.metrics.SparseCategoricalAccuracy(name="mlm_accuracy")
        self.nsp_accuracy = keras.metrics.SparseCategoricalAccuracy(name="nsp_accuracy")
        self.dea_accuracy = keras.metrics.Mean(name="dea_accuracy")

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        loss = masked_lm_objective(y["mlm"], y_pred["mlm"], sample_weight,
                                   self.mlm_loss_tracker, self.mlm_accuracy)
        loss = loss + sentence_objective(y["nsp"], y_pred["nsp"], self.nsp_loss_tracker,
                                         self.nsp_accuracy)
        nll, count, correct = dea_loss(y_pred[DEA], self.backbone.entity_table, y[DEA],
                                       sample_weight[DEA])
        # Mean over the global batch's aligned tokens (0 for a batch without entities).
        total = sum_over_replicas(count)
        dea = nll / ops.maximum(total, 1.0)
        track_loss(self.dea_loss_tracker, dea)
        self.dea_accuracy.update_state(sum_over_replicas(correct) / ops.maximum(total, 1.0))
        loss = loss + self.dea_weight * dea
        return with_regularization(self, loss)

    def get_config(self):
        config = super().get_config()
        config["dea_weight"] = self.dea_weight
        return config
