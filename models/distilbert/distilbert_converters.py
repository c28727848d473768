"""Loads published DistilBERT checkpoints (Hugging Face format) into `DistilBertBackbone`.

DistilBERT was released as a PyTorch model (Hugging Face ``model_type: "distilbert"``); there
is no original TensorFlow checkpoint of it. Weight names (``distilbert.`` prefix in the
task-model checkpoints, none in a bare ``DistilBertModel``):

    embeddings.word_embeddings / position_embeddings / LayerNorm
    transformer.layer.N.attention.{q_lin, k_lin, v_lin, out_lin}, sa_layer_norm,
    transformer.layer.N.ffn.{lin1, lin2}, output_layer_norm
    vocab_transform, vocab_layer_norm, vocab_projector      (masked-LM head, no prefix)
"""

from __future__ import annotations

from lmfactory.models import hf_utils
from lmfactory.models.distilbert.distilbert_backbone import DistilBertBackbone

MODEL_TYPES = ("distilbert",)
PREFIXES = ("distilbert.", "")
HEAD_NAMES = ("vocab_transform.", "vocab_layer_norm.", "vocab_projector.")
# Task heads of other DistilBERT task models; not part of the backbone.
TASK_HEAD_PREFIXES = HEAD_NAMES + ("pre_classifier.", "classifier.", "qa_outputs.")


# The weight names of a DistilBERT layer (under ``transformer.layer.{i}.``).
LAYER_NAMES = {
    "query": "attention.q_lin",
    "key": "attention.k_lin",
    "value": "attention.v_lin",
    "attention_output": "attention.out_lin",
    "attention_layer_norm": "sa_layer_norm",
    "intermediate": "ffn.lin1",
    "output": "ffn.lin2",
    "output_layer_norm": "output_layer_norm",
}


def backbone_config_from_huggingface(config: dict) -> dict:
    """`DistilBertBackbone` kwargs from a Hugging Face DistilBERT ``config.json``."""
    if config.get("model_type") not in MODEL_TYPES:
        raise ValueError(f"Not a DistilBERT checkpoint: model_type "
                         f"{config.get('model_type')!r}, expected one of {MODEL_TYPES}")
    if config.get("activation", "gelu") != "gelu":
        raise ValueError(f"DistilBertBackbone uses GELU; the checkpoint's activation is "
                         f"{config['activation']!r}")
    return {
        "vocabulary_size": config["vocab_size"],
        "num_layers": config["n_layers"],
        "num_heads": config["n_heads"],
        "hidden_dim": config["dim"],
        "intermediate_dim": config["hidden_dim"],
        "dropout": config.get("dropout", 0.1),
        "max_sequence_length": config.get("max_position_embeddings", 512),
        "sinusoidal_positions": bool(config.get("sinusoidal_pos_embds", False)),
    }


def load_backbone_weights(backbone: DistilBertBackbone, read: hf_utils.WeightReader) -> None:
    """Copies the reference backbone weights into ``backbone``."""
    hf_utils.set_embedding(backbone.token_embedding,
                           read("embeddings.word_embeddings.weight"))
    positions = read("embeddings.position_embeddings.weight")
    if not backbone.sinusoidal_positions:  # sinusoidal ones are computed, not stored
        hf_utils.set_embedding(backbone.position_embedding, positions)
    hf_utils.set_layer_norm(backbone.embeddings_layer_norm,
                            *hf_utils.layer_norm(read, "embeddings.LayerNorm"))
    for i, block in enumerate(backbone.transformer_layers):
        hf_utils.set_encoder_layer(block, read, f"transformer.layer.{i}.", LAYER_NAMES)


def convert_huggingface(path: str) -> DistilBertBackbone:
    """A `DistilBertBackbone` with the weights of the Hugging Face folder ``path``
    (``config.json`` with ``model_type: "distilbert"`` + ``model.safetensors``)."""
    backbone = DistilBertBackbone(**backbone_config_from_huggingface(
        hf_utils.read_config(path)))
    read = hf_utils.WeightReader(hf_utils.read_weights(path), PREFIXES)
    load_backbone_weights(backbone, read)
    unread = read.unread(ignore_prefixes=TASK_HEAD_PREFIXES)
    if unread:
        raise ValueError(f"The DistilBERT converter left checkpoint weights unread (an "
                         f"architecture mismatch?): {unread[:8]}")
    return backbone


def load_huggingface_masked_lm_head(masked_lm_head, path: str) -> None:
    """Copies the masked-LM head of a ``DistilBertForMaskedLM`` checkpoint into a keras-nlp
    `MaskedLMHead` (e.g. `DistilBertDistiller.masked_lm_head`): ``vocab_transform`` ->
    the Dense transform, ``vocab_layer_norm`` -> its LayerNorm, ``vocab_projector.bias`` ->
    the output bias. ``vocab_projector.weight`` is tied to the token embeddings (the head's
    own `token_embedding`, loaded with the backbone)."""
    read = hf_utils.WeightReader(hf_utils.read_weights(path), PREFIXES)
    if not read.has("vocab_transform.weight"):
        raise ValueError(f"{path!r} has no DistilBERT masked-LM head (vocab_transform); it "
                         f"was not saved from DistilBertForMaskedLM")
    hf_utils.set_masked_lm_head(masked_lm_head,
                                dense=hf_utils.linear(read, "vocab_transform"),
                                layer_norm=hf_utils.layer_norm(read, "vocab_layer_norm"),
                                bias=read("vocab_projector.bias"))


CONVERTERS = {"huggingface": convert_huggingface}
