"""Reformer sizes as `ReformerBackbone` constructor kwargs.

* "enwik8": the paper's large enwik8 model (Kitaev et al. 2020 §5, "Large Reformer
  models": 12 layers, d_model 1024, d_ff 4096, 8 heads, sequences of 64K bytes) with the
  reference's LSH settings for such lengths (chunks of 256, 4 hashes, 2 * length / chunk
  = 512 buckets, 128-wide heads), all layers LSH, byte vocabulary 256 + 2, axial positions
  128 x 512 = 65536.
* "crime_and_punishment": the reference's character-level model of the novel (6 layers
  alternating local / LSH, d_model 256, 2 heads of 64, d_ff 512, chunks of 64, axial
  positions 512 x 1024 = 524288, vocabulary 320). The published checkpoint factorises its
  buckets ([64, 128]); this implementation hashes into a single factor, 128 here.
* "small": 4 layers (local, lsh), d_model 128 at 1024 positions, for recipes and demos.
"""


def _reformer(vocabulary_size, num_layers, hidden_dim, num_heads, head_dim, intermediate_dim,
              attention_layers, max_sequence_length, axial_pos_shape, axial_pos_embds_dim,
              chunk, num_hashes, num_buckets, dropout=0.05):
    return {
        "vocabulary_size": vocabulary_size, "num_layers": num_layers,
        "num_heads": num_heads, "hidden_dim": hidden_dim, "head_dim": head_dim,
        "intermediate_dim": intermediate_dim, "attention_layers": attention_layers,
        "max_sequence_length": max_sequence_length, "axial_pos_shape": axial_pos_shape,
        "axial_pos_embds_dim": axial_pos_embds_dim, "lsh_attn_chunk_length": chunk,
        "local_attn_chunk_length": chunk, "num_hashes": num_hashes,
        "num_buckets": num_buckets, "dropout": dropout,
    }


REFORMER_PRESETS = {
    "small": _reformer(258, 4, 128, 2, 64, 256, ["local", "lsh"], 1024, [32, 32], [64, 64],
                       64, 2, 16),
    "crime_and_punishment": _reformer(320, 6, 256, 2, 64, 512, ["local", "lsh"], 524288,
                                      [512, 1024], [64, 192], 64, 1, 128),
    "enwik8": _reformer(258, 12, 1024, 8, 128, 4096, ["lsh"], 65536, [128, 512],
                        [256, 768], 256, 4, 512, dropout=0.1),
}
