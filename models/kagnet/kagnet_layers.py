"""KagNet's graph layers (Lin et al. 2019 §3.2-3.3): the schema-graph GCN and the
hierarchical path attention. keras-nlp has neither (it has no graph layers), so both are
written here; the path encoder itself is a Keras ``LSTM``."""

from __future__ import annotations

import keras
from keras import ops

_NEGATIVE = -1e9


def masked_softmax(logits, mask, axis=-1):
    """Softmax over the entries where ``mask`` is true; all zeros where none is (an empty
    set of paths or of concept pairs gives weights of 0, never NaN)."""
    mask = ops.cast(mask, logits.dtype)
    weights = ops.softmax(logits + (1.0 - mask) * _NEGATIVE, axis=axis)
    return weights * mask * ops.max(mask, axis=axis, keepdims=True)


@keras.saving.register_keras_serializable(package="lmfactory")
class SchemaGraphConvolution(keras.layers.Layer):
    """One GCN layer over a schema graph (§3.2, after Kipf & Welling 2017):
    ``h_i' = sigma(W_self h_i + sum_{j in N_i} (1 / |N_i|) W h_j)``, with the graph's
    edges taken as undirected.

    Inputs: ``nodes`` [R, N, d] node vectors, ``adjacency`` [R, N, N] (0/1, symmetric),
    ``node_mask`` [R, N]. Output [R, N, units] (0 on padded nodes).

    Args:
        units: output width.
        activation: sigma (ReLU by default).
    """

    def __init__(self, units, activation="relu", **kwargs):
        super().__init__(**kwargs)
        self.units = int(units)
        self.activation = keras.activations.get(activation)
        init = keras.initializers.GlorotUniform()
        self.self_dense = keras.layers.Dense(self.units, kernel_initializer=init,
                                             dtype=self.dtype_policy, name="self")
        self.neighbour_dense = keras.layers.Dense(self.units, use_bias=False,
                                                  kernel_initializer=init,
                                                  dtype=self.dtype_policy, name="neighbour")

    def build(self, nodes_shape, adjacency_shape=None, node_mask_shape=None):
        self.self_dense.build(nodes_shape)
        self.neighbour_dense.build(nodes_shape)
        self.built = True

    def call(self, nodes, adjacency, node_mask):
        adjacency = ops.cast(adjacency, nodes.dtype)
        degree = ops.maximum(ops.sum(adjacency, axis=-1, keepdims=True), 1.0)
        neighbours = ops.matmul(adjacency / degree, self.neighbour_dense(nodes))
        outputs = self.activation(self.self_dense(nodes) + neighbours)
        return outputs * ops.cast(node_mask, outputs.dtype)[..., None]

    def compute_output_shape(self, nodes_shape, *args):
        return tuple(nodes_shape[:-1]) + (self.units,)

    def get_config(self):
        config = super().get_config()
        config.update({"units": self.units,
                       "activation": keras.activations.serialize(self.activation)})
        return config


@keras.saving.register_keras_serializable(package="lmfactory")
class HierarchicalPathAttention(keras.layers.Layer):
    """§3.3 "hierarchical path attention".

    Path level, within concept pair (i, j): ``alpha_k = softmax_k(T_ij W_1 R_ij[k])`` and
    ``R^_ij = sum_k alpha_k R_ij[k]``; pair level: ``beta_ij = softmax_ij(s W_2 R^_ij)``
    and the graph vector ``g = sum_ij beta_ij [R^_ij ; T_ij]``. ``T_ij`` is the pair's
    vector (§3.3: an MLP of the statement vector s and the pair's concept vectors), ``R``
    the LSTM path vectors. Paths that do not exist are masked; a pair without paths gets
    no pair-level weight, and a choice with no path at all gets g = 0.

    Inputs: ``statement`` [R, ds], ``pairs`` T [R, M, dt], ``paths`` [R, M, K, dp],
    ``path_mask`` [R, M, K]. Output: g [R, dp + dt].
    """

    def build(self, statement_shape, pairs_shape=None, paths_shape=None,
              path_mask_shape=None):
        init = keras.initializers.GlorotUniform()
        self.path_kernel = self.add_weight(name="w1", shape=(pairs_shape[-1], paths_shape[-1]),
                                           initializer=init)
        self.pair_kernel = self.add_weight(name="w2",
                                           shape=(statement_shape[-1], paths_shape[-1]),
                                           initializer=init)
        self.built = True

    def call(self, statement, pairs, paths, path_mask):
        path_mask = ops.cast(path_mask, paths.dtype)
        query = ops.einsum("rmt,tp->rmp", pairs, self.path_kernel)
        alpha = masked_softmax(ops.einsum("rmp,rmkp->rmk", query, paths), path_mask)
        pair_paths = ops.einsum("rmk,rmkp->rmp", alpha, paths)
        pair_mask = ops.max(path_mask, axis=-1)
        pair_query = ops.matmul(statement, self.pair_kernel)
        beta = masked_softmax(ops.einsum("rp,rmp->rm", pair_query, pair_paths), pair_mask)
        return ops.einsum("rm,rmd->rd", beta, ops.concatenate([pair_paths, pairs], axis=-1))

    def compute_output_shape(self, statement_shape, pairs_shape, paths_shape,
                             path_mask_shape):
        return (statement_shape[0], paths_shape[-1] + pairs_shape[-1])


__all__ = ["HierarchicalPathAttention", "SchemaGraphConvolution", "masked_softmax"]
