"""Transformer sizes as `TransformerBackbone` constructor kwargs.

"base" and "big": Table 3 of Vaswani et al. 2017 (§6.2): N = 6 encoder and 6 decoder
layers, d_model = 512 / 1024, d_ff = 2048 / 4096, h = 8 / 16 heads, P_drop = 0.1 / 0.3
(0.3 for the EN-DE big model, §6.1), label smoothing 0.1 (the head's). The vocabulary is
the paper's WMT 2014 English-German one: a shared source-target byte-pair encoding of about
37,000 tokens (§5.1), one matrix for both embeddings and the pre-softmax projection (§3.4).
With it, "base" has 63.1M parameters and "big" 214.2M (tests/test_transformer.py); the
paper's Table 3 lists 65M and 213M (the paper does not say how it counted). The pipeline sets ``vocabulary_size`` from the learned
joint vocabulary.

"small": the same post-LN network at a size that trains on a CPU in minutes (Multi30k, a
joint 8,000-piece vocabulary): 3 + 3 layers, d_model 256, d_ff 1024, 4 heads.
"""

# The paper's WMT 2014 EN-DE shared BPE vocabulary (§5.1: "about 37000 tokens").
PAPER_VOCABULARY_SIZE = 37000

TRANSFORMER_PRESETS = {
    "small": {
        "vocabulary_size": 8000,
        "num_layers": 3,
        "num_heads": 4,
        "hidden_dim": 256,
        "intermediate_dim": 1024,
        "dropout": 0.1,
        "max_sequence_length": 128,
    },
    "base": {
        "vocabulary_size": PAPER_VOCABULARY_SIZE,
        "num_layers": 6,
        "num_heads": 8,
        "hidden_dim": 512,
        "intermediate_dim": 2048,
        "dropout": 0.1,
        "max_sequence_length": 256,
    },
    "big": {
        "vocabulary_size": PAPER_VOCABULARY_SIZE,
        "num_layers": 6,
        "num_heads": 16,
        "hidden_dim": 1024,
        "intermediate_dim": 4096,
        "dropout": 0.3,
        "max_sequence_length": 256,
    },
}
