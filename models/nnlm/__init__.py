"""The neural probabilistic language model of Bengio, Ducharme, Vincent, Jauvin 2003
(JMLR). Importing this package registers the "nnlm" architecture.

A left-to-right word-level language model over a fixed n-gram context (family "decoder":
it is causal and generates through the shared loop of models/generation.py): the shared
word feature matrix C, y = b + W x + U tanh(d + H x) (§2), trained on the ``causal_lm``
objective with weight decay on the weights and C, not the biases. Words come from the
"word" tokenizer kind (whitespace-split words, the most frequent ones kept, ``<unk>`` for
the rest, as the paper's vocabularies map rare words to one symbol, §4).
"""

from lmfactory.models import registry
from lmfactory.models.nnlm.nnlm_backbone import NgramContext, NnlmBackbone
from lmfactory.models.nnlm.nnlm_causal_lm import WEIGHT_DECAY, NnlmCausalLM
from lmfactory.models.nnlm.nnlm_presets import NNLM_PRESETS

# "<unk>": the one symbol of the rare words (WikiText already spells it); "</s>" ends a
# document in `causal_lm` blocks, pads, and starts and stops generation.
SPECIAL_TOKENS = {"unk": "<unk>", "end_of_text": "</s>", "pad": "</s>"}

ARCHITECTURE = registry.register(
    registry.Architecture(
        name="nnlm",
        family="decoder",
        backbone_cls=NnlmBackbone,
        presets=NNLM_PRESETS,
        tokenizer_kind="word",
        pretrainers={"causal_lm": NnlmCausalLM},
        heads={"causal_lm": NnlmCausalLM},
        special_tokens=SPECIAL_TOKENS,
        paper="Bengio, Ducharme, Vincent, Jauvin 2003, A Neural Probabilistic Language "
              "Model, Journal of Machine Learning Research 3:1137-1155",
    )
)

__all__ = ["ARCHITECTURE", "NNLM_PRESETS", "NgramContext", "NnlmBackbone", "NnlmCausalLM",
           "SPECIAL_TOKENS", "WEIGHT_DECAY"]
