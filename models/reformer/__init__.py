"""Reformer (Kitaev, Kaiser & Levskaya 2020). Importing this package registers the
"reformer" architecture."""

from lmfactory.models import registry
from lmfactory.models.reformer.reformer_backbone import ReformerBackbone
from lmfactory.models.reformer.reformer_causal_lm import ReformerCausalLM
from lmfactory.models.reformer.reformer_converters import from_huggingface
from lmfactory.models.reformer.reformer_presets import REFORMER_PRESETS

ARCHITECTURE = registry.register(
    registry.Architecture(
        name="reformer",
        family="decoder",
        backbone_cls=ReformerBackbone,
        presets=REFORMER_PRESETS,
        tokenizer_kind="byte",
        special_tokens={"end_of_text": "<|endoftext|>", "pad": "<|endoftext|>"},
        pretrainers={"causal_lm": ReformerCausalLM},
        heads={"causal_lm": ReformerCausalLM},
        converters={"huggingface": from_huggingface},
        hf_model_types=("reformer",),
        paper="Kitaev, Kaiser & Levskaya 2020, Reformer: The Efficient Transformer (ICLR)",
        # Which keys share a query's LSH chunk depends on the whole sorted sequence, so a
        # request cut after its longest row answers differently (tests/test_reformer.py).
        serving_length_multiple=None,
        backends=("tensorflow",),
        tensorflow_only_because=(
            "the reversible layers recompute activations in a "
            "tf.custom_gradient backward pass with tf.GradientTape"),
    )
)

__all__ = ["ARCHITECTURE", "REFORMER_PRESETS", "ReformerBackbone", "ReformerCausalLM"]
