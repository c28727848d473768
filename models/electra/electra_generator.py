"""ELECTRA's generator: the small masked language model that proposes replacement tokens
(Clark et al. 2020 §2, §3.2)."""

import keras

from lmfactory.models.bert.bert_backbone import bert_kernel_initializer
from lmfactory.models.encoder_utils import post_ln_encoder_blocks
from lmfactory.models.tied_output import MaskedLMHead


@keras.saving.register_keras_serializable(package="lmfactory")
class ElectraGenerator(keras.layers.Layer):
    """The generator G of §2: a BERT-style Transformer encoder trained with masked LM, whose
    softmax over the vocabulary at each masked position is sampled to corrupt the input.

    It has no embeddings of its own. §3.2 "Weight Sharing": with a generator smaller than
    the discriminator, "we only share the embeddings (both the token and positional
    embeddings) of the generator and discriminator"; as in the released code, the whole
    embedding block (token, position and segment tables and their LayerNorm) is the
    discriminator's, so this layer takes the output of `ElectraBackbone.embed` ([B, T, E])
    and, when E differs from its hidden size, projects it with a dense layer of its own.
    §3.2 "Smaller Generators" / Table 6: its hidden size, FFN size and number of heads are
    the discriminator's times the generator size; it keeps the number of layers.

    The output layer is BERT's masked-LM head (Dense(E) + GELU + LayerNorm, then the
    transposed token embedding and an output bias), i.e. keras-nlp's `MaskedLMHead` tied to
    the shared `token_embedding`, its projection folded over the batch
    (`models/tied_output.py`). The discriminator's head is a per-token binary classifier
    (§2), not tied to the embedding.

    Call arguments:
        embedded: [batch, seq_len, E], the shared embeddings of the masked input.
        padding_mask: [batch, seq_len], 1 = real token.
        mask_positions: [batch, num_predictions] int, the positions to predict.
    Returns logits [batch, num_predictions, vocabulary_size].

    Args:
        token_embedding: the discriminator's `ReversibleEmbedding` (shared, tied output).
        num_layers, num_heads, hidden_dim, intermediate_dim: the generator's sizes.
        dropout: dropout rate inside the blocks.
    """

    def __init__(self, token_embedding, num_layers, num_heads, hidden_dim, intermediate_dim,
                 dropout=0.1, dtype=None, **kwargs):
        # `dtype` is its sublayers' policy. The container holds no variables and opens no
        # autocast scope: keras-nlp's MaskedLMHead (autocast=False) only works under a mixed
        # policy when it is not called inside another layer's autocast scope.
        super().__init__(dtype="float32", autocast=False, **kwargs)
        self.layers_dtype = (keras.dtype_policies.get(dtype) if dtype is not None
                             else keras.config.dtype_policy())
        if hidden_dim % num_heads:
            raise ValueError(f"Generator hidden_dim ({hidden_dim}) must be divisible by "
                             f"num_heads ({num_heads})")
        self.token_embedding = token_embedding
        self.num_layers = num_layers
        self.num_heads = num_heads
        self.hidden_dim = hidden_dim
        self.intermediate_dim = intermediate_dim
        self.dropout = dropout
        self.embedding_dim = token_embedding.output_dim

        self.embeddings_projection = None
        if self.embedding_dim != hidden_dim:
            self.embeddings_projection = keras.layers.Dense(
                hidden_dim,
                kernel_initializer=bert_kernel_initializer(),
                dtype=self.layers_dtype,
                name="embeddings_projection",
            )
        self.transformer_layers = post_ln_encoder_blocks(
            num_layers,
            num_heads=num_heads,
            intermediate_dim=intermediate_dim,
            dropout=dropout,
            kernel_initializer=bert_kernel_initializer,
            dtype=self.layers_dtype,
        )
        self.masked_lm_head = MaskedLMHead(
            token_embedding=token_embedding,
            intermediate_activation="gelu",
            layer_norm_epsilon=1e-12,
            kernel_initializer=bert_kernel_initializer(),
            dtype=self.layers_dtype,
            name="masked_lm_head",
        )

    def build(self, embedded_shape, padding_mask_shape=None, mask_positions_shape=None):
        if embedded_shape[-1] != self.embedding_dim:
            raise ValueError(f"ElectraGenerator expects embeddings of size "
                             f"{self.embedding_dim}, got shape {embedded_shape}")
        shape = tuple(embedded_shape)
        if self.embeddings_projection is not None:
            self.embeddings_projection.build(shape)
            shape = shape[:-1] + (self.hidden_dim,)
        for block in self.transformer_layers:
            block.build(shape)
        self.masked_lm_head.build(shape)
        self.built = True

    def call(self, embedded, padding_mask, mask_positions, training=None):
        x = embedded
        if self.embeddings_projection is not None:
            x = self.embeddings_projection(x)
        for block in self.transformer_layers:
            x = block(x, padding_mask=padding_mask, training=training)
        return self.masked_lm_head(x, mask_positions=mask_positions)

    def get_config(self):
        config = super().get_config()
        config.update({
            "token_embedding": keras.layers.serialize(self.token_embedding),
            "num_layers": self.num_layers,
            "num_heads": self.num_heads,
            "hidden_dim": self.hidden_dim,
            "intermediate_dim": self.intermediate_dim,
            "dropout": self.dropout,
            "dtype": keras.dtype_policies.serialize(self.layers_dtype),
        })
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if isinstance(config.get("token_embedding"), dict):
            config["token_embedding"] = keras.layers.deserialize(config["token_embedding"])
        return cls(**config)
