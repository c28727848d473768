"""AWD-LSTM (Merity, Keskar & Socher 2018) and ULMFiT (Howard & Ruder 2018). Importing this
package registers the "awd_lstm" architecture.

The language model (`AwdLstmCausalLM`, objective ``causal_lm_bptt``, or ``causal_lm`` for
independent windows) is AWD-LSTM: DropConnect on the recurrent weights, locked and embedding
dropout, weight tying, AR / TAR, variable-length BPTT with the LSTM state carried from one
window of the parallel streams to the next, and NT-ASGD as an option (`NtAsgd`). Its classification head is ULMFiT's
(`UlmfitClassifier`): concat pooling and two BatchNorm / dropout / linear blocks, trained
with discriminative learning rates, slanted triangular learning rates and gradual
unfreezing. Words are whitespace-split (WikiText's own tokenisation); the vocabulary marks
the end of each sentence with ``<eos>`` as the reference code does, and a classified text is
packed as ``<eos> text <eos>``.
"""

from lmfactory.models import registry
from lmfactory.models.awd_lstm.awd_lstm_backbone import AwdLstmBackbone
from lmfactory.models.awd_lstm.awd_lstm_causal_lm import AwdLstmCausalLM
from lmfactory.models.awd_lstm.awd_lstm_presets import AWD_LSTM_PRESETS
from lmfactory.models.awd_lstm.nt_asgd import NtAsgd
from lmfactory.models.awd_lstm.ulmfit_classifier import UlmfitClassifier

SPECIAL_TOKENS = {"end_of_text": "<eos>", "pad": "<pad>", "unk": "<unk>", "cls": "<eos>",
                  "sep": "<eos>"}

ARCHITECTURE = registry.register(
    registry.Architecture(
        name="awd_lstm",
        family="recurrent",
        backbone_cls=AwdLstmBackbone,
        presets=AWD_LSTM_PRESETS,
        tokenizer_kind="word",
        causal=True,
        # causal_lm_bptt: the paper's training, windows of variable length over B parallel
        # streams with the LSTM state carried across them (§4.1, §5); causal_lm:
        # independent windows, each from the zero state.
        pretrainers={"causal_lm_bptt": AwdLstmCausalLM, "causal_lm": AwdLstmCausalLM},
        heads={"causal_lm": AwdLstmCausalLM, "classification": UlmfitClassifier},
        special_tokens=SPECIAL_TOKENS,
        paper="Merity, Keskar, Socher 2018, Regularizing and Optimizing LSTM Language "
              "Models (ICLR), arXiv:1708.02182; Howard, Ruder 2018, Universal Language Model "
              "Fine-tuning for Text Classification (ACL), arXiv:1801.06146",
        backends=("tensorflow",),
        tensorflow_only_because=(
            "its training step, NT-ASGD's averaging and the per-layer "
            "update scaling of ULMFiT are written on tf.GradientTape and tf.Variable"),
    )
)

__all__ = ["ARCHITECTURE", "AWD_LSTM_PRESETS", "AwdLstmBackbone", "AwdLstmCausalLM", "NtAsgd",
           "SPECIAL_TOKENS", "UlmfitClassifier"]
