"""The Quaternion Transformer (Tay et al. 2019, "Lightweight and Efficient Neural Natural
Language Processing with Quaternion Networks", ACL). Importing this package registers the
"quaternion_transformer" architecture: the encoder-decoder Transformer with quaternion
attention and feed-forward layers (Hamilton products, 1/4 of the weights of those layers),
trained from scratch on parallel text through the Transformer's ``seq2seq_lm`` head (tied
output projection, label smoothing) on the ``translation`` task kind. The quaternion layers
(``quaternion_dense``, ``quaternion_attention``, ``quaternion_blocks``) are also the blocks
of the encoder-only ``quaternion_encoder`` architecture."""

from lmfactory.models import registry
from lmfactory.models.quaternion_transformer.quaternion_transformer_backbone import (
    QuaternionTransformerBackbone)
from lmfactory.models.quaternion_transformer.quaternion_transformer_presets import (
    QUATERNION_TRANSFORMER_PRESETS)
from lmfactory.models.transformer.transformer_seq2seq_lm import TransformerSeq2SeqLM

ARCHITECTURE = registry.register(
    registry.Architecture(
        name="quaternion_transformer",
        family="encoder_decoder",
        backbone_cls=QuaternionTransformerBackbone,
        presets=QUATERNION_TRANSFORMER_PRESETS,
        # The Transformer's joint source-target subword vocabulary (SentencePiece).
        tokenizer_kind="sentencepiece",
        pretrainers={},
        heads={"seq2seq_lm": TransformerSeq2SeqLM},
        special_tokens={"pad": "<pad>", "unk": "<unk>", "start": "<s>",
                        "end_of_text": "</s>"},
        paper="Tay et al. 2019, Lightweight and Efficient Neural Natural Language "
              "Processing with Quaternion Networks (ACL)",
    )
)

__all__ = ["ARCHITECTURE", "QUATERNION_TRANSFORMER_PRESETS", "QuaternionTransformerBackbone"]
