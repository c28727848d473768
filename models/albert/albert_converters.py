"""Loading published ALBERT checkpoints (Hugging Face format) into `AlbertBackbone` and the
heads of `AlbertPretrainer`, without PyTorch.

Hugging Face ALBERT names (model_type "albert"; saved from `AlbertForPreTraining`, so the
base model's weights carry the prefix ``albert.``):

* ``embeddings.{word,position,token_type}_embeddings``, ``embeddings.LayerNorm``: the
  E-sized embeddings;
* ``encoder.embedding_hidden_mapping_in``: the E -> H projection;
* ``encoder.albert_layer_groups.{g}.albert_layers.{i}.``: ``attention.{query,key,value,
  dense}``, ``attention.LayerNorm``, ``ffn``, ``ffn_output``, ``full_layer_layer_norm``;
  layer ``l`` of L uses group ``g = l * num_hidden_groups // L``;
* ``pooler``; heads ``predictions.{dense,LayerNorm,bias}`` (the decoder is tied to the word
  embeddings) and ``sop_classifier.classifier``.

The released checkpoints are all-shared (``num_hidden_groups = 1``, ``inner_group_num = 1``);
a checkpoint with one group per layer is the "not-shared" model. Other layouts (several
layers per group, or several inner layers) are not ALBERT's sharing modes of §3.1 and are
refused.
"""

from __future__ import annotations

from lmfactory.models import hf_utils
from lmfactory.models.albert.albert_backbone import AlbertBackbone

# Hugging Face `hidden_act` -> AlbertBackbone `activation`.
HF_ACTIVATIONS = {
    "gelu_new": "gelu_approximate",
    "gelu_pytorch_tanh": "gelu_approximate",
    "gelu_fast": "gelu_approximate",  # the same tanh formula, factored differently
    "gelu": "gelu",
}
HEAD_PREFIXES = ("predictions.", "sop_classifier.")
PREFIXES = ("albert.", "")


def backbone_config_from_huggingface(config: dict) -> dict:
    """`AlbertBackbone` kwargs from a Hugging Face ALBERT ``config.json``."""
    if config.get("model_type") != "albert":
        raise ValueError(f"Not an ALBERT checkpoint: model_type is "
                         f"{config.get('model_type')!r}, expected 'albert'")
    num_layers = config["num_hidden_layers"]
    groups = config.get("num_hidden_groups", 1)
    inner = config.get("inner_group_num", 1)
    if inner != 1 or groups not in (1, num_layers):
        raise ValueError(
            f"Unsupported ALBERT layer layout: num_hidden_groups={groups}, "
            f"inner_group_num={inner}, num_hidden_layers={num_layers}. lmfactory reads "
            f"all-shared checkpoints (num_hidden_groups=1, inner_group_num=1, as released) "
            f"and not-shared ones (num_hidden_groups=num_hidden_layers, inner_group_num=1)")
    hidden_act = config.get("hidden_act", "gelu_new")
    if hidden_act not in HF_ACTIVATIONS:
        raise ValueError(f"Unsupported ALBERT hidden_act {hidden_act!r}; "
                         f"supported: {sorted(HF_ACTIVATIONS)}")
    position_type = config.get("position_embedding_type", "absolute")
    if position_type != "absolute":
        raise ValueError(f"Unsupported ALBERT position_embedding_type {position_type!r}; "
                         f"only 'absolute' (the paper's learned positions) is implemented")
    if config.get("layer_norm_eps", 1e-12) != 1e-12:
        raise ValueError(f"Unsupported ALBERT layer_norm_eps {config['layer_norm_eps']!r}; "
                         f"the backbone uses 1e-12 (the released models' value)")
    dropout = config.get("hidden_dropout_prob", 0.0)
    if config.get("attention_probs_dropout_prob", dropout) != dropout:
        raise ValueError("AlbertBackbone has one dropout rate; this checkpoint's "
                         "hidden_dropout_prob and attention_probs_dropout_prob differ")
    return {
        "vocabulary_size": config["vocab_size"],
        "num_layers": num_layers,
        "num_heads": config["num_attention_heads"],
        "hidden_dim": config["hidden_size"],
        "embedding_dim": config["embedding_size"],
        "intermediate_dim": config["intermediate_size"],
        "sharing": "all-shared" if groups == 1 else "not-shared",
        "activation": HF_ACTIVATIONS[hidden_act],
        "dropout": float(dropout),
        "max_sequence_length": config["max_position_embeddings"],
        "num_segments": config["type_vocab_size"],
    }


# The weight names of an ALBERT layer (under ``...albert_layers.0.``).
LAYER_NAMES = {
    "query": "attention.query",
    "key": "attention.key",
    "value": "attention.value",
    "attention_output": "attention.dense",
    "attention_layer_norm": "attention.LayerNorm",
    "intermediate": "ffn",
    "output": "ffn_output",
    "output_layer_norm": "full_layer_layer_norm",
}


def _set_block(block, read, prefix: str) -> None:
    hf_utils.set_encoder_layer(block, read, prefix, LAYER_NAMES)


def load_huggingface_weights(backbone: AlbertBackbone, weights: dict) -> hf_utils.WeightReader:
    """Copies Hugging Face ALBERT ``weights`` (name -> array) into ``backbone``; returns the
    reader (to check what was left unread)."""
    if backbone.sharing not in ("all-shared", "not-shared"):
        raise ValueError(f"Hugging Face ALBERT checkpoints are all-shared or not-shared; "
                         f"this backbone is {backbone.sharing!r}")
    read = hf_utils.WeightReader(weights, prefixes=PREFIXES)
    hf_utils.set_embedding(backbone.token_embedding, read("embeddings.word_embeddings.weight"))
    hf_utils.set_embedding(backbone.segment_embedding,
                           read("embeddings.token_type_embeddings.weight"))
    hf_utils.assign(backbone.embeddings.position_embedding.position_embeddings,
                    read("embeddings.position_embeddings.weight"), "position embeddings")
    hf_utils.set_layer_norm(backbone.embeddings_layer_norm,
                            *hf_utils.layer_norm(read, "embeddings.LayerNorm"))
    hf_utils.set_dense(backbone.embedding_projection,
                       *hf_utils.linear(read, "encoder.embedding_hidden_mapping_in"))
    groups = 1 if backbone.sharing == "all-shared" else backbone.num_layers
    for group in range(groups):
        _set_block(backbone.transformer_layers[group], read,
                   f"encoder.albert_layer_groups.{group}.albert_layers.0.")
    hf_utils.set_dense(backbone.pooler_dense, *hf_utils.linear(read, "pooler"))
    return read


def from_huggingface(path: str) -> AlbertBackbone:
    """An `AlbertBackbone` with the weights of the Hugging Face ALBERT folder ``path``
    (``config.json`` + ``model.safetensors``; base model or a task model)."""
    backbone = AlbertBackbone(**backbone_config_from_huggingface(hf_utils.read_config(path)))
    read = load_huggingface_weights(backbone, hf_utils.read_weights(path))
    unread = [name for name in read.unread(ignore_prefixes=HEAD_PREFIXES)
              if not name.endswith("position_ids")]  # a buffer some checkpoints store
    if unread:
        raise ValueError(f"{path!r}: weights the ALBERT converter does not know: "
                         f"{unread[:8]}{' ...' if len(unread) > 8 else ''}")
    return backbone


def load_huggingface_heads(pretrainer, path: str) -> None:
    """Copies the pre-training heads of a Hugging Face `AlbertForPreTraining` folder
    (``predictions.*``: masked LM; ``sop_classifier.*``: sentence order) into an
    `AlbertPretrainer` whose backbone was loaded from the same folder."""
    read = hf_utils.WeightReader(hf_utils.read_weights(path))
    hf_utils.set_masked_lm_head(pretrainer.masked_lm_head,
                                dense=hf_utils.linear(read, "predictions.dense"),
                                layer_norm=hf_utils.layer_norm(read, "predictions.LayerNorm"),
                                bias=read("predictions.bias"))
    hf_utils.set_dense(pretrainer.sentence_order_head,
                       *hf_utils.linear(read, "sop_classifier.classifier"))


__all__ = ["backbone_config_from_huggingface", "from_huggingface", "load_huggingface_heads",
           "load_huggingface_weights"]
