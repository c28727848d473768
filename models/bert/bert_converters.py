"""Loading published BERT checkpoints into a `BertBackbone`.

Two formats (see `lmfactory.models.load_checkpoint`, which tells them apart):

* Hugging Face: a folder with ``config.json`` (``model_type: "bert"``) and
  ``model.safetensors``. Weight names are either bare (``embeddings.word_embeddings.weight``,
  as a saved ``BertModel`` such as sentence-transformers' all-MiniLM-L6-v2 ships them) or
  nested under ``bert.`` (``BertForPreTraining``, ``BertForSequenceClassification``, ...).
  Linear weights are torch ``[out, in]``.
* The original google-research/bert TensorFlow checkpoint: a folder with
  ``bert_config.json`` and ``bert_model.ckpt.{index,data-*}``, variables named like
  ``bert/encoder/layer_0/attention/self/query/kernel`` with kernels already ``[in, out]``.
  Its variable names are rewritten into the Hugging Face layout (kernels transposed to
  ``[out, in]``), so both formats go through the same weight-by-weight copy below.

The mapping follows the structure of §3 of Devlin et al. 2019: token + segment + position
embeddings, then LayerNorm; L post-LN Transformer blocks (self-attention, its output
projection and LayerNorm; the feed-forward intermediate and output projections and their
LayerNorm); the Dense(H, tanh) pooler on ``[CLS]``. Pre-training heads (``cls.*``, the
``cls/`` scope), fine-tuning heads and optimizer slots are not part of the backbone and are
ignored; every backbone weight of the checkpoint must be read, and every backbone variable
must be written (the pooler excepted: checkpoints saved without one, e.g. from
``BertForMaskedLM``, keep a freshly initialised pooler, with a warning).

Numerics: Hugging Face BERT and `BertBackbone` both use the exact (erf) GELU and LayerNorm
epsilon 1e-12, and position ids 0 .. T-1. The released TensorFlow code computes GELU with
its tanh approximation; loading its checkpoints into the erf form is what the Hugging Face
conversion does too (the two differ by less than 1e-3 per activation).
"""

from __future__ import annotations

import json
import logging
import math
import os
import re

import numpy as np

from lmfactory.models import hf_utils
from lmfactory.models.bert.bert_backbone import BertBackbone

TF_CONFIG_FILE = "bert_config.json"
LAYER_NORM_EPSILON = 1e-12  # what BertBackbone's LayerNorms use
# Bare names of the backbone's weights; a checkpoint may nest them under "bert.".
BACKBONE_SCOPES = ("embeddings.", "encoder.", "pooler.")
BACKBONE_PREFIXES = ("", "bert.")
# Registered buffers, not weights.
BUFFERS = ("embeddings.position_ids",)
POOLER = "pooler.dense"

REQUIRED_CONFIG_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers",
                        "num_attention_heads", "intermediate_size")


def backbone_config(config: dict, source: str) -> dict:
    """`BertBackbone` constructor kwargs from a Hugging Face ``config.json`` or an original
    ``bert_config.json`` (same keys). Raises ValueError for what `BertBackbone` cannot
    represent."""
    hf_utils.check_config(config, source, required_keys=REQUIRED_CONFIG_KEYS, what="BERT",
                          model_type="bert", converter="BERT", default_model_type="bert")
    activation = config.get("hidden_act", "gelu")
    if activation != "gelu":
        raise ValueError(f"{source}: hidden_act is {activation!r}; BertBackbone implements "
                         f"BERT's exact GELU only (hidden_act 'gelu')")
    epsilon = float(config.get("layer_norm_eps", LAYER_NORM_EPSILON))
    if not math.isclose(epsilon, LAYER_NORM_EPSILON, rel_tol=1e-6):
        raise ValueError(f"{source}: layer_norm_eps is {epsilon:g}; BertBackbone's LayerNorms "
                         f"use BERT's {LAYER_NORM_EPSILON:g}")
    position_type = config.get("position_embedding_type", "absolute")
    if position_type != "absolute":
        raise ValueError(f"{source}: position_embedding_type is {position_type!r}; "
                         f"BertBackbone has learned absolute positions only")
    if config.get("is_decoder") or config.get("add_cross_attention"):
        raise ValueError(f"{source}: a decoder / cross-attention BERT is not a BertBackbone")
    return hf_utils.bert_layout_dimensions(config)


def load_weights(backbone: BertBackbone, weights: dict, source: str) -> BertBackbone:
    """Copies Hugging Face-named BERT weights (bare or ``bert.``-prefixed, Linear weights
    ``[out, in]``) into ``backbone``; fails on a missing or unread backbone weight and on
    any shape mismatch."""
    read = hf_utils.WeightReader(weights, prefixes=BACKBONE_PREFIXES)
    linear, layer_norm = hf_utils.linear, hf_utils.layer_norm
    with hf_utils.reading(source):
        # §3 Input/Output Representations: token + segment + position embeddings, LayerNorm.
        hf_utils.set_embedding(backbone.token_embedding,
                               read("embeddings.word_embeddings.weight"))
        hf_utils.set_embedding(backbone.embeddings.position_embedding,
                               read("embeddings.position_embeddings.weight"))
        hf_utils.set_embedding(backbone.segment_embedding,
                               read("embeddings.token_type_embeddings.weight"))
        hf_utils.set_layer_norm(backbone.embeddings_layer_norm,
                                *layer_norm(read, "embeddings.LayerNorm"))
        # The L Transformer blocks.
        for i, block in enumerate(backbone.transformer_layers):
            hf_utils.set_bert_layer(block, read, f"encoder.layer.{i}")
        # The pooler: Dense(H, tanh) on the final [CLS] vector.
        if read.has(f"{POOLER}.weight"):
            hf_utils.set_dense(backbone.pooler_dense, *linear(read, POOLER))
        else:
            logging.warning("%s has no pooler weights (%s.*); the pooler stays freshly "
                            "initialised", source, POOLER)

    # Nothing of the backbone may be left behind (e.g. a layer the config does not count).
    unread = [name for name in read.unread()
              if _backbone_name(name) is not None and _backbone_name(name) not in BUFFERS]
    if unread:
        raise ValueError(f"{source}: checkpoint weights the BERT backbone did not read "
                         f"(config and checkpoint disagree?): {unread[:10]}"
                         f"{' ...' if len(unread) > 10 else ''}")
    return backbone


def _backbone_name(name: str):
    """The bare name of a backbone weight, or None for heads (``cls.``, ``classifier.``)."""
    for prefix in BACKBONE_PREFIXES:
        if name.startswith(prefix) and name[len(prefix):].startswith(BACKBONE_SCOPES):
            return name[len(prefix):]
    return None


def from_huggingface(path, dtype=None) -> BertBackbone:
    """A `BertBackbone` with the weights of the Hugging Face BERT folder ``path``
    (``config.json`` + ``model.safetensors``)."""
    path = os.fspath(path)
    config = hf_utils.read_config(path)
    if "model_type" not in config:
        raise ValueError(f"{path}: config.json has no model_type; not a Hugging Face folder")
    backbone = BertBackbone(**backbone_config(config, path), dtype=dtype)
    return load_weights(backbone, hf_utils.read_weights(path), path)


# --- The original google-research/bert TensorFlow checkpoint -----------------------------

# TF scope -> Hugging Face name of the parameter, after the "bert/" prefix.
_TF_LEAF = {"kernel": "weight", "bias": "bias", "gamma": "weight", "beta": "bias"}
_TF_EMBEDDINGS = {
    "embeddings/word_embeddings": "embeddings.word_embeddings.weight",
    "embeddings/position_embeddings": "embeddings.position_embeddings.weight",
    "embeddings/token_type_embeddings": "embeddings.token_type_embeddings.weight",
}
_TF_OPTIMIZER_SLOT = re.compile(r"/(adam_m|adam_v|Adam|Adam_1|Momentum)$")


def tf_checkpoint_prefix(path) -> str:
    """The checkpoint prefix inside the folder ``path`` (or ``path`` itself if it is one)."""
    import tensorflow as tf

    path = os.fspath(path)
    if tf.io.gfile.exists(path + ".index"):
        return path
    if not tf.io.gfile.isdir(path):
        raise FileNotFoundError(f"No TensorFlow checkpoint at {path!r}")
    latest = tf.train.latest_checkpoint(path)
    if latest:
        return latest
    indexes = sorted(tf.io.gfile.glob(os.path.join(path, "*.index")))
    preferred = os.path.join(path, "bert_model.ckpt.index")
    if preferred in indexes:
        return preferred[: -len(".index")]
    if len(indexes) != 1:
        raise ValueError(f"{path}: expected one TensorFlow checkpoint (bert_model.ckpt.index), "
                         f"found {[os.path.basename(i) for i in indexes] or 'none'}")
    return indexes[0][: -len(".index")]


def tf_to_hf_name(name: str):
    """The Hugging Face name of the original checkpoint's variable ``name`` and whether its
    value must be transposed (a Dense kernel), or None for what is not backbone weight
    (``cls/`` heads, ``global_step``, optimizer slots)."""
    if not name.startswith("bert/") or _TF_OPTIMIZER_SLOT.search(name):
        return None
    scope = name[len("bert/"):]
    if scope in _TF_EMBEDDINGS:
        return _TF_EMBEDDINGS[scope], False
    parts = scope.split("/")
    if parts[-1] not in _TF_LEAF:
        raise ValueError(f"Unexpected variable {name!r} in a BERT checkpoint")
    leaf = _TF_LEAF[parts[-1]]
    module = [re.sub(r"^layer_(\d+)$", r"layer.\1", part) for part in parts[:-1]]
    return ".".join(module + [leaf]), parts[-1] == "kernel"


def read_tf_checkpoint(path) -> dict:
    """The backbone variables of an original BERT checkpoint, renamed to the Hugging Face
    layout (Dense kernels transposed to torch's ``[out, in]``)."""
    import tensorflow as tf

    reader = tf.train.load_checkpoint(tf_checkpoint_prefix(path))
    weights = {}
    for name in sorted(reader.get_variable_to_shape_map()):
        mapped = tf_to_hf_name(name)
        if mapped is None:
            continue
        hf_name, transpose = mapped
        value = np.asarray(reader.get_tensor(name), dtype="float32")
        weights[hf_name] = value.T if transpose else value
    if not weights:
        raise ValueError(f"{path}: no 'bert/...' variables in the checkpoint; not an original "
                         f"BERT checkpoint")
    return weights


def from_tf_checkpoint(path, dtype=None) -> BertBackbone:
    """A `BertBackbone` with the weights of an original google-research/bert checkpoint
    folder (``bert_config.json`` + ``bert_model.ckpt.*``)."""
    path = os.fspath(path)
    config_path = os.path.join(path, TF_CONFIG_FILE)
    if not os.path.exists(config_path):
        raise FileNotFoundError(f"No {TF_CONFIG_FILE} in BERT checkpoint folder {path!r}")
    with open(config_path, encoding="utf-8") as f:
        config = json.load(f)
    backbone = BertBackbone(**backbone_config(config, config_path), dtype=dtype)
    return load_weights(backbone, read_tf_checkpoint(path), path)


__all__ = ["backbone_config", "from_huggingface", "from_tf_checkpoint", "load_weights",
           "read_tf_checkpoint", "tf_to_hf_name"]
