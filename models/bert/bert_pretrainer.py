"""BERT's pre-training task: masked LM + next sentence prediction (Devlin et al. 2019 §3.1)."""

import keras

from lmfactory.models.bert.bert_backbone import bert_kernel_initializer
# `sum_over_replicas` lives in models/task_losses.py; it stays importable from here, its
# first home, for code written against that.
from lmfactory.models.task_losses import sum_over_replicas  # noqa: F401
from lmfactory.models.task_model import MaskedLMPretrainer
# The folded masked-LM head lives in models/tied_output.py; it stays importable from here.
from lmfactory.models.tied_output import MaskedLMHead


class BertPretrainer(MaskedLMPretrainer):
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

    sentence_task = "nsp"

    def __init__(self, backbone, **kwargs):
        # === Layers ===
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
        super().__init__(backbone, self.masked_lm_head, self.next_sentence_head, **kwargs)
