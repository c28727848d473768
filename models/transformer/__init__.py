"""The Transformer (Vaswani et al. 2017). Importing this package registers the
"transformer" architecture: an encoder-decoder trained from scratch on parallel text (no
pretraining objective) through its own ``seq2seq_lm`` head (tied output projection, label
smoothing) on the ``translation`` task kind."""

from lmfactory.models import registry
from lmfactory.models.transformer.transformer_backbone import TransformerBackbone
from lmfactory.models.transformer.transformer_presets import TRANSFORMER_PRESETS
from lmfactory.models.transformer.transformer_seq2seq_lm import TransformerSeq2SeqLM

ARCHITECTURE = registry.register(
    registry.Architecture(
        name="transformer",
        family="encoder_decoder",
        backbone_cls=TransformerBackbone,
        presets=TRANSFORMER_PRESETS,
        # A joint subword vocabulary of both languages (§5.1: a shared source-target
        # byte-pair encoding; here SentencePiece, learned by VocabularyGen).
        tokenizer_kind="sentencepiece",
        pretrainers={},
        heads={"seq2seq_lm": TransformerSeq2SeqLM},
        special_tokens={"pad": "<pad>", "unk": "<unk>", "start": "<s>",
                        "end_of_text": "</s>"},
        paper="Vaswani et al. 2017, Attention Is All You Need (NeurIPS)",
    )
)

__all__ = ["ARCHITECTURE", "TRANSFORMER_PRESETS", "TransformerBackbone",
           "TransformerSeq2SeqLM"]
