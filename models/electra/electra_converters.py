"""Loading published ELECTRA checkpoints (Hugging Face `model_type: electra`) without PyTorch.

The reference names (``electra.`` prefix in task checkpoints, none in a bare
``ElectraModel``):

* ``embeddings.{word,position,token_type}_embeddings.weight``, ``embeddings.LayerNorm``:
  the E-wide embedding block;
* ``embeddings_project``: the E -> H projection, present only when E != H;
* ``encoder.layer.N.*``: BERT's block layout (attention.self.{query,key,value},
  attention.output.{dense,LayerNorm}, intermediate.dense, output.{dense,LayerNorm});
* ``discriminator_predictions.{dense,dense_prediction}``: the replaced-token-detection
  head of ``ElectraForPreTraining`` (read by `pretrainer_from_huggingface`).

A generator checkpoint (``ElectraForMaskedLM``) loads as a backbone too: its
``generator_predictions`` / ``generator_lm_head`` head is left aside.
"""

from __future__ import annotations

import numpy as np

from lmfactory.models import hf_utils
from lmfactory.models.electra.electra_backbone import ElectraBackbone

HF_PREFIXES = ("electra.", "")
# Task heads and buffers a backbone does not hold.
HF_HEAD_PREFIXES = ("discriminator_predictions.", "generator_predictions.",
                    "generator_lm_head.", "classifier.", "qa_outputs.")
HF_BUFFERS = ("embeddings.position_ids",)


def backbone_kwargs_from_hf_config(config: dict) -> dict:
    """`ElectraBackbone` constructor kwargs from a Hugging Face ``ElectraConfig`` dict."""
    if config.get("model_type") != "electra":
        raise ValueError(f"Not an ELECTRA checkpoint: model_type is "
                         f"{config.get('model_type')!r}, expected 'electra'")
    activation = config.get("hidden_act", "gelu")
    if activation != "gelu":
        raise ValueError(f"ELECTRA checkpoint uses hidden_act={activation!r}; "
                         f"ElectraBackbone implements the exact 'gelu' of the paper only")
    position_type = config.get("position_embedding_type", "absolute")
    if position_type != "absolute":
        raise ValueError(f"ELECTRA checkpoint uses position_embedding_type="
                         f"{position_type!r}; only 'absolute' (learned) positions are read")
    epsilon = float(config.get("layer_norm_eps", 1e-12))
    if not np.isclose(epsilon, 1e-12, rtol=0, atol=1e-15):
        raise ValueError(f"ELECTRA checkpoint uses layer_norm_eps={epsilon}; "
                         f"ElectraBackbone uses the paper's 1e-12")
    kwargs = hf_utils.bert_layout_dimensions(config)
    kwargs["embedding_dim"] = int(config.get("embedding_size") or kwargs["hidden_dim"])
    return kwargs


def load_backbone_weights(backbone: ElectraBackbone, read: hf_utils.WeightReader) -> None:
    """Copies the reference encoder weights into ``backbone``."""
    hf_utils.set_embedding(backbone.token_embedding, read("embeddings.word_embeddings.weight"))
    hf_utils.assign(backbone.embeddings.position_embedding.position_embeddings,
                    read("embeddings.position_embeddings.weight"), "position embeddings")
    hf_utils.set_embedding(backbone.segment_embedding,
                           read("embeddings.token_type_embeddings.weight"))
    hf_utils.set_layer_norm(backbone.embeddings_layer_norm,
                            *hf_utils.layer_norm(read, "embeddings.LayerNorm"))
    if backbone.embeddings_projection is not None:
        hf_utils.set_dense(backbone.embeddings_projection,
                           *hf_utils.linear(read, "embeddings_project"))
    elif read.has("embeddings_project.weight"):
        raise ValueError("The checkpoint has an embeddings_project layer but its "
                         "embedding_size equals hidden_size")
    for i, block in enumerate(backbone.transformer_layers):
        hf_utils.set_bert_layer(block, read, f"encoder.layer.{i}")


def _check_all_read(read: hf_utils.WeightReader, path: str) -> None:
    ignored = tuple(prefix + name for prefix in HF_PREFIXES
                    for name in HF_HEAD_PREFIXES + HF_BUFFERS)
    unread = read.unread(ignore_prefixes=ignored)
    if unread:
        raise ValueError(f"ELECTRA checkpoint {path!r} has weights the backbone does not "
                         f"use (a different architecture?): {unread[:8]}")


def _read(path: str):
    config = hf_utils.read_config(path)
    kwargs = backbone_kwargs_from_hf_config(config)
    read = hf_utils.WeightReader(hf_utils.read_weights(path), prefixes=HF_PREFIXES)
    backbone = ElectraBackbone(**kwargs)
    load_backbone_weights(backbone, read)
    return backbone, read


def from_huggingface(path: str) -> ElectraBackbone:
    """An `ElectraBackbone` with the weights of the Hugging Face ELECTRA folder ``path``
    (``config.json`` + ``model.safetensors``; bare ``ElectraModel`` or a task model)."""
    backbone, read = _read(path)
    _check_all_read(read, path)
    return backbone


def pretrainer_from_huggingface(path: str, **task_args):
    """An `ElectraPretrainer` whose discriminator and replaced-token-detection head come from
    the Hugging Face ``ElectraForPreTraining`` folder ``path``. The generator, published as
    a separate checkpoint, is freshly initialised (its embeddings are the shared ones)."""
    from lmfactory.models.electra.electra_pretrainer import ElectraPretrainer

    backbone, read = _read(path)
    pretrainer = ElectraPretrainer(backbone, **task_args)
    hf_utils.set_dense(pretrainer.rtd_dense,
                       *hf_utils.linear(read, "discriminator_predictions.dense"))
    hf_utils.set_dense(pretrainer.rtd_logits,
                       *hf_utils.linear(read, "discriminator_predictions.dense_prediction"))
    _check_all_read(read, path)
    return pretrainer
