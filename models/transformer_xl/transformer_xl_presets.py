"""Transformer-XL sizes as `TransformerXLBackbone` constructor kwargs (Dai et al. 2019).

"wikitext103_base": the paper's WikiText-103 base model (Table 1, 151M parameters; the
reference's run_wt103_base.sh): 16 layers, d_model 410, 10 heads of 41, d_inner 2100,
dropout 0.1, dropatt 0, segment (tgt_len) 150 with mem_len 150, adaptive input and softmax
with cutoffs [20000, 40000, 200000] and div_val 1 over the 267,735-word vocabulary, tied
output weights (no projections: d_embed = d_model).

"wikitext103_large": the paper's large model (Table 1, 257M; the published checkpoint
transfo-xl-wt103): 18 layers, d_model 1024, 16 heads of 64, d_inner 4096, d_embed 1024,
div_val 4, mem_len 1600 and clamp_len 1000 (its evaluation settings), same_length. Built
from this config, Hugging Face's TransfoXLLMHeadModel counts 285,205,322 parameters, not
the 257M of Table 1; the base preset's count matches the paper (151,119,838).

"small": WikiText-2-sized (33,278 words, cutoffs [2000, 10000]) for CPU runs of minutes.
"tiny": for tests and smoke recipes. The segment length is not a backbone argument: it is
the data's (``max_seq_length`` of the ordered-stream records).
"""


def _xl(vocabulary_size, num_layers, hidden_dim, num_heads, intermediate_dim, head_dim=None,
        embedding_dim=None, cutoffs=(), div_val=1, mem_len=150, clamp_len=0,
        same_length=False, dropout=0.1, attention_dropout=0.0, max_sequence_length=512,
        tie_projections=None):
    return {
        "vocabulary_size": vocabulary_size,
        "num_layers": num_layers,
        "num_heads": num_heads,
        "hidden_dim": hidden_dim,
        "head_dim": head_dim,
        "intermediate_dim": intermediate_dim,
        "embedding_dim": embedding_dim if embedding_dim is not None else hidden_dim,
        "cutoffs": list(cutoffs),
        "div_val": div_val,
        "mem_len": mem_len,
        "clamp_len": clamp_len,
        "same_length": same_length,
        "dropout": dropout,
        "attention_dropout": attention_dropout,
        "tie_projections": tie_projections,
        "max_sequence_length": max_sequence_length,
    }


TRANSFORMER_XL_PRESETS = {
    "tiny": _xl(1000, 2, 32, 4, 64, cutoffs=[200, 500], mem_len=32,
                max_sequence_length=128),
    "small": _xl(33278, 4, 128, 4, 512, cutoffs=[2000, 10000], mem_len=64),
    "wikitext103_base": _xl(267735, 16, 410, 10, 2100, head_dim=41,
                            cutoffs=[20000, 40000, 200000], mem_len=150),
    "wikitext103_large": _xl(267735, 18, 1024, 16, 4096, head_dim=64,
                             cutoffs=[20000, 40000, 200000], div_val=4, mem_len=1600,
                             clamp_len=1000, same_length=True, dropout=0.2,
                             attention_dropout=0.2, tie_projections=[False, True, True, True]),
}
