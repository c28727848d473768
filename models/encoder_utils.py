"""Pieces shared by the BERT-family encoder backbones (BERT, RoBERTa, ALBERT, ELECTRA,
DistilBERT, TinyBERT) and the task models around them.

The layers stay attributes of each backbone, under the names its converters and saved
files use; these helpers only create them in one place (in the order each backbone always
created them, so seeded initial values do not move) or run them:

* `add_segment_embeddings` / `embed_with_segments`: BERT's input representation (token +
  learned position + segment embeddings), used as is by ELECTRA and, E wide, by ALBERT;
* `add_embeddings_normalization` / `normalize_embeddings`: the sum, LayerNorm and dropout
  that end every encoder's embedding block;
* `post_ln_encoder_blocks`: BERT's stack of post-LayerNorm Transformer blocks;
* `encoder_graph`: the functional graph inputs -> embeddings -> blocks, the inputs and
  sequence output an encoder backbone hands to `Backbone`;
* `encoder_states`: the block loop of `call_with_states` (every hidden state and attention
  map);
* `add_pooler` / `pooled_outputs`: BERT's Dense(H, tanh) "pooler" on the final `[CLS]`
  vector (kept by ALBERT);
* `require_inputs`: checking a model's dict inputs (`model_inputs`, selecting them, lives
  in `backbone.py` and is re-exported here).
"""

import keras
import keras_nlp

from lmfactory.models.backbone import model_inputs  # noqa: F401  (re-exported)
from lmfactory.models.folded_dense import TransformerEncoder

# --------------------------------------------------------------------------- inputs


def require_inputs(owner: str, inputs, names) -> None:
    """Raises a clear error unless ``inputs`` is a dict holding every one of ``names``
    (``owner`` names the caller in the message)."""
    if not isinstance(inputs, dict):
        raise TypeError(f"{owner} takes a dict of tensors, got {type(inputs).__name__}")
    missing = [name for name in names if name not in inputs]
    if missing:
        raise ValueError(f"{owner} inputs lack {missing}; it takes {list(names)}, got "
                         f"{sorted(inputs)}")


# --------------------------------------------------------------------------- embeddings


def add_embeddings_normalization(model, *, layer_norm_epsilon, dropout, dtype) -> None:
    """Gives ``model`` the end of an encoder's embedding block: `embeddings_add` (the sum of
    the embeddings), `embeddings_layer_norm` and `embeddings_dropout`."""
    model.embeddings_add = keras.layers.Add(dtype=dtype, name="embeddings_add")
    model.embeddings_layer_norm = keras.layers.LayerNormalization(
        epsilon=layer_norm_epsilon, dtype=dtype, name="embeddings_layer_norm"
    )
    model.embeddings_dropout = keras.layers.Dropout(
        dropout, dtype=dtype, name="embeddings_dropout"
    )


def normalize_embeddings(model, embeddings: list, training=None):
    """The sum of ``embeddings`` (each [B, T, E]) through ``model``'s LayerNorm and dropout
    (`add_embeddings_normalization`)."""
    x = model.embeddings_add(embeddings)
    x = model.embeddings_layer_norm(x)
    return model.embeddings_dropout(x, training=training)


def add_segment_embeddings(model, *, vocabulary_size, max_sequence_length, embedding_dim,
                           num_segments, dropout, kernel_initializer, dtype) -> None:
    """Gives ``model`` the layers of BERT's input representation (Devlin et al. 2019 §3
    "Input/Output Representations", Figure 2): a token's embedding is the sum of its token
    embedding, a learned position embedding and a learned segment (sentence A / B)
    embedding, then LayerNorm (epsilon 1e-12) and dropout.

    Attributes set: `embeddings` (keras-nlp `TokenAndPositionEmbedding`: token + position),
    `token_embedding` (its `ReversibleEmbedding`, to which masked-LM heads tie their output
    projection), `segment_embedding`, then those of `add_embeddings_normalization`.
    ``kernel_initializer`` is a zero-argument factory, called once per table (an unseeded
    Keras initializer fixes its seed when created). Run them with `embed_with_segments`.
    """
    model.embeddings = keras_nlp.layers.TokenAndPositionEmbedding(
        vocabulary_size=vocabulary_size,
        sequence_length=max_sequence_length,
        embedding_dim=embedding_dim,
        embeddings_initializer=kernel_initializer(),
        dtype=dtype,
        name="embeddings",
    )
    model.token_embedding = model.embeddings.token_embedding
    model.segment_embedding = keras.layers.Embedding(
        input_dim=num_segments,
        output_dim=embedding_dim,
        embeddings_initializer=kernel_initializer(),
        dtype=dtype,
        name="segment_embedding",
    )
    add_embeddings_normalization(model, layer_norm_epsilon=1e-12, dropout=dropout,
                                 dtype=dtype)


def embed_with_segments(model, token_ids, segment_ids, training=None):
    """BERT's input representation ([B, T, E]) from the layers of `add_segment_embeddings`."""
    return normalize_embeddings(
        model, [model.embeddings(token_ids), model.segment_embedding(segment_ids)], training
    )


# --------------------------------------------------------------------------- blocks


def post_ln_encoder_blocks(num_layers, *, num_heads, intermediate_dim, dropout,
                           kernel_initializer, dtype, layer_norm_epsilon=1e-12,
                           activation="gelu"):
    """BERT's L Transformer blocks (Devlin et al. 2019 §3, the encoder of Vaswani et al.
    2017): keras-nlp `TransformerEncoder`s (with `FoldedDense` feed-forward layers,
    models/folded_dense.py) named ``transformer_layer_{i}``, post-LayerNorm,
    exact GELU by default (keras' "gelu" is the erf form). ``kernel_initializer`` is a
    zero-argument factory called once per block, so every block gets its own seed."""
    return [
        TransformerEncoder(
            intermediate_dim=intermediate_dim,
            num_heads=num_heads,
            dropout=dropout,
            activation=activation,
            layer_norm_epsilon=layer_norm_epsilon,
            kernel_initializer=kernel_initializer(),
            normalize_first=False,
            dtype=dtype,
            name=f"transformer_layer_{i}",
        )
        for i in range(num_layers)
    ]


def add_pooler(model, *, hidden_dim, kernel_initializer, dtype) -> None:
    """Gives ``model`` `pooler_dense`, the Dense(H, tanh) that the released BERT code applies
    to the final hidden vector of the first token, `[CLS]` (Devlin et al. 2019 §3: "the
    aggregate sequence representation"); the sentence-level heads read its output."""
    model.pooler_dense = keras.layers.Dense(
        hidden_dim,
        activation="tanh",
        kernel_initializer=kernel_initializer(),
        dtype=dtype,
        name="pooler_dense",
    )


def pooled_outputs(model, sequence_output) -> dict:
    """``{"sequence_output", "pooled_output"}``: the pooler (`add_pooler`) on ``[CLS]``."""
    return {"sequence_output": sequence_output,
            "pooled_output": model.pooler_dense(sequence_output[:, 0, :])}


def encoder_graph(model, input_names, embed):
    """The functional graph of an encoder backbone ``model`` (its `transformer_layers`): one
    int32 `keras.Input` [batch, seq_len] per name of ``input_names``, ``embed(inputs)``
    (the dict -> the hidden state entering the first block), then the blocks under the
    `padding_mask` input.

    Returns (inputs dict, sequence output [B, T, H])."""
    inputs = {name: keras.Input(shape=(None,), dtype="int32", name=name)
              for name in input_names}
    x = embed(inputs)
    for block in model.transformer_layers:
        x = block(x, padding_mask=inputs["padding_mask"])
    return inputs, x


def encoder_states(blocks, x, padding_mask, training=False) -> dict:
    """Runs the embedding output ``x`` [B, T, H] through ``blocks`` (keras-nlp
    `TransformerEncoder`s or blocks with the same call signature), keeping every
    intermediate result.

    Returns a dict: `sequence_output` [B, T, H] (the last block's output), `hidden_states`
    (list of L + 1 tensors [B, T, H]: ``x``, then each block's output) and
    `attention_scores` (list of L tensors [B, heads, T, T]: each block's softmax attention
    probabilities; padding keys get probability 0)."""
    hidden_states, attention_scores = [x], []
    for block in blocks:
        x, scores = block(x, padding_mask=padding_mask, training=training,
                          return_attention_scores=True)
        hidden_states.append(x)
        attention_scores.append(scores)
    return {"sequence_output": x, "hidden_states": hidden_states,
            "attention_scores": attention_scores}


__all__ = ["add_embeddings_normalization", "add_pooler", "add_segment_embeddings",
           "embed_with_segments", "encoder_graph", "encoder_states", "model_inputs",
           "normalize_embeddings", "pooled_outputs", "post_ln_encoder_blocks", "require_inputs"]
