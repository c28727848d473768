"""Loading Hugging Face TransfoXL checkpoints (``model_type: "transfo-xl"``, the
``TransfoXLLMHeadModel`` of transformers' deprecated models) into a `TransformerXLBackbone`
(`from_huggingface`) or the whole language model with its adaptive softmax
(`causal_lm_from_huggingface`).

Weight names sit under ``transformer.`` (the LM-head model; bare in a ``TransfoXLModel``):
``word_emb.emb_layers.{i}.weight`` [size_i, d_i] and ``word_emb.emb_projs.{i}`` [d_model,
d_i] (torch ``F.linear`` layout: our projection kernel is its transpose); per layer
``dec_attn.qkv_net`` / ``r_net`` / ``o_net`` (bias-free torch Linears), ``dec_attn.r_w_bias``
(u) / ``r_r_bias`` (v) (``transformer.r_w_bias`` / ``r_r_bias`` once for all layers when
``untie_r`` is false), ``dec_attn.layer_norm``, ``pos_ff.CoreNet.0`` / ``.3`` and
``pos_ff.layer_norm``. ``pos_emb.inv_freq`` is the sinusoid's fixed frequencies (checked, not
a weight). The softmax (``crit.``): ``cluster_weight`` / ``cluster_bias``,
``out_layers.{i}.bias`` and, where not tied, ``out_layers.{i}.weight`` and ``out_projs.{i}``
(saved checkpoints drop the tied copies).

Refused: ``attn_type`` other than 0 (the relative attention of §3.3, the only one the
published checkpoints use), ``sample_softmax`` > 0, ``adaptive`` false.
"""

from __future__ import annotations

import numpy as np

from lmfactory.models import hf_utils
from lmfactory.models.transformer_xl.transformer_xl_adaptive_embedding import cluster_bounds
from lmfactory.models.transformer_xl.transformer_xl_backbone import TransformerXLBackbone

PREFIXES = ("transformer.", "")
SOFTMAX = "crit."
REQUIRED_CONFIG_KEYS = ("vocab_size", "d_model", "n_head", "d_head", "d_inner", "n_layer")


def backbone_arguments(config: dict, source: str) -> dict:
    """`TransformerXLBackbone` kwargs of a Hugging Face TransfoXL config."""
    hf_utils.check_config(config, source, required_keys=REQUIRED_CONFIG_KEYS,
                          what="TransfoXL", model_type="transfo-xl", converter="transformer_xl")
    if int(config.get("attn_type", 0)) != 0:
        raise ValueError(f"{source}: attn_type {config['attn_type']} is not Transformer-XL's "
                         f"relative attention (0), the only one converted")
    if int(config.get("sample_softmax", -1)) > 0 or not config.get("adaptive", True):
        raise ValueError(f"{source}: only the adaptive softmax (sample_softmax <= 0, "
                         f"adaptive true) is converted")
    cutoffs = [int(c) for c in config.get("cutoffs", [])]
    return {
        "vocabulary_size": int(config["vocab_size"]),
        "num_layers": int(config["n_layer"]),
        "num_heads": int(config["n_head"]),
        "hidden_dim": int(config["d_model"]),
        "intermediate_dim": int(config["d_inner"]),
        "head_dim": int(config["d_head"]),
        "embedding_dim": int(config.get("d_embed", config["d_model"])),
        "cutoffs": cutoffs,
        "div_val": int(config.get("div_val", 1)),
        "mem_len": int(config.get("mem_len", 0) or 0),
        "clamp_len": max(int(config.get("clamp_len", 0)), 0),
        "same_length": bool(config.get("same_length", False)),
        "pre_norm": bool(config.get("pre_lnorm", False)),
        "untie_biases": bool(config.get("untie_r", True)),
        "dropout": float(config.get("dropout", 0.1)),
        "attention_dropout": float(config.get("dropatt", 0.0)),
        "tie_weights": bool(config.get("tie_word_embeddings", True)),
        "tie_projections": [bool(t) for t in config.get("tie_projs",
                                                        [False] + [True] * len(cutoffs))],
        "layer_norm_epsilon": float(config.get("layer_norm_epsilon", 1e-5)),
    }


def _check_frequencies(read, backbone) -> None:
    if read.has("pos_emb.inv_freq"):
        hidden = backbone.hidden_dim
        expected = 1.0 / 10000 ** (np.arange(0.0, hidden, 2.0) / hidden)
        if not np.allclose(read("pos_emb.inv_freq"), expected, rtol=1e-5):
            raise ValueError("pos_emb.inv_freq is not the sinusoid 1 / 10000^(2k / d_model)")


def set_backbone(backbone, read: hf_utils.WeightReader) -> None:
    """Copies the ``transformer.`` weights into ``backbone``."""
    embedding = backbone.token_embedding
    for index, table in enumerate(embedding.embeddings):
        hf_utils.assign(table, read(f"word_emb.emb_layers.{index}.weight"),
                        f"word_emb.emb_layers.{index}")
        if embedding.projections[index] is not None:
            hf_utils.assign(embedding.projections[index],
                            np.asarray(read(f"word_emb.emb_projs.{index}")).T,
                            f"word_emb.emb_projs.{index}")
    if backbone.shared_biases is not None:
        hf_utils.assign(backbone.shared_biases.content_bias, read("r_w_bias"), "r_w_bias")
        hf_utils.assign(backbone.shared_biases.position_bias, read("r_r_bias"), "r_r_bias")
    for index, block in enumerate(backbone.transformer_layers):
        prefix = f"layers.{index}"
        attention = block.attention
        for name, variable in (("qkv_net", attention.qkv_kernel),
                               ("r_net", attention.position_kernel),
                               ("o_net", attention.output_kernel)):
            hf_utils.assign(variable, np.asarray(read(f"{prefix}.dec_attn.{name}.weight")).T,
                            f"{prefix}.dec_attn.{name}")
        if attention.own_biases:
            hf_utils.assign(attention.content_bias, read(f"{prefix}.dec_attn.r_w_bias"),
                            f"{prefix}.dec_attn.r_w_bias")
            hf_utils.assign(attention.position_bias, read(f"{prefix}.dec_attn.r_r_bias"),
                            f"{prefix}.dec_attn.r_r_bias")
        hf_utils.set_layer_norm(attention.layer_norm,
                                *hf_utils.layer_norm(read, f"{prefix}.dec_attn.layer_norm"))
        hf_utils.set_dense(block.intermediate,
                           *hf_utils.linear(read, f"{prefix}.pos_ff.CoreNet.0"))
        hf_utils.set_dense(block.output_dense,
                           *hf_utils.linear(read, f"{prefix}.pos_ff.CoreNet.3"))
        hf_utils.set_layer_norm(block.layer_norm,
                                *hf_utils.layer_norm(read, f"{prefix}.pos_ff.layer_norm"))
    _check_frequencies(read, backbone)


def set_softmax(softmax, read: hf_utils.WeightReader) -> None:
    """Copies the ``crit.`` weights into an `AdaptiveLogSoftmax` (tied parts come from the
    backbone's embedding at call time)."""
    bounds = cluster_bounds(softmax.vocabulary_size, softmax.cutoffs)
    for index, (start, end) in enumerate(bounds):
        if softmax.div_val == 1:
            bias = np.asarray(read("crit.out_layers.0.bias"))[start:end]
        else:
            bias = read(f"crit.out_layers.{index}.bias")
        hf_utils.assign(softmax.biases[index], bias, f"crit.out_layers.{index}.bias")
        if softmax.kernels[index] is not None:
            hf_utils.assign(softmax.kernels[index], read(f"crit.out_layers.{index}.weight"),
                            f"crit.out_layers.{index}.weight")
        if softmax.projections[index] is not None:
            hf_utils.assign(softmax.projections[index], read(f"crit.out_projs.{index}"),
                            f"crit.out_projs.{index}")
    if len(bounds) > 1:
        hf_utils.assign(softmax.cluster_kernel, read("crit.cluster_weight"), "cluster_weight")
        hf_utils.assign(softmax.cluster_bias, read("crit.cluster_bias"), "cluster_bias")


def _load(path: str):
    source = f"Hugging Face TransfoXL checkpoint {path!r}"
    config = hf_utils.read_config(path)
    arguments = backbone_arguments(config, source)
    weights = hf_utils.read_weights(path)
    return source, arguments, weights


def from_huggingface(path: str) -> TransformerXLBackbone:
    """A `TransformerXLBackbone` with the weights of the Hugging Face folder ``path``."""
    source, arguments, weights = _load(path)
    backbone = TransformerXLBackbone(**arguments)
    read = hf_utils.WeightReader(weights, PREFIXES)
    with hf_utils.reading(source):
        set_backbone(backbone, read)
    unread = read.unread(ignore_prefixes=(SOFTMAX,))
    if unread:
        raise ValueError(f"{source}: weights not converted: {unread[:8]}")
    return backbone


def causal_lm_from_huggingface(path: str):
    """The whole `TransformerXLCausalLM` (backbone + adaptive softmax) of ``path``."""
    from lmfactory.models.transformer_xl.transformer_xl_causal_lm import TransformerXLCausalLM

    source, arguments, weights = _load(path)
    model = TransformerXLCausalLM(TransformerXLBackbone(**arguments))
    read = hf_utils.WeightReader(weights, PREFIXES)
    with hf_utils.reading(source):
        set_backbone(model.backbone, read)
        set_softmax(model.adaptive_softmax, hf_utils.WeightReader(weights))
    return model


__all__ = ["backbone_arguments", "causal_lm_from_huggingface", "from_huggingface"]
