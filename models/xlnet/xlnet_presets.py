"""XLNet sizes as `XLNetBackbone` constructor kwargs.

base / large: Yang et al. 2019 §3.1 ("XLNet-Large has the same architecture
hyperparameters as BERT-Large": L=24, H=1024, A=16; XLNet-Base as BERT-Base: L=12, H=768,
A=12), feed-forward 4H, the released 32,000-piece SentencePiece vocabulary, dropout 0.1,
GELU. tiny: a small size for demos and recipes.
"""


def _xlnet(num_layers, hidden_dim, num_heads, vocabulary_size=32000):
    return {
        "vocabulary_size": vocabulary_size,
        "num_layers": num_layers,
        "num_heads": num_heads,
        "hidden_dim": hidden_dim,
        "intermediate_dim": 4 * hidden_dim,
        "dropout": 0.1,
    }


XLNET_PRESETS = {
    "tiny": _xlnet(2, 128, 2, vocabulary_size=8000),
    "base": _xlnet(12, 768, 12),
    "large": _xlnet(24, 1024, 16),
}
