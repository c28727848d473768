"""Quaternion algebra for the Quaternion Transformer (Tay et al. 2019, "Lightweight and
Efficient Neural Natural Language Processing with Quaternion Networks", ACL: "Hamilton
Product").

A quaternion Q = r + x i + y j + z k (i^2 = j^2 = k^2 = ijk = -1). A vector of n
quaternions is stored as one real vector of 4n numbers laid out by component,
``[r (n) | x (n) | y (n) | z (n)]`` (the layout of the paper's reference code and of
Parcollet et al. 2019); a tensor's last axis is split into these four blocks.

The Hamilton product (Tay et al., "Hamilton Product"):

    W ⊗ Q = (W_r r - W_x x - W_y y - W_z z)
          + (W_x r + W_r x + W_y z - W_z y) i
          + (W_y r + W_z x + W_r y - W_x z) j
          + (W_z r - W_y x + W_x y + W_r z) k

is bilinear, so it is written once as structure constants: component ``o`` of ``P ⊗ Q`` is
``sum_{c,e} HAMILTON[o, c, e] * P_c * Q_e``. The quaternion linear layer
(`hamilton_matrix`) and the quaternion attention scores (`hamilton_scores`) both contract
with this one table. keras-nlp has no quaternion operations; these are written here.
"""

import numpy as np
from keras import ops

# HAMILTON[o, c, e]: the sign with which P_c * Q_e enters component o (0 = r, 1 = i, 2 = j,
# 3 = k) of P ⊗ Q; every (c, e) pair enters exactly one component.
_TERMS = {
    0: ((0, 0, 1), (1, 1, -1), (2, 2, -1), (3, 3, -1)),
    1: ((0, 1, 1), (1, 0, 1), (2, 3, 1), (3, 2, -1)),
    2: ((0, 2, 1), (1, 3, -1), (2, 0, 1), (3, 1, 1)),
    3: ((0, 3, 1), (1, 2, 1), (2, 1, -1), (3, 0, 1)),
}
HAMILTON = np.zeros((4, 4, 4), dtype="float32")
for _component, _terms in _TERMS.items():
    for _c, _e, _sign in _terms:
        HAMILTON[_component, _c, _e] = _sign


def check_quaternion_width(name: str, width) -> None:
    """Raises unless ``width`` real units hold whole quaternions (a multiple of 4)."""
    if not isinstance(width, int) or width < 4 or width % 4:
        raise ValueError(f"{name} must be a positive multiple of 4 (a whole number of "
                         f"quaternions, r|x|y|z), got {width!r}")


def hamilton_matrix(kernel):
    """The real [4n, 4m] matrix M of the quaternion weight W = W_r + W_x i + W_y j + W_z k
    (``kernel`` [4, n, m]: the four real component matrices), such that for inputs laid out
    ``[r | x | y | z]`` (rows, [..., 4n]) ``inputs @ M`` is W ⊗ inputs laid out the same way
    ([..., 4m]).

    Block (e, o) of M (input component e, output component o) is ``sum_c HAMILTON[o, c, e]
    W_c``: M has the Hamilton sign pattern of Tay et al. 2019 (transposed for row
    vectors). M holds 16 blocks but only 4 n m free numbers: 1/4 of a real [4n, 4m] layer.
    """
    table = ops.convert_to_tensor(HAMILTON, dtype=kernel.dtype)
    blocks = ops.einsum("oce,cnm->enom", table, kernel)  # [4, n, 4, m]
    n, m = ops.shape(kernel)[1], ops.shape(kernel)[2]
    return ops.reshape(blocks, (4 * n, 4 * m))


def hamilton_scores(query, key):
    """The quaternion attention scores of Tay et al. 2019 ("Quaternion Attention"):
    for each query position t and key position s of each head, the Hamilton product of the
    query and key quaternion vectors summed over their quaternion units,

        S(t, s) = sum_d q_t,d ⊗ k_s,d   (a quaternion: four real scores),

    i.e. S_r = q_r.k_r - q_x.k_x - q_y.k_y - q_z.k_z, S_i = q_r.k_x + q_x.k_r + q_y.k_z -
    q_z.k_y, and so on.

    Args:
        query: [B, T, N, 4, h] (N heads of h quaternions each, components on axis 3).
        key: [B, S, N, 4, h].

    Returns:
        [B, N, 4, T, S]: the r, i, j and k score matrices of each head.
    """
    # S_o = sum_{c,e} HAMILTON[o, c, e] q_c . k_e = sum_e (sum_c HAMILTON[o, c, e] q_c) . k_e:
    # four signed, component-permuted copies of the query, each dotted with the whole key
    # (4x the cost of a real score, no [T, S] matrix per component pair).
    table = ops.convert_to_tensor(HAMILTON, dtype=query.dtype)
    mixed = ops.einsum("oce,btncd->btnoed", table, query)  # [B, T, N, 4 (o), 4 (e), h]
    shape = ops.shape(mixed)
    mixed = ops.reshape(mixed, (shape[0], shape[1], shape[2], 4, 4 * query.shape[-1]))
    key_shape = ops.shape(key)
    key = ops.reshape(key, (key_shape[0], key_shape[1], key_shape[2], 4 * key.shape[-1]))
    return ops.einsum("btnod,bsnd->bnots", mixed, key)


__all__ = ["HAMILTON", "check_quaternion_width", "hamilton_matrix", "hamilton_scores"]
