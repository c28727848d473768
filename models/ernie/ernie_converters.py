"""Initialising ERNIE from BERT and from the TransE component (Zhang et al. 2019 §4).

§4 ("Parameter Settings and Training Details"): "we initialize the Transformer blocks for
encoding tokens with the pre-trained parameters from BERT"; the released code loads
Google's BERT-base (12 layers) into ERNIE's 6 T-Encoder blocks and the token side of its 6
aggregators. `from_bert` does that copy from any `BertBackbone` (an imported checkpoint,
`models.load_checkpoint("bert", ...)`, or the Model artifact of a BERT pretrained in the DAG,
`components/trainer/model_artifact.load_model_backbone`): BERT's embeddings, its first N
blocks into the T-Encoder, its next M blocks into the aggregators' token self-attention,
feed-forward (W_t, b, W_t', b_t') and LayerNorms, and its pooler. The entity side stays
freshly initialised; its table is the TransE output (`knowledge_init`).

The registered converters (`huggingface`, `tf_checkpoint`) read a published BERT checkpoint
with BERT's converters and hand it to `from_bert`, so `models.load_checkpoint("ernie",
folder)` and a recipe's `pretraining.init_checkpoint` start ERNIE from BERT.

`knowledge_init(model, entity_embeddings, ...)` is the architecture's `knowledge_init`: the
trainer calls it with the TransE entity embeddings [E, d_e] after building a fresh
pretrainer or head, and it writes them into the backbone's frozen table.
"""

from __future__ import annotations

import numpy as np

from lmfactory.models.ernie.ernie_backbone import ErnieBackbone

# The aggregator's token-side sublayers: a keras-nlp TransformerEncoder's, same names.
TOKEN_SIDE = ("_self_attention_layer", "_self_attention_layer_norm",
              "_feedforward_intermediate_dense", "_feedforward_output_dense",
              "_feedforward_layer_norm")


def _copy(target, source, what: str) -> None:
    values = source.get_weights()
    shapes = [tuple(w.shape) for w in target.get_weights()]
    if shapes != [tuple(v.shape) for v in values]:
        raise ValueError(f"from_bert: {what} shapes differ: ERNIE {shapes}, BERT "
                         f"{[tuple(v.shape) for v in values]}")
    target.set_weights(values)


def copy_bert_weights(bert, ernie: ErnieBackbone) -> ErnieBackbone:
    """Copies ``bert``'s (a `BertBackbone`) weights into ``ernie``: embeddings, blocks
    0..N-1 -> T-Encoder, blocks N..N+M-1 -> the aggregators' token side, pooler. Raises
    ValueError when BERT has fewer than N + M blocks or other sizes."""
    blocks, aggregators = ernie.transformer_layers, ernie.knowledge_layers
    needed = len(blocks) + len(aggregators)
    if len(bert.transformer_layers) < needed:
        raise ValueError(f"from_bert: ERNIE with N={len(blocks)} + M={len(aggregators)} "
                         f"layers needs a BERT of at least {needed} blocks, got "
                         f"{len(bert.transformer_layers)}")
    for name in ("embeddings", "segment_embedding", "embeddings_layer_norm", "pooler_dense"):
        _copy(getattr(ernie, name), getattr(bert, name), name)
    for i, block in enumerate(blocks):
        _copy(block, bert.transformer_layers[i], f"block {i}")
    for j, aggregator in enumerate(aggregators):
        source = bert.transformer_layers[len(blocks) + j]
        for sublayer in TOKEN_SIDE:
            _copy(getattr(aggregator, sublayer), getattr(source, sublayer),
                  f"aggregator {j} {sublayer}")
    return ernie


def from_bert(bert, num_layers: int | None = None, entity_vocabulary_size: int = 14541,
              entity_dim: int = 100, entity_num_heads: int = 4, dtype=None,
              **overrides) -> ErnieBackbone:
    """A new `ErnieBackbone` of ``bert``'s sizes initialised from it (module docstring):
    N = ``num_layers`` T-Encoder blocks (default half of BERT's) and M = the rest of BERT's
    blocks as aggregators."""
    config = bert.get_config()
    total = len(bert.transformer_layers)
    num_layers = total // 2 if num_layers is None else int(num_layers)
    if not 0 <= num_layers <= total:
        raise ValueError(f"from_bert: num_layers must be in [0, {total}], got {num_layers}")
    arguments = dict(
        vocabulary_size=config["vocabulary_size"], num_layers=num_layers,
        num_knowledge_layers=total - num_layers, num_heads=config["num_heads"],
        hidden_dim=config["hidden_dim"], intermediate_dim=config["intermediate_dim"],
        entity_vocabulary_size=entity_vocabulary_size, entity_dim=entity_dim,
        entity_num_heads=entity_num_heads, dropout=config["dropout"],
        max_sequence_length=config["max_sequence_length"],
        num_segments=config["num_segments"])
    arguments.update(overrides)
    return copy_bert_weights(bert, ErnieBackbone(**arguments, dtype=dtype))


def from_huggingface(path, dtype=None) -> ErnieBackbone:
    """ERNIE initialised from a Hugging Face BERT folder (BERT's converter, then
    `from_bert`)."""
    from lmfactory.models.bert.bert_converters import from_huggingface as bert_from_hf

    return from_bert(bert_from_hf(path), dtype=dtype)


def from_tf_checkpoint(path, dtype=None) -> ErnieBackbone:
    """ERNIE initialised from an original google-research/bert checkpoint folder."""
    from lmfactory.models.bert.bert_converters import from_tf_checkpoint as bert_from_tf

    return from_bert(bert_from_tf(path), dtype=dtype)


def knowledge_init(model, entity_embeddings, *unused) -> None:
    """Writes the TransE entity embeddings [E, d_e] into the frozen entity table of
    ``model`` (an `ErnieBackbone` or a task model with a ``.backbone``); a one-line
    ValueError when the table's shape differs (set ``entity_vocabulary_size`` /
    ``entity_dim`` to the KG's)."""
    del unused  # relation embeddings: ERNIE uses entities only (§3.1)
    backbone = model if isinstance(model, ErnieBackbone) else model.backbone
    values = np.asarray(entity_embeddings, dtype="float32")
    shape = tuple(backbone.entity_table.shape)
    if values.shape != shape:
        raise ValueError(f"ERNIE's entity table is {shape} (entity_vocabulary_size, "
                         f"entity_dim) but the KG embeddings are {values.shape}; set the "
                         f"backbone's entity_vocabulary_size / entity_dim to the KG's")
    backbone.entity_table.assign(values)


__all__ = ["copy_bert_weights", "from_bert", "from_huggingface", "from_tf_checkpoint",
           "knowledge_init"]
