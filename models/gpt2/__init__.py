"""GPT-2 (Radford et al. 2019). Importing this package registers the "gpt2" architecture."""

from lmfactory.models import registry
from lmfactory.models.gpt2.gpt2_backbone import GPT2Backbone
from lmfactory.models.gpt2.gpt2_causal_lm import GPT2CausalLM
from lmfactory.models.gpt2.gpt2_converters import from_huggingface
from lmfactory.models.gpt2.gpt2_presets import GPT2_PRESETS

ARCHITECTURE = registry.register(
    registry.Architecture(
        name="gpt2",
        family="decoder",
        backbone_cls=GPT2Backbone,
        presets=GPT2_PRESETS,
        tokenizer_kind="bpe",
        pretrainers={"causal_lm": GPT2CausalLM},
        heads={"causal_lm": GPT2CausalLM},
        special_tokens={"end_of_text": "<|endoftext|>", "pad": "<|endoftext|>"},
        converters={"huggingface": from_huggingface},
        hf_model_types=("gpt2",),
        paper="Radford et al. 2019, Language Models are Unsupervised Multitask Learners "
              "(OpenAI); GPT-1: Radford et al. 2018, Improving Language Understanding by "
              "Generative Pre-Training",
    )
)

__all__ = ["ARCHITECTURE", "GPT2_PRESETS", "GPT2Backbone", "GPT2CausalLM"]
