"""GPT-3 decoder network (Brown et al. 2020, "Language Models are Few-Shot Learners")."""

import math

import keras
import keras_nlp

from lmfactory.models import decoder_cache
from lmfactory.models.attention import SparseTransformerDecoder
from lmfactory.models.gpt2.gpt2_backbone import gelu_approximate


@keras.saving.register_keras_serializable(package="lmfactory")
class GPT3Backbone(keras.Model):
    """The GPT-3 Transformer decoder, without the language-model output layer.

    §2.1: "We use the same model and architecture as GPT-2, including the modified
    initialization, pre-normalization, and reversible tokenization described therein, with
    the exception that we use alternating dense and locally banded sparse attention patterns
    in the layers of the transformer, similar to the Sparse Transformer". So, as in
    `GPT2Backbone`: learned token + position embeddings, pre-LN blocks with a final
    LayerNorm, GELU MLP of 4 * d_model, N(0, 0.02) weights with the residual projections
    scaled by 1/sqrt(2 * num_layers), and the output layer tied to the token embedding
    (`token_embedding(h, reverse=True)`, see `GPT2CausalLM`). The difference: layers
    0, 2, 4, ... attend densely (causal), layers 1, 3, 5, ... attend to a causal local band
    of `attention_band` positions (i - band < j <= i; Child et al. 2019's local pattern,
    `SparseMultiHeadAttention(pattern="local")`). The paper does not state the band width;
    `attention_band=256` is this implementation's default, and None makes every layer dense.

    keras-nlp's `TransformerDecoder` is not used because it has no banded sparse attention
    and ties the head size to d_model / n_heads, while Table 2.1 gives d_head separately
    (`head_dim`); the blocks are `SparseTransformerDecoder`s with the same structure.

    Banded layers compute the band without a T x T score matrix by default
    (`attention_implementation="sparse"`, blocks of `attention_band` queries against their
    own and the previous block); "masked_dense" applies the band as a mask to full
    attention. Cached decoding (`call_with_cache`) masks the band over the cache, so
    generation sees exactly what training saw.

    Inputs (dict of int32 [batch, seq_len], seq_len up to `max_sequence_length`):
        `token_ids`, `padding_mask` (1 = real token, 0 = padding at the end).
    Outputs (dict): `sequence_output` [batch, seq_len, hidden_dim] (after the final
        LayerNorm).

    Args:
        vocabulary_size: byte-level BPE vocabulary size (50257).
        num_layers: number of Transformer blocks (n_layers).
        num_heads: attention heads per block (n_heads).
        hidden_dim: model width d_model.
        intermediate_dim: MLP inner size d_ff (4 * d_model).
        head_dim: size of each head d_head (default hidden_dim // num_heads).
        attention_band: band width of the odd (locally banded) layers, or None for all
            dense.
        attention_implementation: "sparse" or "masked_dense" for the banded layers.
        dropout: dropout on embeddings, attention probabilities and residuals (GPT-2's 0.1;
            the GPT-3 paper does not state one).
        max_sequence_length: number of learned positions n_ctx (2048).
        layer_norm_epsilon: LayerNorm epsilon.
        dtype: Keras dtype policy for the layers, e.g. "mixed_bfloat16".
    """

    def __init__(
        self,
        vocabulary_size,
        num_layers,
        num_heads,
        hidden_dim,
        intermediate_dim,
        head_dim=None,
        attention_band=256,
        attention_implementation="sparse",
        dropout=0.1,
        max_sequence_length=2048,
        layer_norm_epsilon=1e-5,
        dtype=None,
        **kwargs,
    ):
        if head_dim is None:
            if hidden_dim % num_heads:
                raise ValueError(f"hidden_dim ({hidden_dim}) is not divisible by num_heads "
                                 f"({num_heads}); pass head_dim")
            head_dim = hidden_dim // num_heads
        if attention_band is not None and (not isinstance(attention_band, int)
                                           or isinstance(attention_band, bool)
                                           or attention_band < 1):
            raise ValueError(f"attention_band must be a positive integer or None, got "
                             f"{attention_band!r}")
        # === Layers ===
        self.embeddings = keras_nlp.layers.TokenAndPositionEmbedding(
            vocabulary_size=vocabulary_size,
            sequence_length=max_sequence_length,
            embedding_dim=hidden_dim,
            tie_weights=True,
            embeddings_initializer=keras.initializers.RandomNormal(stddev=0.02),
            dtype=dtype,
            name="embeddings",
        )
        self.token_embedding = self.embeddings.token_embedding
        self.embeddings_dropout = keras.layers.Dropout(
            dropout, dtype=dtype, name="embeddings_dropout"
        )
        self.layer_patterns = tuple(
            "local" if attention_band is not None and i % 2 == 1 else "dense"
            for i in range(num_layers)
        )
        self.transformer_layers = [
            SparseTransformerDecoder(
                intermediate_dim=intermediate_dim,
                num_heads=num_heads,
                head_dim=head_dim,
                pattern=pattern,
                stride=attention_band if pattern == "local" else None,
                implementation=attention_implementation,
                dropout=dropout,
                activation=gelu_approximate,
                layer_norm_epsilon=layer_norm_epsilon,
                kernel_initializer=keras.initializers.RandomNormal(stddev=0.02),
                normalize_first=True,
                dtype=dtype,
                name=f"transformer_layer_{i}",
            )
            for i, pattern in enumerate(self.layer_patterns)
        ]
        self.layer_norm = keras.layers.LayerNormalization(
            epsilon=layer_norm_epsilon, dtype=dtype, name="layer_norm"
        )

        # === Functional model ===
        token_id_input = keras.Input(shape=(None,), dtype="int32", name="token_ids")
        padding_mask_input = keras.Input(shape=(None,), dtype="int32", name="padding_mask")
        x = self.embeddings_dropout(self.embeddings(token_id_input))
        for block in self.transformer_layers:
            x = block(x, decoder_padding_mask=padding_mask_input)
        sequence_output = self.layer_norm(x)
        super().__init__(
            inputs={"token_ids": token_id_input, "padding_mask": padding_mask_input},
            outputs={"sequence_output": sequence_output},
            **kwargs,
        )
        if dtype is not None:
            self.dtype_policy = keras.dtype_policies.get(dtype)

        # === Config ===
        self.vocabulary_size = vocabulary_size
        self.num_layers = num_layers
        self.num_heads = num_heads
        self.hidden_dim = hidden_dim
        self.intermediate_dim = intermediate_dim
        self.head_dim = head_dim
        self.attention_band = attention_band
        self.attention_implementation = attention_implementation
        self.dropout = dropout
        self.max_sequence_length = max_sequence_length
        self.layer_norm_epsilon = layer_norm_epsilon

        self._scale_residual_projections()

    def residual_projection_kernels(self):
        """The kernels that write into the residual stream: per block, the attention output
        projection and the second MLP layer."""
        kernels = []
        for block in self.transformer_layers:
            kernels.append(block._self_attention_layer._output_dense.kernel)
            kernels.append(block._feedforward_output_dense.kernel)
        return kernels

    def _scale_residual_projections(self):
        # GPT-2 §2.3: residual-layer weights scaled by 1/sqrt(N), N = 2 residuals per block.
        stddev = 0.02 / math.sqrt(2 * self.num_layers)
        for kernel in self.residual_projection_kernels():
            initializer = keras.initializers.RandomNormal(stddev=stddev)
            kernel.assign(initializer(kernel.shape, kernel.dtype))

    def initial_state(self, batch_size, max_length):
        """The decoding state before any token (the protocol of `models/generation.py`): a
        zero key/value cache [batch, num_layers, 2, max_length, num_heads, head_dim]
        (`models/decoder_cache.py`)."""
        return decoder_cache.initial_state(self.transformer_layers, batch_size, max_length,
                                           self.num_heads, self.head_dim)

    def call_with_state(self, token_ids, state, index):
        """Runs `token_ids` (the tokens at positions `index`, ...) through the network at
        inference, reusing the keys/values of earlier positions from `state`; banded
        layers attend only within their band of the cache.

        Args:
            token_ids: int [batch, n].
            state: float [batch, num_layers, 2, max_length, num_heads, head_dim].
            index: int scalar (may be a tensor), position of `token_ids[:, 0]`.

        Returns:
            (hidden [batch, n, hidden_dim] after the final LayerNorm, updated state).
        """
        x = self.embeddings(token_ids, start_index=index)
        x, state = decoder_cache.call_blocks_with_state(self.transformer_layers, x, state,
                                                        index)
        return self.layer_norm(x), state

    def get_config(self):
        return {
            "name": self.name,
            "trainable": self.trainable,
            "vocabulary_size": self.vocabulary_size,
            "num_layers": self.num_layers,
            "num_heads": self.num_heads,
            "hidden_dim": self.hidden_dim,
            "intermediate_dim": self.intermediate_dim,
            "head_dim": self.head_dim,
            "attention_band": self.attention_band,
            "attention_implementation": self.attention_implementation,
            "dropout": self.dropout,
            "max_sequence_length": self.max_sequence_length,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "dtype": self.dtype_policy.name,
        }

    @classmethod
    def from_config(cls, config):
        return cls(**config)
