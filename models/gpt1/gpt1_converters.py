"""Loading published GPT-1 checkpoints (Hugging Face ``openai-gpt`` format) into a
`Gpt1Backbone`.

A Hugging Face OpenAI GPT folder holds ``config.json`` (``model_type: "openai-gpt"``) and
``model.safetensors``. Weight names are bare (``tokens_embed.weight``, as
``OpenAIGPTModel`` saves them) or nested under ``transformer.`` (``OpenAIGPTLMHeadModel``,
``OpenAIGPTDoubleHeadsModel``, whose ``multiple_choice_head`` is not backbone and is
ignored). The blocks have GPT-2's weight names and Conv1D layout (``[in, out]``;
``attn.c_attn`` = query, key, value side by side), read with GPT-2's converter pieces
(`lmfactory.models.gpt2.gpt2_converters`), but GPT-1 is post-LN (Radford et al. 2018 §3.1,
the Transformer of Vaswani et al.): ``ln_1`` normalises ``x + attention(x)`` and ``ln_2``
normalises ``n + mlp(n)``, AFTER their sub-layers, and there is no final LayerNorm; a
`Gpt1Backbone` block (`normalize_first=False`) has its LayerNorms in those places.

Hugging Face's ``afn: "gelu"`` for this model is GELU's tanh approximation (its
``gelu_new``, the released code's), as in `Gpt1Backbone`. The output layer is the token
embedding; a stored ``lm_head.weight`` must equal ``tokens_embed.weight``.
"""

from __future__ import annotations

import os

from lmfactory.models import hf_utils
from lmfactory.models.gpt1.gpt1_backbone import Gpt1Backbone
from lmfactory.models.gpt2.gpt2_converters import (PREFIXES, check_all_read,
                                                   decoder_dimensions, set_decoder)

BACKBONE_SCOPES = ("tokens_embed.", "positions_embed.", "h.")
# Hugging Face names of GELU's tanh approximation for model_type "openai-gpt".
TANH_GELU = ("gelu", "gelu_new")
REQUIRED_CONFIG_KEYS = ("vocab_size", "n_embd", "n_layer", "n_head", "n_positions")


def backbone_config(config: dict, source: str) -> dict:
    """`Gpt1Backbone` constructor kwargs from a Hugging Face ``openai-gpt`` config; raises
    ValueError for what `Gpt1Backbone` cannot represent."""
    hf_utils.check_config(config, source, required_keys=REQUIRED_CONFIG_KEYS,
                          what="OpenAI GPT", model_type="openai-gpt", converter="GPT-1")
    activation = config.get("afn", "gelu")
    if activation not in TANH_GELU:
        raise ValueError(f"{source}: afn is {activation!r}; Gpt1Backbone uses GELU "
                         f"(afn 'gelu')")
    # The feed-forward width has no other size; one dropout rate for embeddings, attention
    # and residuals (0.1 for all three, §4.1).
    return decoder_dimensions(config, 4 * int(config["n_embd"]))


def load_weights(backbone: Gpt1Backbone, weights: dict, source: str) -> Gpt1Backbone:
    """Copies Hugging Face-named OpenAI GPT weights into ``backbone``; fails on a missing or
    unread backbone weight and on any shape mismatch."""
    read = hf_utils.WeightReader(weights, prefixes=PREFIXES)
    with hf_utils.reading(source):
        # Post-LN blocks and no final LayerNorm (§3.1).
        set_decoder(backbone, read, token_embedding="tokens_embed.weight",
                    position_embedding="positions_embed.weight")
        check_all_read(read, BACKBONE_SCOPES, "GPT-1")
    return backbone


def from_huggingface(path, dtype=None) -> Gpt1Backbone:
    """A `Gpt1Backbone` with the weights of the Hugging Face ``openai-gpt`` folder ``path``
    (``config.json`` + ``model.safetensors``)."""
    path = os.fspath(path)
    config = hf_utils.read_config(path)
    backbone = Gpt1Backbone(**backbone_config(config, path), dtype=dtype)
    return load_weights(backbone, hf_utils.read_weights(path), path)


__all__ = ["backbone_config", "from_huggingface", "load_weights"]
