"""Sparse attention (Child et al. 2019, "Generating Long Sequences with Sparse
Transformers"): the factorised patterns as masks (`sparse_patterns`), their computation
without the T x T score matrix (`sparse_kernels`), a Keras attention layer
(`SparseMultiHeadAttention`) and a decoder block using it (`SparseTransformerDecoder`).
keras-nlp has no sparse attention; see each module for what it adds."""

from lmfactory.models.attention.sparse_kernels import (
    blocked_sparse_attention,
    masked_dense_attention,
)
from lmfactory.models.attention.sparse_multi_head_attention import SparseMultiHeadAttention
from lmfactory.models.attention.sparse_patterns import (
    COMBINATIONS,
    COMPONENTS,
    PATTERNS,
    causal_sparse_mask,
    interleaved_components,
    pattern_components,
    sparse_attention_mask,
)
from lmfactory.models.attention.sparse_transformer_decoder import SparseTransformerDecoder

__all__ = [
    "COMBINATIONS",
    "COMPONENTS",
    "PATTERNS",
    "SparseMultiHeadAttention",
    "SparseTransformerDecoder",
    "blocked_sparse_attention",
    "causal_sparse_mask",
    "interleaved_components",
    "masked_dense_attention",
    "pattern_components",
    "sparse_attention_mask",
]
