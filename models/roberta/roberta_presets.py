"""RoBERTa sizes as `RobertaBackbone` constructor kwargs.

base / large: BERT's sizes, which RoBERTa keeps (Liu et al. 2019 §4 ablations on BERT_BASE,
L=12 H=768 A=12; §5 RoBERTa on BERT_LARGE, L=24 H=1024 A=16, 355M parameters; Appendix
Table 9 lists both), with the 50K byte-level BPE vocabulary of §4.4 (50265 ids in the
released models), at most 512 tokens (§3.1) and LayerNorm epsilon 1e-5 (released models). tiny: a 2-layer, H=128 model for tests and
demos (the size of BERT-tiny, Turc et al. 2019). Feed-forward size is 4H throughout.
"""


def _roberta(num_layers, hidden_dim, num_heads):
    return {
        "vocabulary_size": 50265,
        "num_layers": num_layers,
        "num_heads": num_heads,
        "hidden_dim": hidden_dim,
        "intermediate_dim": 4 * hidden_dim,
        "dropout": 0.1,
        "max_sequence_length": 512,
        "layer_norm_epsilon": 1e-5,
    }


ROBERTA_PRESETS = {
    "tiny": _roberta(2, 128, 2),
    "base": _roberta(12, 768, 12),
    "large": _roberta(24, 1024, 16),
}
