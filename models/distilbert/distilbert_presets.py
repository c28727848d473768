"""DistilBERT sizes as `DistilBertBackbone` constructor kwargs.

base: the released model (Sanh et al. 2019 §3-4): BERT-base's width (H=768, 12 heads,
feed-forward 3072) with 6 of its 12 layers, learned positions, 66,362,880 parameters with the
30522-token uncased WordPiece vocabulary. tiny: half of BERT's "mini" preset (2 of its 4
layers at H=256, 4 heads), so it can be initialised from a BERT-mini teacher; for tests and
the demo.
"""


def _distilbert(num_layers, hidden_dim, num_heads):
    return {
        "vocabulary_size": 30522,
        "num_layers": num_layers,
        "num_heads": num_heads,
        "hidden_dim": hidden_dim,
        "intermediate_dim": 4 * hidden_dim,
        "dropout": 0.1,
        "max_sequence_length": 512,
        "sinusoidal_positions": False,
    }


DISTILBERT_PRESETS = {
    "tiny": _distilbert(2, 256, 4),
    "base": _distilbert(6, 768, 12),
}
