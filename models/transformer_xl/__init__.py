"""Transformer-XL (Dai et al. 2019). Importing this package registers the "transformer_xl"
architecture: the backbone (segment-level recurrence, relative positional attention,
adaptive input), its language model with the adaptive softmax, trained on ordered streams
with the memory carried across steps, and the converter of Hugging Face's TransfoXL."""

from lmfactory.models import registry
from lmfactory.models.transformer_xl.transformer_xl_backbone import TransformerXLBackbone
from lmfactory.models.transformer_xl.transformer_xl_causal_lm import TransformerXLCausalLM
from lmfactory.models.transformer_xl.transformer_xl_converters import from_huggingface
from lmfactory.models.transformer_xl.transformer_xl_presets import TRANSFORMER_XL_PRESETS

SPECIAL_TOKENS = {"end_of_text": "<eos>", "unk": "<unk>", "pad": "<pad>"}

ARCHITECTURE = registry.register(
    registry.Architecture(
        name="transformer_xl",
        family="decoder",
        backbone_cls=TransformerXLBackbone,
        presets=TRANSFORMER_XL_PRESETS,
        tokenizer_kind="word",
        pretrainers={"causal_lm_streams": TransformerXLCausalLM,
                     "causal_lm": TransformerXLCausalLM},
        heads={"causal_lm": TransformerXLCausalLM},
        special_tokens=SPECIAL_TOKENS,
        converters={"huggingface": from_huggingface},
        hf_model_types=("transfo-xl",),
        paper="Dai, Yang, Yang, Carbonell, Le, Salakhutdinov 2019, Transformer-XL: Attentive "
              "Language Models Beyond a Fixed-Length Context (ACL), arXiv:1901.02860",
        backends=("tensorflow",),
        tensorflow_only_because=(
            "its training step carries the segment memory across batches "
            "in variables assigned inside a tf.GradientTape step"),
    )
)

__all__ = ["ARCHITECTURE", "SPECIAL_TOKENS", "TRANSFORMER_XL_PRESETS", "TransformerXLBackbone",
           "TransformerXLCausalLM", "from_huggingface"]
