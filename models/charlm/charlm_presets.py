"""Character Transformer sizes as `CharTransformerBackbone` constructor kwargs.

T12 and T64: the 12- and 64-layer models of Al-Rfou et al. 2018 (§3): every layer of hidden
size 512, feed-forward size 2048 and 8 attention heads, a context of 512 characters, dropout
0.55. The vocabulary is the 256 byte values (`charlm_vocabulary`). The paper counts 44M
(T12) and 235M (T64) parameters, the training-only auxiliary classifiers included; built
here: 41,106,432 / 218,661,888 in the backbone (inference), 44,138,240 / 235,405,056 with
the classifiers of `CharTransformerLM`. The pipeline's "byte" tokenizer kind adds
`<|endoftext|>` as id 256 and builds the backbone with its 257 tokens (one more embedding
row, and one more output in each auxiliary classifier). "tiny" is a 2-layer model for tests
and smoke runs.
"""


def _charlm(num_layers, hidden_dim=512, num_heads=8, intermediate_dim=2048,
            max_sequence_length=512, dropout=0.55):
    return {
        "vocabulary_size": 256,
        "num_layers": num_layers,
        "num_heads": num_heads,
        "hidden_dim": hidden_dim,
        "intermediate_dim": intermediate_dim,
        "dropout": dropout,
        "max_sequence_length": max_sequence_length,
        "layer_norm_epsilon": 1e-6,
    }


CHARLM_PRESETS = {
    "tiny": _charlm(2, hidden_dim=64, num_heads=2, intermediate_dim=256,
                    max_sequence_length=128, dropout=0.1),
    "T12": _charlm(12),
    "T64": _charlm(64),
}
