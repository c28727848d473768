"""T5 sizes as `T5Backbone` constructor kwargs.

"small" / "base": T5 v1.0 (Raffel et al. 2020, §3.7 "Scaling" and Appendix / the released
checkpoints' configs): Base is "BERT-base-sized": 12 blocks per stack, d_model = 768,
d_ff = 3072, 12 heads of d_kv = 64 (about 220M parameters); Small has 6 blocks per stack,
d_model = 512, d_ff = 2048, 8 heads (about 60M). The released vocabulary holds 32,128 ids
(32,000 SentencePiece pieces, 100 sentinels, padding to a multiple of 128); ReLU
feed-forward, tied output layer rescaled by d_model^-0.5.

"v1_1_small": T5.1.1 small (google-research/text-to-text-transfer-transformer,
released_checkpoints.md): gated-GELU feed-forward, untied output layer, 8 blocks per
stack, d_model = 512, d_ff = 1024, 6 heads of d_kv = 64 (so the attention's inner width
384 differs from d_model), no dropout in pre-training.

"tiny": the v1.0 network at a size that trains on a CPU in minutes (recipes, DAG tests).
The pipeline sets ``vocabulary_size`` from the learned vocabulary.
"""

T5_PRESETS = {
    "tiny": {
        "vocabulary_size": 8000,
        "num_layers": 2,
        "num_heads": 4,
        "hidden_dim": 64,
        "intermediate_dim": 256,
        "max_sequence_length": 128,
    },
    "small": {
        "vocabulary_size": 32128,
        "num_layers": 6,
        "num_heads": 8,
        "hidden_dim": 512,
        "intermediate_dim": 2048,
        "head_dim": 64,
        "feed_forward": "relu",
        "tie_embeddings": True,
        "dropout": 0.1,
    },
    "base": {
        "vocabulary_size": 32128,
        "num_layers": 12,
        "num_heads": 12,
        "hidden_dim": 768,
        "intermediate_dim": 3072,
        "head_dim": 64,
        "feed_forward": "relu",
        "tie_embeddings": True,
        "dropout": 0.1,
    },
    "v1_1_small": {
        "vocabulary_size": 32128,
        "num_layers": 8,
        "num_heads": 6,
        "hidden_dim": 512,
        "intermediate_dim": 1024,
        "head_dim": 64,
        "feed_forward": "gated-gelu",
        "tie_embeddings": False,
        "dropout": 0.0,
    },
}
