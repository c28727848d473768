"""ERNIE's encoder (Zhang et al. 2019, "ERNIE: Enhanced Language Representation with
Informative Entities", ACL)."""

import keras
import numpy as np
from keras import ops

from lmfactory.models.backbone import Backbone, check_head_split
from lmfactory.models.bert.bert_backbone import bert_kernel_initializer
from lmfactory.models.encoder_utils import (add_pooler, add_segment_embeddings,
                                            embed_with_segments, post_ln_encoder_blocks)
from lmfactory.models.ernie.ernie_aggregator import ErnieAggregator

ERNIE_BACKBONE_INPUTS = ("token_ids", "padding_mask", "segment_ids", "entity_ids",
                         "entity_mask")
ENTITY_OUTPUT = "entity_output"


class ErnieBackbone(Backbone):
    """ERNIE without a task head: a T-Encoder of BERT blocks and a K-Encoder of aggregators.

    §3.2 (Figure 2): the textual encoder (T-Encoder) is N bidirectional Transformer blocks
    over BERT's input representation (token + segment + position embeddings, §3.2 "identical
    to its implementation in BERT"); the knowledgeable encoder (K-Encoder) is M stacked
    aggregators (`ErnieAggregator`, §3.3) that fuse the token stream with the entity stream.
    The entity inputs of the first aggregator are the entities' TransE embeddings (§3.1:
    "we adopt knowledge embedding algorithms (e.g. TransE) to encode the graph structure of
    KGs, and then take the informative entity embeddings as input for ERNIE"); the table is
    frozen (`entity_embedding.trainable = False`: the released code keeps the TransE vectors
    fixed; the pretrainer's dEA reads the same table). Its values are set from the TransE
    component's output by `ernie_converters.knowledge_init`; a fresh backbone holds random
    vectors. The pooler is BERT's Dense(H, tanh) over the final [CLS] token vector.

    Entity inputs (this implementation's format; the paper aligns each entity to the first
    token of its mention, §3.4): `entity_ids` [B, T] holds the KG index of the entity
    aligned to a token and `entity_mask` [B, T] is 1 there and 0 everywhere else (the ids at
    mask-0 positions are ignored, any value). The entity stream is kept aligned to the
    tokens, as in the released code, so attention over it is attention over the sequence of
    the text's entities.

    Inputs (dict of int32 [B, T]): `token_ids`, `padding_mask`, `segment_ids`,
        `entity_ids`, `entity_mask`.
    Outputs: `sequence_output` [B, T, H] (the K-Encoder's token stream), `pooled_output`
        [B, H], `entity_output` [B, T, d_e] (its entity stream; zero where no entity).

    Args:
        vocabulary_size, num_heads, hidden_dim, intermediate_dim, dropout,
            max_sequence_length, num_segments: as `BertBackbone`.
        num_layers: N, the T-Encoder's BERT blocks (the paper: 6).
        num_knowledge_layers: M, the K-Encoder's aggregators (the paper: 6).
        entity_vocabulary_size: rows of the entity table (the KG's entities).
        entity_dim: d_e, the TransE dimension (the paper: 100).
        entity_num_heads: heads of the entity self-attention (released code: 4).
        knowledge_output_activation: the activation of the aggregators' outputs (Eq. 4:
            "gelu"; None: the released code's linear outputs).
        dtype: Keras dtype policy.
    """

    def __init__(
        self,
        vocabulary_size,
        num_layers,
        num_knowledge_layers,
        num_heads,
        hidden_dim,
        intermediate_dim,
        entity_vocabulary_size,
        entity_dim=100,
        entity_num_heads=4,
        knowledge_output_activation="gelu",
        dropout=0.1,
        max_sequence_length=512,
        num_segments=2,
        dtype=None,
        **kwargs,
    ):
        check_head_split(hidden_dim, num_heads)
        check_head_split(entity_dim, entity_num_heads)
        # === Layers ===
        add_segment_embeddings(
            self, vocabulary_size=vocabulary_size, max_sequence_length=max_sequence_length,
            embedding_dim=hidden_dim, num_segments=num_segments, dropout=dropout,
            kernel_initializer=bert_kernel_initializer, dtype=dtype)
        # T-Encoder: N BERT blocks (same layers and names as BertBackbone's).
        self.transformer_layers = post_ln_encoder_blocks(
            num_layers, num_heads=num_heads, intermediate_dim=intermediate_dim,
            dropout=dropout, kernel_initializer=bert_kernel_initializer, dtype=dtype)
        # The frozen TransE entity table (§3.1).
        self.entity_embedding = keras.layers.Embedding(
            entity_vocabulary_size, entity_dim,
            embeddings_initializer=keras.initializers.RandomNormal(stddev=1.0 / np.sqrt(
                entity_dim)),
            trainable=False, dtype=dtype, name="entity_embedding")
        # K-Encoder: M aggregators.
        self.knowledge_layers = [
            ErnieAggregator(
                intermediate_dim=intermediate_dim, num_heads=num_heads,
                entity_num_heads=entity_num_heads, activation="gelu",
                output_activation=knowledge_output_activation, dropout=dropout,
                layer_norm_epsilon=1e-12, kernel_initializer=bert_kernel_initializer(),
                dtype=dtype, name=f"aggregator_{i}")
            for i in range(num_knowledge_layers)
        ]
        add_pooler(self, hidden_dim=hidden_dim, kernel_initializer=bert_kernel_initializer,
                   dtype=dtype)

        # === Functional model ===
        inputs = {name: keras.Input(shape=(None,), dtype="int32", name=name)
                  for name in ERNIE_BACKBONE_INPUTS}
        x = embed_with_segments(self, inputs["token_ids"], inputs["segment_ids"])
        for block in self.transformer_layers:
            x = block(x, padding_mask=inputs["padding_mask"])
        entity_mask = ops.cast(inputs["entity_mask"], "int32") * ops.cast(
            inputs["padding_mask"], "int32")
        entity_ids = ops.where(entity_mask > 0,
                               ops.clip(inputs["entity_ids"], 0, entity_vocabulary_size - 1),
                               ops.zeros_like(inputs["entity_ids"]))
        e = self.entity_embedding(entity_ids) * ops.cast(entity_mask, x.dtype)[..., None]
        for aggregator in self.knowledge_layers:
            x, e = aggregator(x, e, entity_mask=entity_mask,
                              padding_mask=inputs["padding_mask"])
        outputs = {"sequence_output": x,
                   "pooled_output": self.pooler_dense(x[:, 0, :]),
                   ENTITY_OUTPUT: e}
        super().__init__(inputs=inputs, outputs=outputs, dtype=dtype, arguments=locals(),
                         **kwargs)

    @staticmethod
    def conformance_inputs(name, real_mask, rng, config):
        """The conformance harness's synthetic entity inputs (tests/conformance/tiny.py
        `extra_input_maker`): about a third of the real tokens aligned to random entities."""
        if name == "entity_mask":
            return (rng.random(real_mask.shape) < 0.35) * real_mask
        if name == "entity_ids":
            return rng.integers(0, config["entity_vocabulary_size"], real_mask.shape)
        return None

    @property
    def entity_table(self):
        """The entity embedding matrix [entity_vocabulary_size, entity_dim] (frozen)."""
        return self.entity_embedding.embeddings
