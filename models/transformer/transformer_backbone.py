"""The Transformer (Vaswani et al. 2017, "Attention Is All You Need", NeurIPS): an
encoder-decoder built from attention and position-wise feed-forward blocks only."""

import math

import keras
import keras_nlp
from keras import ops

from lmfactory.models import decoder_cache
from lmfactory.models.backbone import Backbone, check_head_split

INPUT_NAMES = ("encoder_token_ids", "encoder_padding_mask", "decoder_token_ids",
               "decoder_padding_mask")


def embedding_initializer(hidden_dim):
    """N(0, d_model^-1/2): the embeddings are multiplied by sqrt(d_model) (§3.4), so their
    scaled entries start with unit variance (as the authors' tensor2tensor code does; the
    paper states no initialisation)."""
    return keras.initializers.RandomNormal(stddev=hidden_dim ** -0.5)


class TransformerBackbone(Backbone):
    """The Transformer encoder-decoder without its output softmax (the `seq2seq_lm` head's).

    * Embeddings (§3.4): one learned matrix shared by the source and target embeddings
      (and, in the head, the pre-softmax projection), a joint vocabulary of both languages
      (keras-nlp `ReversibleEmbedding`, so the head projects with its transpose), multiplied
      by sqrt(d_model).
    * Positions (§3.5): the fixed sinusoids PE(pos, 2i) = sin(pos / 10000^(2i/d)),
      PE(pos, 2i+1) = cos(pos / 10000^(2i/d)) added to the scaled embeddings (keras-nlp
      `SinePositionEncoding`; position = index in the row).
    * Dropout (§5.4, "Residual Dropout"): P_drop on the sums of embeddings and positions in
      both stacks, and on every sub-layer's output before the residual addition (keras-nlp's
      blocks do this; they also apply the same rate to the attention probabilities, which
      the paper does not mention and the authors' later tensor2tensor settings do).
    * Encoder (§3.1): N blocks of multi-head self-attention over the source (padding masked)
      and a ReLU feed-forward network (§3.3, d_ff), keras-nlp `TransformerEncoder`.
    * Decoder (§3.1): N blocks of masked (causal) self-attention, multi-head attention over
      the encoder output and the feed-forward network, keras-nlp `TransformerDecoder`.
    * Layer normalisation (§3.1): post-LN, LayerNorm(x + Sublayer(x)) as in the paper; with
      ``normalize_first=True`` pre-LN, x + Sublayer(LayerNorm(x)), plus a final LayerNorm
      after each stack (the variant of Wang et al. 2019 / Xiong et al. 2020, which trains
      without warmup sensitivity); the paper's model is the default.

    Inputs (dict, int32): `encoder_token_ids`, `encoder_padding_mask` [B, S],
        `decoder_token_ids` (the start token, then the target shifted right),
        `decoder_padding_mask` [B, T].
    Outputs (dict): `encoder_sequence_output` [B, S, hidden_dim] and
        `decoder_sequence_output` [B, T, hidden_dim] (the last blocks' outputs).

    Decoding state (models/generation.py): ``initial_state(batch, max_length,
    encoder_token_ids=..., encoder_padding_mask=...)`` runs the encoder once and returns
    ``{"self_attention": ((keys, values), ...)`` (the decoder's per-layer key/value buffers,
    [B, heads, max_length, head_dim] each, written per position, `models/decoder_cache.py`),
    ``"cross_attention": ([B, 2, S, heads, head_dim], ...)`` (each layer's keys and values
    of the encoder output, computed once),
    ``"encoder_outputs": [B, S, hidden_dim]``, ``"encoder_padding_mask": [B, S]}`` (the last
    three static); ``call_with_state`` runs decoder positions ``index, ...`` on it.

    Args:
        vocabulary_size: size of the joint source / target vocabulary.
        num_layers: N, the blocks of the encoder and of the decoder (each).
        num_heads: h, the attention heads (d_k = d_v = d_model / h, §3.2.2).
        hidden_dim: d_model.
        intermediate_dim: d_ff, the inner width of the feed-forward networks.
        dropout: P_drop (§5.4).
        max_sequence_length: the longest target `generate_ids` produces (the sinusoids have
            no limit; this bounds decoding).
        normalize_first: False for the paper's post-LN blocks, True for pre-LN.
        layer_norm_epsilon: the LayerNorms' epsilon (the paper gives none; tensor2tensor's).
    """

    def __init__(self, vocabulary_size, num_layers, num_heads, hidden_dim, intermediate_dim,
                 dropout=0.1, max_sequence_length=256, normalize_first=False,
                 layer_norm_epsilon=1e-6, dtype=None, **kwargs):
        inputs, outputs = self._build_network(
            vocabulary_size, num_layers, num_heads, hidden_dim, intermediate_dim, dropout,
            max_sequence_length, normalize_first, layer_norm_epsilon, dtype,
            encoder_block=keras_nlp.layers.TransformerEncoder,
            decoder_block=keras_nlp.layers.TransformerDecoder)
        super().__init__(inputs=inputs, outputs=outputs, dtype=dtype, arguments=locals(),
                         **kwargs)

    def _build_network(self, vocabulary_size, num_layers, num_heads, hidden_dim,
                       intermediate_dim, dropout, max_sequence_length, normalize_first,
                       layer_norm_epsilon, dtype, encoder_block, decoder_block):
        """Checks the sizes, creates the layers (the blocks of the stacks are
        ``encoder_block`` / ``decoder_block``: keras-nlp's `TransformerEncoder` /
        `TransformerDecoder` or subclasses with their call signatures) and wires the
        functional graph. Returns (inputs dict, outputs dict)."""
        check_head_split(hidden_dim, num_heads)
        for key, value in (("vocabulary_size", vocabulary_size), ("num_layers", num_layers),
                           ("intermediate_dim", intermediate_dim),
                           ("max_sequence_length", max_sequence_length)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{key} must be a positive integer, got {value!r}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout!r}")
        if not isinstance(normalize_first, bool):
            raise ValueError(f"normalize_first must be True or False, got "
                             f"{normalize_first!r}")
        block_args = dict(intermediate_dim=intermediate_dim, num_heads=num_heads,
                          dropout=dropout, activation="relu",
                          layer_norm_epsilon=layer_norm_epsilon,
                          normalize_first=normalize_first, dtype=dtype)
        # === Layers ===
        self.token_embedding = keras_nlp.layers.ReversibleEmbedding(
            vocabulary_size, hidden_dim, tie_weights=True,
            embeddings_initializer=embedding_initializer(hidden_dim), dtype=dtype,
            name="token_embedding")
        self.position_encoding = keras_nlp.layers.SinePositionEncoding(
            dtype=dtype, name="position_encoding")
        self.encoder_embedding_dropout = keras.layers.Dropout(
            dropout, dtype=dtype, name="encoder_embedding_dropout")
        self.decoder_embedding_dropout = keras.layers.Dropout(
            dropout, dtype=dtype, name="decoder_embedding_dropout")
        self.encoder_layers = [
            encoder_block(**block_args, name=f"encoder_layer_{i}")
            for i in range(num_layers)]
        self.decoder_layers = [
            decoder_block(**block_args, name=f"decoder_layer_{i}")
            for i in range(num_layers)]
        self.encoder_final_layer_norm = self.decoder_final_layer_norm = None
        if normalize_first:
            self.encoder_final_layer_norm = keras.layers.LayerNormalization(
                epsilon=layer_norm_epsilon, dtype=dtype, name="encoder_final_layer_norm")
            self.decoder_final_layer_norm = keras.layers.LayerNormalization(
                epsilon=layer_norm_epsilon, dtype=dtype, name="decoder_final_layer_norm")

        # === Functional model ===
        inputs = {name: keras.Input(shape=(None,), dtype="int32", name=name)
                  for name in INPUT_NAMES}
        encoded = self.encode(inputs["encoder_token_ids"], inputs["encoder_padding_mask"])
        x = self.decoder_embedding_dropout(self.embed(inputs["decoder_token_ids"]))
        for block in self.decoder_layers:
            x = block(x, encoded, decoder_padding_mask=inputs["decoder_padding_mask"],
                      encoder_padding_mask=inputs["encoder_padding_mask"])
        outputs = {"encoder_sequence_output": encoded,
                   "decoder_sequence_output": self._final(self.decoder_final_layer_norm, x)}
        return inputs, outputs

    @staticmethod
    def _final(layer_norm, x):
        return x if layer_norm is None else layer_norm(x)

    def embed(self, token_ids, start_index=0):
        """E[token] * sqrt(d_model) + PE(position) (§3.4, §3.5), positions counted from
        ``start_index`` (before the dropout)."""
        x = self.token_embedding(token_ids)
        x = x * ops.cast(math.sqrt(self.token_embedding.output_dim), x.dtype)
        return x + self.position_encoding(x, start_index=start_index)

    def encode(self, token_ids, padding_mask, training=None):
        """The encoder stack: [B, S, hidden_dim] (the padding masked as keys)."""
        x = self.encoder_embedding_dropout(self.embed(token_ids), training=training)
        for block in self.encoder_layers:
            x = block(x, padding_mask=padding_mask, training=training)
        return self._final(self.encoder_final_layer_norm, x)

    @property
    def head_dim(self):
        return self.hidden_dim // self.num_heads

    def initial_state(self, batch_size, max_length, encoder_token_ids=None,
                      encoder_padding_mask=None):
        """The decoding state before the first target position (class docstring): runs the
        encoder on ``encoder_token_ids`` [B, S] (``encoder_padding_mask``: 1 on real
        tokens; default ids != 0) and projects its output to every decoder layer's
        cross-attention keys and values."""
        if encoder_token_ids is None:
            raise ValueError("The Transformer decodes from a source sentence: pass "
                             "state_context={'encoder_token_ids': ..., "
                             "'encoder_padding_mask': ...}")
        encoder_token_ids = ops.convert_to_tensor(encoder_token_ids, "int32")
        if encoder_padding_mask is None:
            encoder_padding_mask = ops.not_equal(encoder_token_ids, 0)
        encoder_padding_mask = ops.cast(encoder_padding_mask, "int32")
        encoded = self.encode(encoder_token_ids, encoder_padding_mask, training=False)
        cross = []
        for block in self.decoder_layers:
            attention = block._cross_attention_layer  # keras-nlp's CachedMultiHeadAttention
            cross.append(ops.stack([attention._key_dense(encoded),
                                    attention._value_dense(encoded)], axis=1))
        self_attention = decoder_cache.initial_state(self.decoder_layers, batch_size,
                                                     max_length, self.num_heads, self.head_dim)
        return {"self_attention": self_attention,
                "cross_attention": tuple(cross),
                "encoder_outputs": encoded,
                "encoder_padding_mask": encoder_padding_mask}

    def call_with_state(self, token_ids, state, index):
        """Runs the target tokens at positions ``index``, ... (the protocol of
        models/generation.py) at inference: (decoder outputs [B, n_tokens, hidden_dim],
        updated state). Each layer writes the keys / values of these positions into its
        slice of ``state["self_attention"]`` and attends causally over the cache; the
        cross-attention reads the precomputed keys / values."""
        x = self.embed(token_ids, start_index=index)
        mask = decoder_cache.buffer_attention_mask(
            ops.shape(x)[1], index, ops.shape(state["self_attention"][0][0])[2])
        self_attention = []
        for block, layer_state, cross in zip(self.decoder_layers, state["self_attention"],
                                             state["cross_attention"]):
            x, layer_state = decoder_cache.cached_block_call(
                block, x, layer_state, index, mask=mask,
                encoder_sequence=state["encoder_outputs"],
                encoder_padding_mask=state["encoder_padding_mask"],
                cross_attention_cache=cross, cross_attention_cache_update_index=None,
                training=False)
            self_attention.append(layer_state)
        x = self._final(self.decoder_final_layer_norm, x)
        return x, dict(state, self_attention=tuple(self_attention))
