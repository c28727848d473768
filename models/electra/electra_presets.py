"""ELECTRA sizes as `ElectraBackbone` (discriminator) constructor kwargs.

small / base / large: Clark et al. 2020, Table 6 (pre-training hyperparameters): layers
12 / 12 / 24, hidden size 256 / 768 / 1024, FFN inner size 1024 / 3072 / 4096, attention
heads 4 / 12 / 16 (head size 64), embedding size 128 / 768 / 1024, vocabulary 30522 (BERT's
uncased WordPiece), 512 positions, dropout 0.1. tiny: a 2-layer model for tests and demos
whose embedding size differs from its hidden size, like ELECTRA-Small.

The generator is not part of the backbone: its size is the pretrainer's `generator_size`,
a multiplier of the discriminator's hidden size, FFN size and number of heads (Table 6
"Generator Size"): 1/4 for small and large, 1/3 for base (`ELECTRA_GENERATOR_SIZES`).
"""


def _electra(num_layers, hidden_dim, num_heads, embedding_dim):
    return {
        "vocabulary_size": 30522,
        "num_layers": num_layers,
        "num_heads": num_heads,
        "hidden_dim": hidden_dim,
        "intermediate_dim": 4 * hidden_dim,
        "embedding_dim": embedding_dim,
        "dropout": 0.1,
        "max_sequence_length": 512,
        "num_segments": 2,
    }


ELECTRA_PRESETS = {
    "tiny": _electra(2, 128, 2, 64),
    "small": _electra(12, 256, 4, 128),
    "base": _electra(12, 768, 12, 768),
    "large": _electra(24, 1024, 16, 1024),
}

# Table 6 "Generator Size (multiplier for hidden-size, FFN-size, and num-attention-heads)".
ELECTRA_GENERATOR_SIZES = {"tiny": 1 / 4, "small": 1 / 4, "base": 1 / 3, "large": 1 / 4}

_SHAPE_KEYS = ("num_layers", "hidden_dim", "num_heads", "intermediate_dim", "embedding_dim")


def default_generator_size(backbone) -> float:
    """Table 6's generator multiplier for a discriminator of a preset's shape (vocabulary
    and sequence length aside); 1/4 for other shapes (§3.2: generators 1/4-1/2 the size of
    the discriminator work best)."""
    config = backbone.get_config()
    for preset, kwargs in ELECTRA_PRESETS.items():
        if all(config.get(key) == kwargs[key] for key in _SHAPE_KEYS):
            return ELECTRA_GENERATOR_SIZES[preset]
    return 1 / 4
