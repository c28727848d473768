"""XLNet (Yang et al. 2019). Importing this package registers the "xlnet" architecture."""

from lmfactory.models import registry
from lmfactory.models.xlnet.xlnet_backbone import XLNetBackbone
from lmfactory.models.xlnet.xlnet_classifier import XLNetClassifier
from lmfactory.models.xlnet.xlnet_converters import from_huggingface
from lmfactory.models.xlnet.xlnet_preprocessor import XLNetPreprocessor, pipeline_preprocessor
from lmfactory.models.xlnet.xlnet_presets import XLNET_PRESETS
from lmfactory.models.xlnet.xlnet_pretrainer import XLNetPretrainer

# The released SentencePiece model's special pieces (<eod> ends a document in the
# pre-training stream).
SPECIAL_TOKENS = {"pad": "<pad>", "unk": "<unk>", "cls": "<cls>", "sep": "<sep>",
                  "mask": "<mask>", "end_of_text": "<eod>"}

ARCHITECTURE = registry.register(
    registry.Architecture(
        name="xlnet",
        family="encoder",
        backbone_cls=XLNetBackbone,
        presets=XLNET_PRESETS,
        tokenizer_kind="sentencepiece",
        pretrainers={"permutation_lm": XLNetPretrainer},
        # The sequence summary on <cls> (the last token) and XLNet's own layout
        # (A <sep> B <sep> <cls>, left padding, <cls> in segment 2).
        heads={"classification": XLNetClassifier},
        preprocessors={"classification": pipeline_preprocessor},
        special_tokens=SPECIAL_TOKENS,
        converters={"huggingface": from_huggingface},
        hf_model_types=("xlnet",),
        paper="Yang et al. 2019, XLNet: Generalized Autoregressive Pretraining for Language "
              "Understanding (NeurIPS), arXiv:1906.08237",
    )
)

__all__ = ["ARCHITECTURE", "SPECIAL_TOKENS", "XLNET_PRESETS", "XLNetBackbone",
           "XLNetClassifier", "XLNetPreprocessor", "XLNetPretrainer", "from_huggingface"]
