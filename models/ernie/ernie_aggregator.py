"""The aggregator of ERNIE's K-Encoder (Zhang et al. 2019 §3.3, Figure 2 right)."""

import keras
import keras_nlp
from keras import ops
from keras_hub.src.utils.keras_utils import clone_initializer


class ErnieAggregator(keras_nlp.layers.TransformerEncoder):
    """One aggregator layer: a BERT block on the token stream fused with an entity stream.

    §3.3: the i-th aggregator takes the token embeddings {w_1 .. w_n} and the entity
    embeddings {e_1 .. e_m} of the previous one and runs two multi-head self-attentions
    (MH-ATTs), one over the tokens and one over the entities, then fuses the two sequences
    at each token aligned to an entity (Eq. 4):

        h_j = GELU(W_t w_j + W_e e_k + b)      (token w_j aligned to entity e_k)
        w_j' = GELU(W_t' h_j + b_t'),  e_k' = GELU(W_e' h_j + b_e')

    and for a token without an entity (Eq. 5): h_j = GELU(W_t w_j + b), w_j' = GELU(W_t' h_j
    + b_t'). Each MH-ATT and each output goes through dropout, a residual connection and a
    LayerNorm, as the paper's released code (thunlp/ERNIE ``BertLayerMix``) does around its
    attention and output projections.

    The token side reuses keras-nlp's `TransformerEncoder` (this class subclasses it): its
    self-attention, the attention LayerNorm, the feed-forward `W_t` / `b`
    (`_feedforward_intermediate_dense`) and `W_t'` / `b_t'` (`_feedforward_output_dense`)
    and the output LayerNorm are exactly a BERT block's, under keras-nlp's names, so a BERT
    block's weights copy into them (`ernie_converters.from_bert`). keras-nlp has no layer for
    the entity stream or the fusion, which are written here: the entity MH-ATT (a keras
    `MultiHeadAttention` over the entity positions only, so it attends over {e_1 .. e_m} as
    the paper's sequence of entities), `W_e` (no bias: the `b` of Eq. 4 is the token side's,
    so Eq. 5 is Eq. 4 with the entity term left out), `W_e'` / `b_e'` and their LayerNorms.

    Entities are carried aligned to the token positions (as in the released code): `entities`
    [B, T, d_e] holds e_k at the first token of its mention, and `entity_mask` [B, T] is 1
    there. The fusion term enters only where `entity_mask` is 1 (Eq. 4 vs Eq. 5), and the
    entity output is zero elsewhere.

    Args:
        intermediate_dim: width of h (BERT's feed-forward size).
        num_heads: heads of the token MH-ATT.
        entity_num_heads: heads of the entity MH-ATT (the released code: 4 over d_e = 100).
        output_activation: the activation of the two outputs (Eq. 4: "gelu"); None gives the
            released code's linear outputs, with which an aggregator without entities is
            exactly a BERT block.
        Other arguments: keras-nlp `TransformerEncoder`'s (post-LayerNorm here).

    Call: ``layer(tokens [B, T, H], entities [B, T, d_e], entity_mask [B, T], padding_mask
    [B, T])`` -> ``(tokens', entities')``.
    """

    def __init__(self, intermediate_dim, num_heads, entity_num_heads=4, activation="gelu",
                 output_activation="gelu", **kwargs):
        # The parent's intermediate dense stays linear: the activation comes after the fusion.
        super().__init__(intermediate_dim=intermediate_dim, num_heads=num_heads,
                         activation=None, normalize_first=False, **kwargs)
        self.entity_num_heads = entity_num_heads
        self.fusion_activation = keras.activations.get(activation)
        self.output_activation = keras.activations.get(output_activation)

    def build(self, inputs_shape, entities_shape=None):
        super().build(inputs_shape)
        if entities_shape is None:
            raise ValueError("ErnieAggregator.build needs the entity stream's shape")
        entity_dim = entities_shape[-1]
        if entity_dim % self.entity_num_heads:
            raise ValueError(f"entity dimension {entity_dim} must be divisible by "
                             f"entity_num_heads {self.entity_num_heads}")

        def dense(units, name, use_bias=True):
            return keras.layers.Dense(
                units, use_bias=use_bias,
                kernel_initializer=clone_initializer(self.kernel_initializer),
                bias_initializer=clone_initializer(self.bias_initializer),
                dtype=self.dtype_policy, name=name)

        self._entity_attention_layer = keras.layers.MultiHeadAttention(
            num_heads=self.entity_num_heads, key_dim=entity_dim // self.entity_num_heads,
            dropout=self.dropout,
            kernel_initializer=clone_initializer(self.kernel_initializer),
            bias_initializer=clone_initializer(self.bias_initializer),
            dtype=self.dtype_policy, name="entity_attention_layer")
        self._entity_attention_layer.build(query_shape=entities_shape,
                                           value_shape=entities_shape)
        self._entity_attention_layer_norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy,
            name="entity_attention_layer_norm")
        self._entity_attention_layer_norm.build(entities_shape)
        self._entity_fusion_dense = dense(self.intermediate_dim, "entity_fusion_dense",
                                          use_bias=False)
        self._entity_fusion_dense.build(entities_shape)
        self._entity_output_dense = dense(entity_dim, "entity_output_dense")
        self._entity_output_dense.build(tuple(inputs_shape[:-1]) + (self.intermediate_dim,))
        self._entity_output_layer_norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy,
            name="entity_output_layer_norm")
        self._entity_output_layer_norm.build(entities_shape)
        self._entity_dropout = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy,
                                                    name="entity_dropout")
        self.built = True

    def call(self, inputs, entities, entity_mask, padding_mask=None, training=None):
        x = inputs
        if padding_mask is None:
            padding_mask = ops.ones(ops.shape(x)[:2], "int32")
        padding = ops.cast(padding_mask, "bool")
        # Entities only at real positions.
        has_entity = ops.logical_and(ops.cast(entity_mask, "bool"), padding)
        gate = ops.cast(has_entity, self.compute_dtype)[..., None]

        # Token MH-ATT (BERT's block: attention, dropout, residual, LayerNorm).
        attended = self._self_attention_layer(query=x, value=x,
                                              attention_mask=padding[:, None, :],
                                              training=training)
        tokens = self._self_attention_layer_norm(
            x + self._self_attention_dropout(attended, training=training))

        # Entity MH-ATT over the entity positions only (keys = entities), then zero elsewhere.
        e = entities
        attended_e = self._entity_attention_layer(query=e, value=e,
                                                  attention_mask=has_entity[:, None, :],
                                                  training=training)
        ents = self._entity_attention_layer_norm(
            e + self._entity_dropout(attended_e, training=training)) * gate

        # Information fusion (Eq. 4 where an entity is aligned, Eq. 5 elsewhere).
        pre = self._feedforward_intermediate_dense(tokens)  # W_t w + b
        pre = pre + self._entity_fusion_dense(ents) * gate  # + W_e e (entity positions)
        h = self.fusion_activation(pre)

        token_out = self.output_activation(self._feedforward_output_dense(h))
        token_out = self._feedforward_layer_norm(
            tokens + self._feedforward_dropout(token_out, training=training))
        entity_out = self.output_activation(self._entity_output_dense(h))
        entity_out = self._entity_output_layer_norm(
            ents + self._entity_dropout(entity_out, training=training)) * gate
        return token_out, entity_out

    def compute_output_shape(self, inputs_shape, entities_shape=None, *args, **kwargs):
        return inputs_shape, entities_shape

    def get_config(self):
        config = super().get_config()
        for key in ("normalize_first",):
            config.pop(key, None)
        config.update({
            "entity_num_heads": self.entity_num_heads,
            "activation": keras.activations.serialize(self.fusion_activation),
            "output_activation": keras.activations.serialize(self.output_activation),
        })
        return config
