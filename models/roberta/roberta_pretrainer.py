"""RoBERTa's pre-training task: masked LM only (Liu et al. 2019 §4.1-§4.2)."""

from lmfactory.models.roberta.roberta_backbone import (ROBERTA_BACKBONE_INPUTS,
                                                       roberta_kernel_initializer)
from lmfactory.models.task_model import MaskedLMPretrainer
from lmfactory.models.tied_output import MaskedLMHead


class RobertaPretrainer(MaskedLMPretrainer):
    """A `RobertaBackbone` with the masked-LM head, trained on the `mlm` objective.

    §4.2: RoBERTa drops BERT's next-sentence prediction and trains on FULL-SENTENCES inputs
    (contiguous sentences, possibly crossing documents, up to 512 tokens) with the masked
    language model alone. §4.1: the masking is dynamic, a new pattern each time a sequence
    is fed (done by the data stage, CONTRACTS §3); 15% of tokens are selected, of which 80%
    become `<mask>`, 10% a random token and 10% stay (BERT's rule, §2.3).

    The head is the released `RobertaLMHead`: the final hidden vectors at the masked
    positions go through Dense(H) + GELU + LayerNorm and an output projection tied to the
    input token embedding, plus an output bias (keras-nlp's `MaskedLMHead`, its projection
    folded: `models/tied_output.py`).

    The loss is the mean masked-LM negative log-likelihood over real predictions, weighted
    by the prediction weights (padding predictions carry weight 0):
    `sum(w * nll) / (sum(w) + 1e-5)`, the sums running over the global batch under a
    `tf.distribute` strategy (see `models/task_losses.py`). `compute_loss`
    implements it, so the model trains with `compile(optimizer=...)` and no `loss`.

    Inputs (dict, int32): `token_ids`, `padding_mask` [batch, seq_len], `mask_positions`
        [batch, num_predictions]. Other entries (the `mlm` records' all-zero
        `segment_ids`) are ignored.
    Outputs (dict): `mlm` logits [batch, num_predictions, vocabulary_size].
    Targets for `fit` (CONTRACTS §3, objective `mlm`): y = {"mlm": ids [B, P]},
        sample_weight = {"mlm": weights [B, P]}.
    Metrics: `mlm_loss`, `mlm_accuracy` (weighted).

    Args:
        backbone: a `RobertaBackbone`.
    """

    backbone_inputs = ROBERTA_BACKBONE_INPUTS

    def __init__(self, backbone, **kwargs):
        # === Layers ===
        self.masked_lm_head = MaskedLMHead(
            token_embedding=backbone.token_embedding,
            intermediate_activation="gelu",
            layer_norm_epsilon=backbone.layer_norm_epsilon,
            kernel_initializer=roberta_kernel_initializer(),
            dtype=backbone.dtype_policy,
            name="masked_lm_head",
        )
        super().__init__(backbone, self.masked_lm_head, **kwargs)
