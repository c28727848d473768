"""T5 (Raffel et al. 2020, "Exploring the Limits of Transfer Learning with a Unified
Text-to-Text Transformer", JMLR 21): the encoder-decoder Transformer of §2.1.

"Our encoder-decoder Transformer implementation closely follows its originally-proposed
form": an encoder and a decoder stack of blocks, with these changes (§2.1): a simplified
layer normalisation (RMS rescaling only, no bias) applied to the input of each
sub-component (pre-norm) and once after the stack; no biases anywhere; relative position
biases (scalars per bucket and head, shared across the layers of a stack) instead of
absolute position embeddings; dropout on the stack inputs / outputs, the skip
connections, the attention weights and inside the feed-forward network. The token
embedding is shared by the encoder, the decoder and (in T5 v1.0) the output layer; the
attention logits are not scaled by 1/sqrt(d_kv) (the reference folds it into the query
initialisation).

T5.1.1 (the later "v1.1" release): gated-GELU feed-forward, no dropout in pretraining,
the output layer untied from the embedding (and then not rescaled): the
``feed_forward="gated-gelu"`` / ``tie_embeddings=False`` switches.
"""

import keras
import keras_nlp
from keras import ops

from lmfactory.models import decoder_cache
from lmfactory.models.backbone import Backbone, check_head_split
from lmfactory.models.t5.t5_feed_forward import FEED_FORWARD_KINDS
from lmfactory.models.t5.t5_stack import T5Stack
from lmfactory.models.tied_output import tied_logits

INPUT_NAMES = ("encoder_token_ids", "encoder_padding_mask", "decoder_token_ids",
               "decoder_padding_mask")


class T5Backbone(Backbone):
    """The T5 encoder-decoder without its output layer.

    Inputs (dict, int32): `encoder_token_ids`, `encoder_padding_mask` [B, S],
        `decoder_token_ids` (the decoder start token, id 0 = <pad> in T5, then the target
        shifted right), `decoder_padding_mask` [B, T].
    Outputs (dict): `encoder_sequence_output` [B, S, d_model] and `decoder_sequence_output`
        [B, T, d_model] (each after the stack's final RMS norm, what Hugging Face's
        ``last_hidden_state`` means).

    Attributes: ``token_embedding`` (a keras-nlp `ReversibleEmbedding` shared by both
    stacks; ``reverse=True`` is the output layer: the tied embedding in T5 v1.0, a separate
    matrix with ``tie_embeddings=False``), ``encoder`` and ``decoder`` (`T5Stack`).

    Decoding state (models/generation.py): ``initial_state(batch, max_length,
    encoder_token_ids=..., encoder_padding_mask=...)`` runs the encoder once; the state is
    ``{"self_attention": ((keys, values), ...) (per decoder layer, [B, heads, max_length,
    d_kv] each, `models/decoder_cache.py`), "cross_attention": [B, L, 2, S, heads, d_kv]
    (static), "encoder_padding_mask": [B, S] (static)}``; `call_with_state`
    adds the decoder's relative bias of the positions ``index, ...`` against the cache.

    Args:
        vocabulary_size: the SentencePiece vocabulary (32,128 in the released models:
            32,000 pieces + 100 sentinels, padded).
        num_layers: blocks per stack (the decoder's too unless ``num_decoder_layers``).
        num_heads, hidden_dim (d_model), intermediate_dim (d_ff).
        head_dim: d_kv (None: hidden_dim // num_heads).
        num_decoder_layers: blocks in the decoder (None: ``num_layers``).
        feed_forward: ``"relu"`` (T5) or ``"gated-gelu"`` (T5.1.1).
        tie_embeddings: output layer = the token embedding (T5); False: its own (T5.1.1).
        relative_attention_num_buckets, relative_attention_max_distance: 32 and 128.
        dropout: 0.1 in the paper's pre-training and fine-tuning.
        layer_norm_epsilon: 1e-6.
        max_sequence_length: the longest target `generate_ids` produces (relative
            positions set no limit).
    """

    def __init__(self, vocabulary_size, num_layers, num_heads, hidden_dim, intermediate_dim,
                 head_dim=None, num_decoder_layers=None, feed_forward="relu",
                 tie_embeddings=True, relative_attention_num_buckets=32,
                 relative_attention_max_distance=128, dropout=0.1, layer_norm_epsilon=1e-6,
                 max_sequence_length=512, dtype=None, **kwargs):
        if feed_forward not in FEED_FORWARD_KINDS:
            raise ValueError(f"feed_forward must be one of {FEED_FORWARD_KINDS}, got "
                             f"{feed_forward!r}")
        if head_dim is None:
            check_head_split(hidden_dim, num_heads)
            head_dim = hidden_dim // num_heads
        if num_decoder_layers is None:
            num_decoder_layers = num_layers
        tie_embeddings = bool(tie_embeddings)
        # === Layers ===
        self.token_embedding = keras_nlp.layers.ReversibleEmbedding(
            vocabulary_size, hidden_dim, tie_weights=tie_embeddings,
            embeddings_initializer=keras.initializers.RandomNormal(stddev=1.0),
            dtype=dtype, name="token_embedding")
        common = dict(hidden_dim=hidden_dim, intermediate_dim=intermediate_dim,
                      num_heads=num_heads, head_dim=head_dim, feed_forward=feed_forward,
                      dropout=dropout, layer_norm_epsilon=layer_norm_epsilon,
                      num_buckets=relative_attention_num_buckets,
                      max_distance=relative_attention_max_distance, dtype=dtype)
        self.encoder = T5Stack(num_layers, is_decoder=False, name="encoder", **common)
        self.decoder = T5Stack(num_decoder_layers, is_decoder=True, name="decoder", **common)

        # === Functional model ===
        inputs = {name: keras.Input(shape=(None,), dtype="int32", name=name)
                  for name in INPUT_NAMES}
        encoded = self.encoder(self.token_embedding(inputs["encoder_token_ids"]),
                               inputs["encoder_padding_mask"])
        decoded = self.decoder(self.token_embedding(inputs["decoder_token_ids"]),
                               inputs["decoder_padding_mask"], encoder_outputs=encoded,
                               encoder_padding_mask=inputs["encoder_padding_mask"])
        outputs = {"encoder_sequence_output": encoded, "decoder_sequence_output": decoded}
        super().__init__(inputs=inputs, outputs=outputs, dtype=dtype, arguments=locals(),
                         **kwargs)

    def output_logits(self, hidden):
        """The LM logits of decoder outputs [B, T, d_model] -> [B, T, V]: the tied
        embedding's transpose after rescaling by d_model^-0.5 (T5 v1.0, the reference's
        tied output), or the separate output matrix unscaled (T5.1.1); the projection is
        folded over the batch (`models/tied_output.py`)."""
        if self.tie_embeddings:
            hidden = hidden * ops.cast(self.hidden_dim ** -0.5, hidden.dtype)
        return tied_logits(self.token_embedding, hidden, name="output_logits")

    def initial_state(self, batch_size, max_length, encoder_token_ids=None,
                      encoder_padding_mask=None):
        """The decoding state before the first target position (class docstring): runs
        the encoder on ``encoder_token_ids`` [B, S] (mask default: ids != 0)."""
        if encoder_token_ids is None:
            raise ValueError("T5 decodes from a source: pass state_context={"
                             "'encoder_token_ids': ..., 'encoder_padding_mask': ...}")
        encoder_token_ids = ops.convert_to_tensor(encoder_token_ids, "int32")
        if encoder_padding_mask is None:
            encoder_padding_mask = ops.not_equal(encoder_token_ids, 0)
        encoder_padding_mask = ops.cast(encoder_padding_mask, "int32")
        encoded = self.encoder(self.token_embedding(encoder_token_ids), encoder_padding_mask)
        cross = self.decoder.cross_attention_cache(encoded)
        self_attention = decoder_cache.initial_state(
            self.decoder.transformer_layers, batch_size, max_length, self.num_heads,
            self.decoder.head_dim)
        return {"self_attention": self_attention,
                "cross_attention": cross, "encoder_padding_mask": encoder_padding_mask}

    def call_with_state(self, token_ids, state, index):
        """Runs the target tokens at positions ``index, ...`` (models/generation.py):
        (decoder output [B, n, d_model], the updated state)."""
        hidden, cache = self.decoder.decode(
            self.token_embedding(ops.cast(token_ids, "int32")), state["self_attention"],
            state["cross_attention"], state["encoder_padding_mask"], index)
        return hidden, dict(state, self_attention=cache)
