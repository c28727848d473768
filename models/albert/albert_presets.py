"""ALBERT sizes as `AlbertBackbone` constructor kwargs.

base / large / xlarge / xxlarge: Lan et al. 2020 Table 1 (L, H, E = 128, all-shared) with
§3.1's feed-forward size 4H, a 30000-piece SentencePiece vocabulary (§4.1) and 512
positions. Heads: §3.1 sets H/64 heads; the released checkpoints follow that except
xlarge, which has 16 heads (not 2048/64 = 32); the preset uses 16 so published xlarge
weights load into it. Dropout 0 as in the released v2 models (§4.9: removing dropout helps).
tiny: a small model for demos and tests (2 layers, H = 128, E = 64, 2 heads), not in the
paper.
"""


def _albert(num_layers, hidden_dim, num_heads, embedding_dim=128):
    return {
        "vocabulary_size": 30000,
        "num_layers": num_layers,
        "num_heads": num_heads,
        "hidden_dim": hidden_dim,
        "embedding_dim": embedding_dim,
        "intermediate_dim": 4 * hidden_dim,
        "sharing": "all-shared",
        "activation": "gelu_approximate",
        "dropout": 0.0,
        "max_sequence_length": 512,
        "num_segments": 2,
    }


ALBERT_PRESETS = {
    "tiny": _albert(2, 128, 2, embedding_dim=64),
    "base": _albert(12, 768, 12),
    "large": _albert(24, 1024, 16),
    "xlarge": _albert(24, 2048, 16),
    "xxlarge": _albert(12, 4096, 64),
}
