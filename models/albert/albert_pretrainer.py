"""ALBERT's pre-training task: masked LM + sentence-order prediction (Lan et al. 2020 §3.2,
§4.1)."""

import keras

from lmfactory.models.albert.albert_common import albert_kernel_initializer, get_activation
from lmfactory.models.task_model import MaskedLMPretrainer
from lmfactory.models.tied_output import MaskedLMHead


class AlbertPretrainer(MaskedLMPretrainer):
    """An `AlbertBackbone` with the masked-LM and sentence-order-prediction heads.

    Masked LM (§4.1, following BERT; n-gram masking decides which positions the data holds):
    the final hidden vectors at the masked positions go through a Dense(E) + GELU (tanh
    approximation) + LayerNorm transform back to the embedding size E, then an output
    projection tied to the E-sized input token embedding, plus an output bias (the
    released model's `predictions` head; keras-nlp's `MaskedLMHead` sizes its transform to
    the tied embedding's width, E; the projection onto the E-sized table is folded over
    the batch, `models/tied_output.py`).
    Sentence-order prediction (§3.2 "Inter-sentence coherence loss"): a binary classifier on
    the pooled `[CLS]` vector; positives are two consecutive segments in their original
    order, negatives the same two segments swapped (label 0 = in order, 1 = swapped).

    The loss is the sum of the mean masked-LM negative log-likelihood over real predictions
    (weighted by `masked_lm_weights`: ``sum(w * nll) / (sum(w) + 1e-5)``) and the mean SOP
    negative log-likelihood, as BERT's MLM + NSP loss with SOP in place of NSP.
    `compute_loss` computes it (compile with an optimizer and no `loss`); under a
    `tf.distribute` strategy the sums run over the global batch (`models/task_losses.py`).

    Inputs (dict, int32): `token_ids`, `padding_mask`, `segment_ids` [batch, seq_len],
        `mask_positions` [batch, num_predictions].
    Outputs (dict): `mlm` logits [batch, num_predictions, vocabulary_size],
        `sop` logits [batch, 2].
    Targets for `fit` (objective `albert_mlm_sop`): y = {"mlm": ids [B, P], "sop": labels
        [B]}, sample_weight = {"mlm": weights [B, P]}.
    Metrics: `mlm_loss`, `sop_loss`, `mlm_accuracy` (weighted), `sop_accuracy`.

    Args:
        backbone: an `AlbertBackbone`.
    """

    sentence_task = "sop"

    def __init__(self, backbone, **kwargs):
        # === Layers ===
        self.masked_lm_head = MaskedLMHead(
            token_embedding=backbone.token_embedding,
            intermediate_activation=get_activation(backbone.activation),
            layer_norm_epsilon=1e-12,
            kernel_initializer=albert_kernel_initializer(),
            dtype=backbone.dtype_policy,
            name="masked_lm_head",
        )
        self.sentence_order_head = keras.layers.Dense(
            2,
            kernel_initializer=albert_kernel_initializer(),
            dtype=backbone.dtype_policy,
            name="sentence_order_head",
        )
        super().__init__(backbone, self.masked_lm_head, self.sentence_order_head, **kwargs)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        if not isinstance(y, dict) or "mlm" not in y or "sop" not in y:
            raise ValueError("AlbertPretrainer trains on y = {'mlm': masked ids [B, P], "
                             "'sop': sentence-order labels [B]} (objective albert_mlm_sop); "
                             f"got {type(y).__name__} "
                             f"{sorted(y) if isinstance(y, dict) else ''}")
        return super().compute_loss(x, y, y_pred, sample_weight, training)
