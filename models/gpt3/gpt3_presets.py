"""GPT-3 sizes (Brown et al. 2020, Table 2.1) as `GPT3Backbone` constructor kwargs, and
each size's training settings as metadata.

Table 2.1 (n_params, n_layers, d_model, n_heads, d_head, batch size in tokens, learning
rate); every model has a context window of n_ctx = 2048 tokens (§2.1), d_ff = 4 * d_model
(§2.1), and GPT-2's byte-level BPE vocabulary of 50257 tokens:

    GPT-3 Small    125M  12    768  12   64  0.5M  6.0e-4
    GPT-3 Medium   350M  24   1024  16   64  0.5M  3.0e-4
    GPT-3 Large    760M  24   1536  16   96  0.5M  2.5e-4
    GPT-3 XL       1.3B  24   2048  24  128    1M  2.0e-4
    GPT-3 2.7B     2.7B  32   2560  32   80    1M  1.6e-4
    GPT-3 6.7B     6.7B  32   4096  32  128    2M  1.2e-4
    GPT-3 13B       13B  40   5140  40  128    2M  1.0e-4
    GPT-3 175B     175B  96  12288  96  128  3.2M  0.6e-4

The presets take the rows literally, `head_dim` included. Two rows are not self-consistent
(n_heads * d_head != d_model): XL (24 * 128 = 3072 attention width for d_model 2048, which
makes 1.52B parameters rather than 1.3B; with 16 heads of 128, or 24 heads of d_model / 24,
it would have 1.32B) and 13B (40 * 128 = 5120 for d_model 5140, 12.94B parameters either
way). `GPT3Backbone` allows an attention width different from d_model, so both build as
written; override `num_heads=16` for a 1.3B XL.

The paper does not give the width of the locally banded attention layers; the presets use
a band of 256 positions (1/8 of the context), an assumption. "tiny" is a 2-layer model for
tests and smoke runs.

`GPT3_TRAINING` holds each preset's Table 2.1 batch size (tokens) and learning rate, and
`GPT3_OPTIMIZATION` the settings Appendix B gives for all sizes, for recipes to read.
"""

import copy

GPT3_CONTEXT = 2048
GPT3_VOCABULARY = 50257
DEFAULT_ATTENTION_BAND = 256


def _gpt3(num_layers, hidden_dim, num_heads, head_dim, max_sequence_length=GPT3_CONTEXT,
          attention_band=DEFAULT_ATTENTION_BAND):
    return {
        "vocabulary_size": GPT3_VOCABULARY,
        "num_layers": num_layers,
        "num_heads": num_heads,
        "hidden_dim": hidden_dim,
        "intermediate_dim": 4 * hidden_dim,
        "head_dim": head_dim,
        "attention_band": attention_band,
        "dropout": 0.1,
        "max_sequence_length": max_sequence_length,
        "layer_norm_epsilon": 1e-5,
    }


# preset -> (paper name, n_params as named, n_layers, d_model, n_heads, d_head,
#            batch size in tokens, learning rate)
GPT3_TABLE = {
    "125M": ("GPT-3 Small", "125M", 12, 768, 12, 64, 500_000, 6.0e-4),
    "350M": ("GPT-3 Medium", "350M", 24, 1024, 16, 64, 500_000, 3.0e-4),
    "760M": ("GPT-3 Large", "760M", 24, 1536, 16, 96, 500_000, 2.5e-4),
    "1.3B": ("GPT-3 XL", "1.3B", 24, 2048, 24, 128, 1_000_000, 2.0e-4),
    "2.7B": ("GPT-3 2.7B", "2.7B", 32, 2560, 32, 80, 1_000_000, 1.6e-4),
    "6.7B": ("GPT-3 6.7B", "6.7B", 32, 4096, 32, 128, 2_000_000, 1.2e-4),
    "13B": ("GPT-3 13B", "13B", 40, 5140, 40, 128, 2_000_000, 1.0e-4),
    "175B": ("GPT-3 175B", "175B", 96, 12288, 96, 128, 3_200_000, 0.6e-4),
}

GPT3_PRESETS = {
    "tiny": _gpt3(2, 128, 2, None, max_sequence_length=512, attention_band=32),
    **{preset: _gpt3(*row[2:6]) for preset, row in GPT3_TABLE.items()},
}

GPT3_TRAINING = {
    "tiny": {"paper_name": None, "batch_size_tokens": 16 * 128, "learning_rate": 1e-3},
    **{
        preset: {
            "paper_name": row[0],
            "batch_size_tokens": row[6],
            "learning_rate": row[7],
        }
        for preset, row in GPT3_TABLE.items()
    },
}

# Appendix B, the same for every size: Adam with beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
# global gradient-norm clipping at 1.0; cosine decay of the learning rate to 10% of its
# value over 260B tokens, after a linear warmup over the first 375M tokens; weight decay
# 0.1; the batch size ramps up linearly from 32k tokens over the first 4-12B tokens;
# sequences always fill the 2048-token context.
GPT3_OPTIMIZATION = {
    "adam_beta_1": 0.9,
    "adam_beta_2": 0.95,
    "adam_epsilon": 1e-8,
    "global_clipnorm": 1.0,
    "weight_decay": 0.1,
    "warmup_tokens": 375_000_000,
    "decay_tokens": 260_000_000_000,
    "final_learning_rate_fraction": 0.1,
    "sequence_length": GPT3_CONTEXT,
}


def training_settings(preset):
    """Table 2.1's batch size (tokens) and learning rate of `preset`, plus Appendix B's
    optimiser settings, as one dict."""
    if preset not in GPT3_TRAINING:
        raise ValueError(f"Unknown GPT-3 preset {preset!r}; presets: {sorted(GPT3_TRAINING)}")
    return {**copy.deepcopy(GPT3_OPTIMIZATION), **GPT3_TRAINING[preset]}


def parameter_count(config):
    """The number of weights of a `GPT3Backbone` built from `config` (constructor kwargs),
    computed without building it: token and position embeddings, per block two LayerNorms,
    Q/K/V/output projections (width num_heads * head_dim) and the MLP, and the final
    LayerNorm. The output layer is the tied token embedding."""
    d = config["hidden_dim"]
    width = config["num_heads"] * (config.get("head_dim") or d // config["num_heads"])
    ff = config["intermediate_dim"]
    block = (3 * (d * width + width) + (width * d + d)  # attention
             + (d * ff + ff) + (ff * d + d)  # MLP
             + 2 * 2 * d)  # two LayerNorms
    return (config["vocabulary_size"] * d + config["max_sequence_length"] * d
            + config["num_layers"] * block + 2 * d)
