"""The character-level deep Transformer LM (Al-Rfou et al. 2018). Importing this package
registers the "charlm" architecture.

Its characters are the 256 UTF-8 byte values, as in the paper's enwik8 experiments: the
pipeline's "byte" tokenizer kind (`lmfactory.models.tokenizers.Utf8ByteTokenizer`, keras-nlp's
`ByteTokenizer`; VocabularyGen learns nothing and records the corpus's byte counts) gives
ids 0..255 to the bytes and id 256 to `<|endoftext|>`, which separates documents in
`causal_lm` examples, pads, and starts generation; a pipeline-trained model therefore has a
257-token vocabulary. `charlm_vocabulary` is the same byte mapping in numpy, for reading a
text as one unbroken stream without a special token.
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
        tokenizer_kind="byte",
        pretrainers={"causal_lm": CharTransformerLM},
        heads={"causal_lm": CharTransformerLM},
        special_tokens={"end_of_text": "<|endoftext|>", "pad": "<|endoftext|>"},
        paper="Al-Rfou, Choe, Constant, Guo, Jones 2019, Character-Level Language Modeling "
              "with Deeper Self-Attention (AAAI), arXiv:1808.04444",
    )
)

__all__ = ["ARCHITECTURE", "CHARLM_PRESETS", "CharTransformerBackbone", "CharTransformerLM"]
