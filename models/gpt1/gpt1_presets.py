"""GPT-1 sizes as `Gpt1Backbone` constructor kwargs.

"base" is the model of Radford et al. 2018 §4.1 "Model specifications": 12 decoder blocks,
768-dimensional states, 12 attention heads, 3072-dimensional feed-forward layers, learned
positions over a context of 512 tokens, and the released BPE vocabulary of 40,478 tokens
(40,000 merges). "tiny" is a 2-layer model for tests and smoke runs.
"""


def _gpt1(num_layers, hidden_dim, num_heads, vocabulary_size=40478):
    return {
        "vocabulary_size": vocabulary_size,
        "num_layers": num_layers,
        "num_heads": num_heads,
        "hidden_dim": hidden_dim,
        "intermediate_dim": 4 * hidden_dim,
        "dropout": 0.1,
        "max_sequence_length": 512,
        "layer_norm_epsilon": 1e-5,
    }


GPT1_PRESETS = {
    "tiny": _gpt1(2, 128, 2),
    "base": _gpt1(12, 768, 12),
}
