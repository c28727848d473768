"""GPT-2 decoder network (Radford et al. 2019, "Language Models are Unsupervised
Multitask Learners")."""

import keras

from lmfactory.models import decoder_cache
from lmfactory.models.backbone import Backbone, check_head_split
from lmfactory.models.decoder_utils import (add_token_and_position_embeddings,
                                            decoder_blocks, decoder_graph,
                                            gpt_kernel_initializer, residual_projection_kernels,
                                            scale_residual_projections)


@keras.saving.register_keras_serializable(package="lmfactory")
def gelu_approximate(x):
    """GELU in the tanh approximation GPT-1/GPT-2 use (Hendrycks & Gimpel 2016 §2)."""
    return keras.activations.gelu(x, approximate=True)


def add_gpt2_layers(model, *, vocabulary_size, max_sequence_length, hidden_dim, num_layers,
                    dropout, layer_norm_epsilon, dtype, **block_args) -> None:
    """Gives ``model`` GPT-2's layers (§2.3), which GPT-3 keeps (§2.1): GPT-1's token and
    position embeddings (`add_token_and_position_embeddings`), `num_layers` blocks with the
    LayerNorm at the input of each sub-block (`normalize_first=True`), tanh GELU and
    N(0, 0.02) kernels, and `layer_norm`, the LayerNorm after the final block.
    ``block_args`` go to `decoder_blocks` (the block sizes; GPT-3's block class and
    per-layer attention patterns)."""
    add_token_and_position_embeddings(
        model,
        vocabulary_size=vocabulary_size,
        max_sequence_length=max_sequence_length,
        hidden_dim=hidden_dim,
        dropout=dropout,
        dtype=dtype,
    )
    model.transformer_layers = decoder_blocks(
        num_layers,
        dropout=dropout,
        activation=gelu_approximate,
        layer_norm_epsilon=layer_norm_epsilon,
        kernel_initializer=gpt_kernel_initializer,
        normalize_first=True,
        dtype=dtype,
        **block_args,
    )
    model.layer_norm = keras.layers.LayerNormalization(
        epsilon=layer_norm_epsilon, dtype=dtype, name="layer_norm"
    )


class Gpt2LayersBackbone(decoder_cache.KeyValueCacheDecoding, Backbone):
    """What a backbone built from GPT-2's layers (`add_gpt2_layers`: GPT-2, and GPT-3, which
    keeps them, §2.1) shares: the functional graph ending in the final LayerNorm, the
    residual rescaling of GPT-2 §2.3, and cached decoding (`KeyValueCacheDecoding`)."""

    def _build_gpt2_graph(self, *, dtype, arguments, **kwargs):
        """Wires the layers ``add_gpt2_layers`` made into the functional model (the
        subclass's constructor ``arguments`` become its config), then re-draws the residual
        projections with stddev 0.02 / sqrt(2 * num_layers) (§2.3: N = 2 residuals a block)."""
        inputs, outputs = decoder_graph(self, final_layer_norm=self.layer_norm)
        super().__init__(inputs=inputs, outputs=outputs, dtype=dtype, arguments=arguments,
                         **kwargs)
        scale_residual_projections(self.transformer_layers)

    def residual_projection_kernels(self):
        """The kernels `scale_residual_projections` re-drew (GPT-2 §2.3)."""
        return residual_projection_kernels(self.transformer_layers)


class GPT2Backbone(Gpt2LayersBackbone):
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
        check_head_split(hidden_dim, num_heads)
        # === Layers ===
        add_gpt2_layers(
            self,
            vocabulary_size=vocabulary_size,
            max_sequence_length=max_sequence_length,
            hidden_dim=hidden_dim,
            num_layers=num_layers,
            intermediate_dim=intermediate_dim,
            num_heads=num_heads,
            dropout=dropout,
            layer_norm_epsilon=layer_norm_epsilon,
            dtype=dtype,
        )
        self._build_gpt2_graph(dtype=dtype, arguments=locals(), **kwargs)
