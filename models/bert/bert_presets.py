"""BERT sizes as `BertBackbone` constructor kwargs.

base / large: Devlin et al. 2019 §3 (BERT_BASE L=12 H=768 A=12, BERT_LARGE L=24 H=1024
A=16). tiny / mini / small / medium: the compact models of Turc et al. 2019 ("Well-Read
Students Learn Better", released with google-research/bert). Feed-forward size is 4H and
head size H/A throughout.
"""


def _bert(num_layers, hidden_dim, num_heads):
    return {
        "vocabulary_size": 30522,
        "num_layers": num_layers,
        "num_heads": num_heads,
        "hidden_dim": hidden_dim,
        "intermediate_dim": 4 * hidden_dim,
        "dropout": 0.1,
        "max_sequence_length": 512,
        "num_segments": 2,
    }


BERT_PRESETS = {
    "tiny": _bert(2, 128, 2),
    "mini": _bert(4, 256, 4),
    "small": _bert(4, 512, 8),
    "medium": _bert(8, 512, 8),
    "base": _bert(12, 768, 12),
    "large": _bert(24, 1024, 16),
}
