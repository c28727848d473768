"""KagNet's knowledge-aware graph network (GCN-LSTM-HPA, Lin et al. 2019 §3.2-3.3) as
one Keras layer: schema graph + paths of a (question, choice) row -> its graph vector."""

from __future__ import annotations

import keras
from keras import ops

from lmfactory.models.kagnet.kagnet_layers import HierarchicalPathAttention, SchemaGraphConvolution


def _gather_rows(vectors, positions):
    """``vectors[r, positions[r, ...]]`` ([R, N, d] and int [R, ...] -> [R, ..., d]);
    positions -1 give zeros."""
    shape = ops.shape(positions)
    flat = ops.reshape(positions, (shape[0], -1))
    safe = ops.maximum(flat, 0)
    index = ops.broadcast_to(safe[..., None], (shape[0], ops.shape(flat)[1],
                                               ops.shape(vectors)[-1]))
    gathered = ops.take_along_axis(vectors, index, axis=1)
    gathered = gathered * ops.cast(flat >= 0, vectors.dtype)[..., None]
    return ops.reshape(gathered, tuple(shape) + (ops.shape(vectors)[-1],))


@keras.saving.register_keras_serializable(package="lmfactory")
class KagNetGraphEncoder(keras.layers.Layer):
    """GCN-LSTM-HPA (§3.2-3.3) over the schema graph and paths of `ConceptPathFinder`.

    1. §3.2: concept vectors start as the concept embeddings (initialised from TransE,
       ``knowledge_init``), pass ``gcn_layers`` `SchemaGraphConvolution` layers over the
       schema graph (its path edges, undirected), and each concept is represented by its
       initial and final vectors concatenated, ``c = [h^(0); h^(L)]``.
    2. §3.3 path encoder: a path ``c_0 -r_0-> c_1 ... c_n`` is the sequence of its triples
       ``[c_t; r_t; c_{t+1}]`` (r: the relation's embedding, TransE-initialised; an
       inverse hop has its own embedding, initialised to -r), read by an LSTM whose last
       state is the path vector R_ij[k].
    3. §3.3: the pair vector ``T_ij = MLP([s; c_i; c_j])`` of question concept i and answer
       concept j with the statement vector s, then `HierarchicalPathAttention` -> g.

    Inputs: ``statement`` s [R, ds] and the dict of `GRAPH_INPUTS` (int, -1 padded):
    ``concept_ids`` [R, N], ``edges`` [R, E, 2], ``pair_nodes`` [R, M, 2], ``path_nodes``
    [R, M, K, H+1], ``path_relations`` [R, M, K, H]. Output: g [R, path_dim + pair_dim].

    Args:
        num_concepts, num_relations: the KG's concept count and 2x its relation count.
        concept_dim: the concept (and relation) embedding width: TransE's dimension.
        graph_dim: the GCN's width; gcn_layers: its depth (2 in the paper).
        path_dim: the LSTM's width; pair_dim: T's width.
        dropout: on the concept embeddings and on g.
    """

    def __init__(self, num_concepts, num_relations, concept_dim=100, graph_dim=100,
                 gcn_layers=2, path_dim=128, pair_dim=128, dropout=0.1, **kwargs):
        super().__init__(**kwargs)
        self.num_concepts, self.num_relations = int(num_concepts), int(num_relations)
        self.concept_dim, self.graph_dim = int(concept_dim), int(graph_dim)
        self.gcn_layers, self.path_dim = int(gcn_layers), int(path_dim)
        self.pair_dim, self.dropout = int(pair_dim), float(dropout)
        policy = self.dtype_policy
        self.concept_embedding = keras.layers.Embedding(
            self.num_concepts, self.concept_dim, dtype=policy, name="concept_embedding")
        self.relation_embedding = keras.layers.Embedding(
            self.num_relations, self.concept_dim, dtype=policy, name="relation_embedding")
        self.gcn = [SchemaGraphConvolution(self.graph_dim, dtype=policy, name=f"gcn_{i}")
                    for i in range(self.gcn_layers)]
        self.path_lstm = keras.layers.LSTM(self.path_dim, dtype=policy, name="path_lstm")
        self.pair_mlp = keras.layers.Dense(self.pair_dim, activation="relu", dtype=policy,
                                           name="pair_mlp")
        self.attention = HierarchicalPathAttention(dtype=policy, name="path_attention")
        self.embedding_dropout = keras.layers.Dropout(self.dropout, dtype=policy)
        self.output_dropout = keras.layers.Dropout(self.dropout, dtype=policy)

    def build(self, statement_shape, graph_shape=None):
        self.concept_embedding.build((None,))
        self.relation_embedding.build((None,))
        width = self.concept_dim
        for layer in self.gcn:
            layer.build((None, None, width))
            width = self.graph_dim
        node_dim = self.concept_dim + (self.graph_dim if self.gcn_layers else 0)
        self.path_lstm.build((None, None, 2 * node_dim + self.concept_dim))
        self.pair_mlp.build((None, None, statement_shape[-1] + 2 * node_dim))
        self.attention.build(statement_shape, (None, None, self.pair_dim),
                             (None, None, None, self.path_dim), None)
        self.built = True

    def call(self, statement, graph, training=None):
        ids = graph["concept_ids"]
        node_mask = ids >= 0
        h0 = self.concept_embedding(ops.maximum(ids, 0))
        h0 = self.embedding_dropout(h0, training=training)
        h0 = h0 * ops.cast(node_mask, h0.dtype)[..., None]
        # §3.2: the schema graph's adjacency from its edge list (undirected).
        edges = graph["edges"]
        n = ops.shape(ids)[1]
        valid = ops.cast(edges[..., 0] >= 0, h0.dtype)[..., None]
        source = ops.one_hot(ops.maximum(edges[..., 0], 0), n, dtype=h0.dtype) * valid
        target = ops.one_hot(ops.maximum(edges[..., 1], 0), n, dtype=h0.dtype) * valid
        adjacency = ops.einsum("ren,rem->rnm", source, target)
        adjacency = ops.minimum(adjacency + ops.transpose(adjacency, (0, 2, 1)), 1.0)
        h = h0
        for layer in self.gcn:
            h = layer(h, adjacency, node_mask)
        nodes = ops.concatenate([h0, h], axis=-1) if self.gcn else h0
        # §3.3: LSTM over each path's triples [c_t; r_t; c_{t+1}].
        path_nodes, relations = graph["path_nodes"], graph["path_relations"]
        concepts = _gather_rows(nodes, path_nodes)  # [R, M, K, H+1, d]
        hops = ops.shape(relations)[-1]
        relation_vectors = self.relation_embedding(ops.maximum(relations, 0))
        triples = ops.concatenate([concepts[..., :hops, :], relation_vectors,
                                   concepts[..., 1:, :]], axis=-1)
        shape = ops.shape(relations)
        flat = ops.reshape(triples, (-1, hops, ops.shape(triples)[-1]))
        hop_mask = ops.reshape(relations >= 0, (-1, hops))
        paths = self.path_lstm(flat, mask=hop_mask, training=training)
        path_mask = path_nodes[..., 0] >= 0
        paths = ops.reshape(paths, (shape[0], shape[1], shape[2], self.path_dim))
        paths = paths * ops.cast(path_mask, paths.dtype)[..., None]
        # §3.3: T_ij = MLP([s; c_i; c_j]) per concept pair, then the attention.
        pair_concepts = _gather_rows(nodes, graph["pair_nodes"])  # [R, M, 2, d]
        pair_concepts = ops.reshape(pair_concepts, (shape[0], shape[1], -1))
        context = ops.broadcast_to(statement[:, None, :],
                                   (shape[0], shape[1], ops.shape(statement)[-1]))
        pairs = self.pair_mlp(ops.concatenate([context, pair_concepts], axis=-1))
        g = self.attention(statement, pairs, paths, path_mask)
        return self.output_dropout(g, training=training)

    def compute_output_shape(self, statement_shape, graph_shape=None):
        return (statement_shape[0], self.path_dim + self.pair_dim)

    def get_config(self):
        config = super().get_config()
        config.update({"num_concepts": self.num_concepts, "num_relations": self.num_relations,
                       "concept_dim": self.concept_dim, "graph_dim": self.graph_dim,
                       "gcn_layers": self.gcn_layers, "path_dim": self.path_dim,
                       "pair_dim": self.pair_dim, "dropout": self.dropout})
        return config


__all__ = ["KagNetGraphEncoder"]
