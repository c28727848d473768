"""GPT-3 (Brown et al. 2020). Importing this package registers the "gpt3" architecture.

The task model is GPT-2's `GPT2CausalLM`, which takes any backbone with GPT-2's interface
(`token_embedding`, `initial_state`, `call_with_state`, `max_sequence_length`); GPT-3 trains
the same left-to-right language-modelling objective (§2.1)."""

from lmfactory.models import registry
from lmfactory.models.gpt2.gpt2_causal_lm import GPT2CausalLM
from lmfactory.models.gpt3.gpt3_backbone import GPT3Backbone
from lmfactory.models.gpt3.gpt3_presets import (
    GPT3_OPTIMIZATION,
    GPT3_PRESETS,
    GPT3_TABLE,
    GPT3_TRAINING,
    parameter_count,
    training_settings,
)

ARCHITECTURE = registry.register(
    registry.Architecture(
        name="gpt3",
        family="decoder",
        backbone_cls=GPT3Backbone,
        presets=GPT3_PRESETS,
        tokenizer_kind="bpe",
        pretrainers={"causal_lm": GPT2CausalLM},
        heads={"causal_lm": GPT2CausalLM},
        special_tokens={"end_of_text": "<|endoftext|>", "pad": "<|endoftext|>"},
        paper="Brown et al. 2020, Language Models are Few-Shot Learners (NeurIPS), "
              "arXiv:2005.14165; sparse attention: Child et al. 2019, Generating Long "
              "Sequences with Sparse Transformers, arXiv:1904.10509",
    )
)

__all__ = [
    "ARCHITECTURE",
    "GPT2CausalLM",
    "GPT3Backbone",
    "GPT3_OPTIMIZATION",
    "GPT3_PRESETS",
    "GPT3_TABLE",
    "GPT3_TRAINING",
    "parameter_count",
    "training_settings",
]
