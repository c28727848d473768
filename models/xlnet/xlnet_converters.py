"""Loading published XLNet checkpoints (Hugging Face layout) into lmfactory models.

A Hugging Face XLNet folder holds ``config.json`` (``model_type: "xlnet"``) and
``model.safetensors`` with weights bare (``word_embedding.weight``, an ``XLNetModel``) or
under ``transformer.`` (``XLNetLMHeadModel``, the published checkpoints, whose ``lm_loss``
is the output layer tied to the embedding plus a bias).

    backbone = from_huggingface("xlnet-base-cased/")            # XLNetBackbone
    pretrainer = pretrainer_from_huggingface("xlnet-base-cased/")  # + the LM bias
"""

from __future__ import annotations

import numpy as np

from lmfactory.models import hf_utils
from lmfactory.models.xlnet.xlnet_backbone import XLNetBackbone
from lmfactory.models.xlnet.xlnet_pretrainer import XLNetPretrainer

HF_MODEL_TYPE = "xlnet"
BASE_PREFIXES = ("transformer.", "")
HEAD_PREFIXES = ("lm_loss.", "sequence_summary.", "logits_proj.", "qa_outputs.")
ACTIVATIONS = {"gelu": "gelu", "relu": "relu", "gelu_new": "gelu_approximate"}


def backbone_config_from_huggingface(config: dict, source: str = "config.json") -> dict:
    """`XLNetBackbone` kwargs from a Hugging Face ``XLNetConfig``; settings the backbone does
    not implement (unidirectional attention, same_length, reuse_len) are refused."""
    hf_utils.check_config(config, source, required_keys=("vocab_size", "d_model", "n_layer",
                                                          "n_head", "d_inner"),
                          what="XLNet", model_type=HF_MODEL_TYPE, converter="XLNet")
    checks = {
        "attn_type": (config.get("attn_type", "bi"), ("bi",)),
        "same_length": (bool(config.get("same_length", False)), (False,)),
        "ff_activation": (config.get("ff_activation", "gelu"), tuple(ACTIVATIONS)),
        "reuse_len": (config.get("reuse_len"), (None, 0)),
    }
    for field, (value, supported) in checks.items():
        if value not in supported:
            raise ValueError(f"{source}: XLNet config field {field!r} = {value!r} is not "
                             f"supported (supported: {list(supported)})")
    d_head = config.get("d_head", config["d_model"] // config["n_head"])
    if d_head * config["n_head"] != config["d_model"]:
        raise ValueError(f"{source}: d_head {d_head} x n_head {config['n_head']} != d_model "
                         f"{config['d_model']}")
    return {
        "vocabulary_size": int(config["vocab_size"]),
        "num_layers": int(config["n_layer"]),
        "num_heads": int(config["n_head"]),
        "hidden_dim": int(config["d_model"]),
        "intermediate_dim": int(config["d_inner"]),
        "dropout": float(config.get("dropout", 0.1)),
        "activation": ACTIVATIONS[config.get("ff_activation", "gelu")],
        "layer_norm_epsilon": float(config.get("layer_norm_eps", 1e-12)),
        "clamp_len": int(config.get("clamp_len", -1)),
        "bi_data": bool(config.get("bi_data", False)),
        "memory_length": int(config.get("mem_len") or 0),
    }


def load_backbone_weights(backbone: XLNetBackbone, read: hf_utils.WeightReader) -> None:
    """Copies the reference weights into ``backbone`` (same layouts: [d_model, n, d_head]
    projections, torch Linear feed-forward)."""
    hf_utils.set_embedding(backbone.token_embedding, read("word_embedding.weight"))
    hf_utils.assign(backbone.stream_embedding.mask_embedding,
                    read("mask_emb").reshape(-1), "mask_emb")
    for index, block in enumerate(backbone.transformer_layers):
        prefix = f"layer.{index}"
        attention = block.attention
        for name in ("q", "k", "v", "o", "r", "r_w_bias", "r_r_bias", "r_s_bias"):
            hf_utils.assign(getattr(attention, name), read(f"{prefix}.rel_attn.{name}"),
                            f"{prefix}.rel_attn.{name}")
        hf_utils.assign(attention.segment_embedding, read(f"{prefix}.rel_attn.seg_embed"),
                        f"{prefix}.rel_attn.seg_embed")
        hf_utils.set_layer_norm(attention.layer_norm,
                                *hf_utils.layer_norm(read, f"{prefix}.rel_attn.layer_norm"))
        hf_utils.set_dense(block.layer_1, *hf_utils.linear(read, f"{prefix}.ff.layer_1"))
        hf_utils.set_dense(block.layer_2, *hf_utils.linear(read, f"{prefix}.ff.layer_2"))
        hf_utils.set_layer_norm(block.ffn_layer_norm,
                                *hf_utils.layer_norm(read, f"{prefix}.ff.layer_norm"))


def _read(path: str):
    config = hf_utils.read_config(path)
    backbone = XLNetBackbone(**backbone_config_from_huggingface(config, path))
    read = hf_utils.WeightReader(hf_utils.read_weights(path), prefixes=BASE_PREFIXES)
    with hf_utils.reading(path):
        load_backbone_weights(backbone, read)
    return backbone, read


def _check_all_read(read: hf_utils.WeightReader, path: str, ignore_prefixes) -> None:
    unread = read.unread(ignore_prefixes=ignore_prefixes)
    if unread:
        raise ValueError(f"The XLNet checkpoint {path!r} has weights the converter did not "
                         f"read (an unsupported variant?): {unread[:10]}")


def from_huggingface(path: str) -> XLNetBackbone:
    """An `XLNetBackbone` with the weights of the Hugging Face XLNet folder ``path`` (task
    heads skipped; any other unread weight is an error)."""
    backbone, read = _read(path)
    _check_all_read(read, path, HEAD_PREFIXES)
    return backbone


def pretrainer_from_huggingface(path: str) -> XLNetPretrainer:
    """An `XLNetPretrainer` from an ``XLNetLMHeadModel`` folder: the backbone plus the
    output bias ``lm_loss.bias`` (its weight must be the tied embedding)."""
    backbone, read = _read(path)
    pretrainer = XLNetPretrainer(backbone)
    with hf_utils.reading(path):
        hf_utils.assign(pretrainer.lm_bias, read("lm_loss.bias"), "lm_loss.bias")
        if read.has("lm_loss.weight"):
            tied = read("lm_loss.weight")
            if not np.array_equal(tied, backbone.token_embedding.embeddings.numpy()):
                raise ValueError("lm_loss.weight differs from the word embedding; "
                                 "XLNetPretrainer ties them")
    _check_all_read(read, path, ("sequence_summary.", "logits_proj.", "qa_outputs."))
    return pretrainer
