"""GPT-1 decoder network (Radford et al. 2018, "Improving Language Understanding by
Generative Pre-Training")."""

from lmfactory.models import decoder_cache
from lmfactory.models.backbone import Backbone, check_head_split
from lmfactory.models.decoder_utils import (add_token_and_position_embeddings,
                                            decoder_blocks, decoder_graph, decoder_states,
                                            embed_tokens_and_positions,
                                            gpt_kernel_initializer)
from lmfactory.models.gpt2.gpt2_backbone import gelu_approximate


class Gpt1Backbone(decoder_cache.KeyValueCacheDecoding, Backbone):
    """The GPT-1 Transformer decoder, without the language-model output layer.

    §3.1: a multi-layer Transformer decoder (Liu et al. 2018): masked multi-headed
    self-attention over the input tokens, then position-wise feed-forward layers,

        h_0 = U W_e + W_p,   h_l = transformer_block(h_{l-1}),   P(u) = softmax(h_n W_e^T),

    with W_e the token embedding matrix and W_p the learned position embeddings. Each block
    is the original Transformer's (Vaswani et al. 2017): LayerNorm AFTER each residual sum
    (post-LN, `normalize_first=False`), unlike GPT-2's pre-LN blocks, and no LayerNorm after
    the last block. §4.1 "Model specifications": 12 layers, 768-dimensional states, 12
    heads, 3072-dimensional inner states, GELU, learned position embeddings, dropout 0.1 on
    residuals, embeddings and attention, weights from N(0, 0.02) ("since layernorm is used
    extensively throughout the model"). The blocks are keras-nlp `TransformerDecoder`s
    without cross-attention; the GELU is the tanh form of the released code (shared with
    GPT-2, `gelu_approximate`).

    The output layer is the transposed token embedding (`token_embedding(h, reverse=True)`),
    see `Gpt1CausalLM`.

    Inputs (dict of int32 [batch, seq_len], seq_len variable up to `max_sequence_length`):
        `token_ids`, `padding_mask` (1 = real token, 0 = padding at the end).
    Outputs (dict): `sequence_output` [batch, seq_len, hidden_dim], the last block's output.

    Args:
        vocabulary_size: BPE vocabulary size (40478 for the released model).
        num_layers: number of Transformer blocks.
        num_heads: number of attention heads.
        hidden_dim: model width.
        intermediate_dim: feed-forward inner size (4 * hidden_dim).
        dropout: dropout rate on embeddings, attention probabilities and residuals.
        max_sequence_length: number of learned positions (512 for GPT-1).
        layer_norm_epsilon: LayerNorm epsilon (1e-5 as in the released code).
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
        max_sequence_length=512,
        layer_norm_epsilon=1e-5,
        dtype=None,
        **kwargs,
    ):
        check_head_split(hidden_dim, num_heads)
        if num_layers < 1:
            raise ValueError(f"num_layers must be at least 1, got {num_layers}")
        # === Layers ===
        # h_0 = U W_e + W_p (§3.1), then dropout.
        add_token_and_position_embeddings(
            self,
            vocabulary_size=vocabulary_size,
            max_sequence_length=max_sequence_length,
            hidden_dim=hidden_dim,
            dropout=dropout,
            dtype=dtype,
        )
        # h_l = transformer_block(h_{l-1}): post-LN blocks, no final LayerNorm.
        self.transformer_layers = decoder_blocks(
            num_layers,
            intermediate_dim=intermediate_dim,
            num_heads=num_heads,
            dropout=dropout,
            activation=gelu_approximate,
            layer_norm_epsilon=layer_norm_epsilon,
            kernel_initializer=gpt_kernel_initializer,
            normalize_first=False,
            dtype=dtype,
        )

        # === Functional model ===
        inputs, outputs = decoder_graph(self)
        super().__init__(inputs=inputs, outputs=outputs, dtype=dtype, arguments=locals(),
                         **kwargs)

    def call_with_states(self, inputs, training=False):
        """The forward pass keeping every block's output, with the same layers.

        Returns a dict: `sequence_output` [B, T, H] and `hidden_states` (list of
        num_layers + 1 tensors [B, T, H]: h_0 after dropout, then each block's output h_l;
        the last equals `sequence_output`)."""
        x = embed_tokens_and_positions(self, inputs["token_ids"], training=training)
        return decoder_states(self.transformer_layers, x, inputs["padding_mask"],
                              training=training)

    def final_output(self, x):
        """Post-LN blocks (§3.1, as the original Transformer): the last block's output is the
        backbone's; there is no final LayerNorm."""
        return x
