"""GPT-2 decoder network (Radford et al. 2019, "Language Models are Unsupervised
Multitask Learners")."""

import math

import keras
import keras_nlp

from lmfactory.models import decoder_cache


@keras.saving.register_keras_serializable(package="lmfactory")
def gelu_approximate(x):
    """GELU in the tanh approximation GPT-1/GPT-2 use (Hendrycks & Gimpel 2016 §2)."""
    return keras.activations.gelu(x, approximate=True)


@keras.saving.register_keras_serializable(package="lmfactory")
class GPT2Backbone(keras.Model):
    """The GPT-2 Transformer decoder, without the language-model output layer.

    GPT-1 (Radford et al. 2018) §3.1: a multi-layer Transformer decoder (masked
    self-attention, no encoder-decoder attention) over the sum of token and learned position
    embeddings; §4.1: GELU activation, dropout 0.1 on residuals, embeddings and attention,
    weights initialised from N(0, 0.02).
    GPT-2 §2.3 changes: LayerNorm moved to the input of each sub-block (pre-LN, here
    `normalize_first=True`), an additional LayerNorm after the final block, and the weights
    of residual layers scaled at initialisation by 1/sqrt(N) for N residual layers. Each of
    the `num_layers` blocks adds two residuals (attention and MLP), so N = 2 * num_layers
    and the attention output projection and second MLP projection of every block start from
    N(0, 0.02 / sqrt(2 * num_layers)). `keras_nlp.layers.TransformerDecoder` takes a single
    kernel initializer, so those two kernels are re-drawn after the blocks are built.

    The output layer is the transposed token embedding (`token_embedding(h, reverse=True)`),
    the weight tying GPT-1 inherits from the original Transformer; see `GPT2CausalLM`.

    Inputs (dict of int32 [batch, seq_len], seq_len variable up to `max_sequence_length`):
        `token_ids`, `padding_mask` (1 = real token, 0 = padding at the end).
    Outputs (dict): `sequence_output` [batch, seq_len, hidden_dim] (after the final
        LayerNorm).

    Args:
        vocabulary_size: byte-level BPE vocabulary size (50257 for GPT-2).
        num_layers: number of Transformer blocks.
        num_heads: number of attention heads.
        hidden_dim: model width d_model.
        intermediate_dim: MLP inner size (4 * hidden_dim).
        dropout: dropout rate on embeddings, attention probabilities and residuals.
        max_sequence_length: number of learned positions (1024 for GPT-2).
        layer_norm_epsilon: LayerNorm epsilon (1e-5 as in the released model).
        dtype: Keras dtype policy for the layers, e.g. "mixed_bfloat16".
    """

    def __init__(
        self,
        vocabulary_size,
        num_layers,
        num_heads,
        hidden_dim,
        intermediate_dim,
        dropout=0.1,
        max_sequence_length=1024,
        layer_norm_epsilon=1e-5,
        dtype=None,
        **kwargs,
    ):
        if hidden_dim % num_heads:
            raise ValueError(f"hidden_dim ({hidden_dim}) must be divisible by num_heads "
                             f"({num_heads})")
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
        self.transformer_layers = [
            keras_nlp.layers.TransformerDecoder(
                intermediate_dim=intermediate_dim,
                num_heads=num_heads,
                dropout=dropout,
                activation=gelu_approximate,
                layer_norm_epsilon=layer_norm_epsilon,
                kernel_initializer=keras.initializers.RandomNormal(stddev=0.02),
                normalize_first=True,
                dtype=dtype,
                name=f"transformer_layer_{i}",
            )
            for i in range(num_layers)
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
        stddev = 0.02 / math.sqrt(2 * self.num_layers)
        for kernel in self.residual_projection_kernels():
            # A fresh initializer per kernel: an unseeded Keras initializer repeats its
            # draw on every call.
            initializer = keras.initializers.RandomNormal(stddev=stddev)
            kernel.assign(initializer(kernel.shape, kernel.dtype))

    def initial_state(self, batch_size, max_length):
        """The decoding state before any token (the protocol of `models/generation.py`): a
        zero key/value cache [batch, num_layers, 2, max_length, num_heads, head_dim]
        (`models/decoder_cache.py`)."""
        return decoder_cache.initial_state(self.transformer_layers, batch_size, max_length,
                                           self.num_heads, self.hidden_dim // self.num_heads)

    def call_with_state(self, token_ids, state, index):
        """Runs `token_ids` (the tokens at positions `index`, ...) through the network at
        inference, reusing the keys/values of earlier positions from `state`; the
        decoding-state protocol `CausalLMGeneration.generate_ids` decodes with.

        Args:
            token_ids: int [batch, n], usually n = 1 during generation, or the whole padded
                prompt with `index = 0` to fill the cache.
            state: float [batch, num_layers, 2, max_length, num_heads, head_dim], e.g. from
                `initial_state`.
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
            "dropout": self.dropout,
            "max_sequence_length": self.max_sequence_length,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "dtype": self.dtype_policy.name,
        }

    @classmethod
    def from_config(cls, config):
        return cls(**config)
