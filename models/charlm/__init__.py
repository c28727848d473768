"""The character-level deep Transformer LM (Al-Rfou et al. 2018). Importing this package
registers the "charlm" architecture.

Its characters are the 256 UTF-8 byte values (`charlm_vocabulary`, keras-nlp's
`ByteTokenizer`). The registry's tokenizer kinds have no byte vocabulary yet, so the
architecture registers the nearest one, byte-level "bpe" with GPT-2's special tokens: with a
small `vocab_size` it stays close to characters (keras-nlp's `BytePairTokenizer` needs at
least one merge, so at least 258 tokens). A dedicated "byte" kind built on
`charlm_vocabulary.byte_tokenizer` is what the pipeline should use once it exists.
"""

from lmfactory.models import registry
from lmfactory.models.charlm.charlm_backbone import CharTransformerBackbone
from lmfactory.models.charlm.charlm_causal_lm import CharTransformerLM
from lmfactory.models.charlm.charlm_presets import CHARLM_PRESETS

ARCHITECTURE = registry.register(
    registry.Architecture(
        name="charlm",
        family="decoder",
        backbone_cls=CharTransformerBackbone,
        presets=CHARLM_PRESETS,
        tokenizer_kind="bpe",
        pretrainers={"causal_lm": CharTransformerLM},
        classifier_cls=None,
        causal_lm_cls=CharTransformerLM,
        special_tokens={"end_of_text": "<|endoftext|>", "pad": "<|endoftext|>"},
        paper="Al-Rfou, Choe, Constant, Guo, Jones 2019, Character-Level Language Modeling "
              "with Deeper Self-Attention (AAAI), arXiv:1808.04444",
    )
)

__all__ = ["ARCHITECTURE", "CHARLM_PRESETS", "CharTransformerBackbone", "CharTransformerLM"]
