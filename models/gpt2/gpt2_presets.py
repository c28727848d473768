"""GPT-2 sizes as `GPT2Backbone` constructor kwargs.

124M / 355M / 774M / 1558M: the four models of Radford et al. 2019 Table 2 (layers 12 / 24 /
36 / 48, d_model 768 / 1024 / 1280 / 1600; the released checkpoints use 12 / 16 / 20 / 25
heads of size 64), context 1024, vocabulary 50257, MLP size 4 * d_model. The counts in the
names are those of the released weights (the paper's table lists 117M / 345M / 762M /
1542M). "tiny" is a 2-layer model for tests and smoke runs.
"""


def _gpt2(num_layers, hidden_dim, num_heads, max_sequence_length=1024):
    return {
        "vocabulary_size": 50257,
        "num_layers": num_layers,
        "num_heads": num_heads,
        "hidden_dim": hidden_dim,
        "intermediate_dim": 4 * hidden_dim,
        "dropout": 0.1,
        "max_sequence_length": max_sequence_length,
        "layer_norm_epsilon": 1e-5,
    }


GPT2_PRESETS = {
    "tiny": _gpt2(2, 128, 2, max_sequence_length=512),
    "124M": _gpt2(12, 768, 12),
    "355M": _gpt2(24, 1024, 16),
    "774M": _gpt2(36, 1280, 20),
    "1558M": _gpt2(48, 1600, 25),
}
