"""Loading published RoBERTa checkpoints (Hugging Face layout) into lmfactory models.

A Hugging Face RoBERTa folder holds ``config.json`` (``model_type: "roberta"``) and
``model.safetensors``, with weight names either bare (``embeddings.word_embeddings.weight``,
a ``RobertaModel``) or under ``roberta.`` (a ``RobertaForMaskedLM`` /
``RobertaForSequenceClassification``, as the published checkpoints are saved).

    backbone = from_huggingface("roberta-base/")          # RobertaBackbone
    pretrainer = pretrainer_from_huggingface("roberta-base/")  # + the masked-LM head
"""

from __future__ import annotations

import numpy as np

from lmfactory.models import hf_utils
from lmfactory.models.roberta.roberta_backbone import PADDING_INDEX, RobertaBackbone
from lmfactory.models.roberta.roberta_pretrainer import RobertaPretrainer

HF_MODEL_TYPES = ("roberta",)
BASE_PREFIXES = ("roberta.", "")
# Weights that are not part of the backbone: the task heads, the pooler of a bare
# RobertaModel (without NSP, §4.2, the released fairseq model has no pooler; RoBERTa's
# classifier has its own dense + tanh), and the position-id buffer older checkpoints store.
NON_BACKBONE_PREFIXES = ("lm_head.", "classifier.", "pooler.", "roberta.pooler.")
BUFFERS = ("embeddings.position_ids", "roberta.embeddings.position_ids")


def backbone_config_from_huggingface(config: dict) -> dict:
    """`RobertaBackbone` kwargs from a Hugging Face RoBERTa ``config.json``; a setting the
    backbone does not implement is an error naming it."""
    model_type = config.get("model_type")
    if model_type not in HF_MODEL_TYPES:
        raise ValueError(f"Not a RoBERTa checkpoint: config.json has model_type "
                         f"{model_type!r}, expected one of {HF_MODEL_TYPES}")
    checks = {
        "hidden_act": (config.get("hidden_act", "gelu"), ("gelu",)),
        "position_embedding_type": (config.get("position_embedding_type", "absolute"),
                                    ("absolute",)),
        "type_vocab_size": (config.get("type_vocab_size", 1), (1,)),
        "pad_token_id": (config.get("pad_token_id", PADDING_INDEX), (PADDING_INDEX,)),
        "is_decoder": (bool(config.get("is_decoder", False)), (False,)),
    }
    for field, (value, supported) in checks.items():
        if value not in supported:
            raise ValueError(f"RoBERTa config.json field {field!r} = {value!r} is not "
                             f"supported (supported: {list(supported)})")
    max_sequence_length = config["max_position_embeddings"] - PADDING_INDEX - 1
    if max_sequence_length <= 0:
        raise ValueError(f"max_position_embeddings = {config['max_position_embeddings']} "
                         f"leaves no position past the padding index {PADDING_INDEX}")
    return {
        "vocabulary_size": config["vocab_size"],
        "num_layers": config["num_hidden_layers"],
        "num_heads": config["num_attention_heads"],
        "hidden_dim": config["hidden_size"],
        "intermediate_dim": config["intermediate_size"],
        "dropout": config.get("hidden_dropout_prob", 0.1),
        "max_sequence_length": max_sequence_length,
        "layer_norm_epsilon": config.get("layer_norm_eps", 1e-5),
    }


def load_backbone_weights(backbone: RobertaBackbone, read: hf_utils.WeightReader) -> None:
    """Copies the reference encoder weights into ``backbone``."""
    hf_utils.set_embedding(backbone.token_embedding,
                           read("embeddings.word_embeddings.weight"))
    # The reference adds a token-type embedding to every token, and RoBERTa has a single
    # type (type_vocab_size = 1), so every token gets the same row t. Every token also gets
    # exactly one position row p_i (padding tokens get the padding row), so
    # word + p_i + t == word + (p_i + t): adding t to every position row gives the same
    # embedding-LayerNorm input for every token, and the backbone needs no type table.
    positions = read("embeddings.position_embeddings.weight")
    token_type = read("embeddings.token_type_embeddings.weight")
    hf_utils.assign(backbone.position_embedding.position_embeddings,
                    positions + token_type[0][None, :], "position embeddings")
    hf_utils.set_layer_norm(backbone.embeddings_layer_norm,
                            *hf_utils.layer_norm(read, "embeddings.LayerNorm"))
    for i, block in enumerate(backbone.transformer_layers):
        hf_utils.set_bert_layer(block, read, f"encoder.layer.{i}")


def load_masked_lm_head_weights(pretrainer: RobertaPretrainer,
                                read: hf_utils.WeightReader) -> None:
    """Copies the reference ``lm_head`` (``RobertaLMHead``) into ``pretrainer``'s head."""
    dense = hf_utils.linear(read, "lm_head.dense")
    layer_norm = hf_utils.layer_norm(read, "lm_head.layer_norm")
    # The output bias is `lm_head.bias` (tied to `lm_head.decoder.bias` in the reference;
    # some checkpoints store only the latter).
    biases = [read(name) for name in ("lm_head.bias", "lm_head.decoder.bias")
              if read.has(name)]
    if not biases:
        raise KeyError("The checkpoint has no masked-LM output bias (lm_head.bias or "
                       "lm_head.decoder.bias)")
    if len(biases) == 2 and not np.array_equal(*biases):
        raise ValueError("lm_head.bias and lm_head.decoder.bias differ; the reference ties "
                         "them")
    hf_utils.set_masked_lm_head(pretrainer.masked_lm_head, dense=dense, layer_norm=layer_norm,
                                bias=biases[0])
    # The output projection is the token embedding (tied); a checkpoint that stores it
    # must store the same matrix.
    if read.has("lm_head.decoder.weight"):
        decoder = read("lm_head.decoder.weight")
        embedding = pretrainer.backbone.token_embedding.embeddings.numpy()
        if decoder.shape != embedding.shape or not np.array_equal(decoder, embedding):
            raise ValueError("lm_head.decoder.weight differs from the word embeddings; "
                             "RobertaPretrainer ties its output projection to them")


def _read_checkpoint(path: str):
    config = hf_utils.read_config(path)
    backbone_config = backbone_config_from_huggingface(config)
    read = hf_utils.WeightReader(hf_utils.read_weights(path), prefixes=BASE_PREFIXES)
    return backbone_config, read


def _check_all_read(read: hf_utils.WeightReader, path: str, ignore_prefixes) -> None:
    unread = [name for name in read.unread(ignore_prefixes=ignore_prefixes)
              if name not in BUFFERS]
    if unread:
        raise ValueError(f"The RoBERTa checkpoint {path!r} has weights the converter did not "
                         f"read (an unsupported variant?): {unread[:10]}"
                         f"{' ...' if len(unread) > 10 else ''}")


def from_huggingface(path: str) -> RobertaBackbone:
    """A `RobertaBackbone` with the weights of the Hugging Face RoBERTa folder ``path``.

    Fails when a backbone weight of the checkpoint is left unread; the task heads and the
    bare model's pooler are not part of the backbone and are skipped."""
    backbone_config, read = _read_checkpoint(path)
    backbone = RobertaBackbone(**backbone_config)
    load_backbone_weights(backbone, read)
    _check_all_read(read, path, NON_BACKBONE_PREFIXES)
    return backbone


def pretrainer_from_huggingface(path: str) -> RobertaPretrainer:
    """A `RobertaPretrainer` (backbone + masked-LM head) from a Hugging Face
    ``RobertaForMaskedLM`` folder ``path``; fails when the checkpoint has no ``lm_head``."""
    backbone_config, read = _read_checkpoint(path)
    backbone = RobertaBackbone(**backbone_config)
    load_backbone_weights(backbone, read)
    pretrainer = RobertaPretrainer(backbone)
    load_masked_lm_head_weights(pretrainer, read)
    _check_all_read(read, path, ("classifier.", "pooler.", "roberta.pooler."))
    return pretrainer
