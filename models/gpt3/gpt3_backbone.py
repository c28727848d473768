"""GPT-3 decoder network (Brown et al. 2020, "Language Models are Few-Shot Learners")."""

from lmfactory.models.attention import SparseTransformerDecoder
from lmfactory.models.gpt2.gpt2_backbone import Gpt2LayersBackbone, add_gpt2_layers


class GPT3Backbone(Gpt2LayersBackbone):
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
    attention. Cached decoding (`call_with_state`) masks the band over the cache, so
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
        # §2.1: GPT-2's layers, with alternating dense and locally banded attention.
        self.layer_patterns = tuple(
            "local" if attention_band is not None and i % 2 == 1 else "dense"
            for i in range(num_layers)
        )
        add_gpt2_layers(
            self,
            vocabulary_size=vocabulary_size,
            max_sequence_length=max_sequence_length,
            hidden_dim=hidden_dim,
            num_layers=num_layers,
            block=SparseTransformerDecoder,
            layer_args=lambda i: {
                "pattern": self.layer_patterns[i],
                "stride": attention_band if self.layer_patterns[i] == "local" else None,
            },
            intermediate_dim=intermediate_dim,
            num_heads=num_heads,
            head_dim=head_dim,
            implementation=attention_implementation,
            dropout=dropout,
            layer_norm_epsilon=layer_norm_epsilon,
            dtype=dtype,
        )
        self._build_gpt2_graph(dtype=dtype, arguments=locals(), **kwargs)

    @property
    def state_head_dim(self) -> int:
        return self.head_dim
