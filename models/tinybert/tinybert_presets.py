"""TinyBERT sizes as `TinyBertBackbone` constructor kwargs (Jiao et al. 2020 §4.1).

4L-312: TinyBERT-4 (M=4, d'=312, d'_i=1200, h=12): 14,350,248 backbone parameters with the
30522-token vocabulary, 512 positions and 2 segments: embeddings 9,683,856 (token, position
and segment tables + LayerNorm), four blocks 4,568,736, pooler 97,656. The paper's "14.5M"
(Table 1) is within 1% of that; the paper does not say what it counts (the blocks and
embeddings without the pooler, plus the general-distillation projection W_h, 312 x 768 + 768,
give 14,492,976). 6L-768: TinyBERT-6 (M=6, d'=768, d'_i=3072, h=12), BERT-base's width with
half its layers: 66,955,008 parameters (the paper's "67.0M"). tiny: 2 layers at H=128 with 4
heads, for tests and the demo: a student of BERT's "mini" preset (4 layers, H=256, 4 heads;
the attention loss needs the teacher's head count), as TinyBERT-4 is of BERT-base.
"""


def _tinybert(num_layers, hidden_dim, num_heads, intermediate_dim):
    return {
        "vocabulary_size": 30522,
        "num_layers": num_layers,
        "num_heads": num_heads,
        "hidden_dim": hidden_dim,
        "intermediate_dim": intermediate_dim,
        "dropout": 0.1,
        "max_sequence_length": 512,
        "num_segments": 2,
    }


TINYBERT_PRESETS = {
    "tiny": _tinybert(2, 128, 4, 512),
    "4L-312": _tinybert(4, 312, 12, 1200),
    "6L-768": _tinybert(6, 768, 12, 3072),
}
