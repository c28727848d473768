"""XLNet's permutation language model (Yang et al. 2019 §2.3, Eq. 4-5, partial prediction
with the §2.3 cut-off K, the reference's `two_stream_loss`)."""

import keras
from keras import ops

from lmfactory.models.task_losses import masked_lm_objective, with_regularization
from lmfactory.models.task_model import SubclassedTask
from lmfactory.models.tied_output import tied_logits

PRETRAINER_INPUTS = ("token_ids", "padding_mask", "segment_ids", "permutation_mask",
                     "target_mapping")


class XLNetPretrainer(SubclassedTask):
    """The two-stream permutation LM: the query stream g_z(t) at each predicted position
    (`target_mapping`, the last 1/K of the factorisation order) gives
    p(x_z(t) | x_z(<t)) = softmax(e(x)^T g_z(t) + b) (Eq. 4) with the output layer tied to
    the token embedding e plus a bias (the reference's `lm_loss` with `tie_weight`).

    Inputs (dict): `token_ids`, `padding_mask`, `segment_ids` [B, T]; `permutation_mask`
        [B, T, T] (1: i may not see j); `target_mapping` [B, K, T] (the permutation-LM
        objective builds them, components/pretraining_data/permutation_lm.py).
    Output: logits [B, K, V].
    Loss (`compute_loss`): the mean negative log-likelihood of the targets y [B, K] over the
        real predictions (sample_weight [B, K], 0 on padding predictions), Eq. 5 restricted
        to the predicted tokens; metrics `plm_loss`, `plm_accuracy`.
    """

    # Its vocabulary logits are the backbone's token embedding called in reverse, through
    # models/tied_output.py (checked by tests/conformance/test_tied_output.py).
    ties_output_embedding = True

    def __init__(self, backbone, **kwargs):
        super().__init__(**kwargs)
        self.backbone = backbone
        self.lm_bias = self.add_weight(name="lm_bias", shape=(backbone.vocabulary_size,),
                                       initializer="zeros")
        self.loss_tracker = keras.metrics.Mean(name="plm_loss")
        self.accuracy = keras.metrics.SparseCategoricalAccuracy(name="plm_accuracy")
        self.built = True  # the backbone is built and the bias made: nothing left to build

    def call(self, inputs, training=None):
        missing = [name for name in PRETRAINER_INPUTS if name not in inputs]
        if missing:
            raise ValueError(f"XLNetPretrainer needs the inputs {list(PRETRAINER_INPUTS)}; "
                             f"missing {missing}")
        outputs = self.backbone.call_two_stream(
            {name: inputs[name] for name in ("token_ids", "padding_mask", "segment_ids")},
            permutation_mask=inputs["permutation_mask"],
            target_mapping=inputs["target_mapping"], training=training)
        logits = tied_logits(self.backbone.token_embedding, outputs["query_output"])
        return ops.cast(logits, "float32") + ops.cast(self.lm_bias, "float32")

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        loss = masked_lm_objective(y, y_pred, sample_weight, self.loss_tracker,
                                   self.accuracy)
        return with_regularization(self, loss)

    @property
    def metrics(self):
        return [self.loss_tracker, self.accuracy]
