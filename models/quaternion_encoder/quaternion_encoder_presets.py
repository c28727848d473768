"""Quaternion Transformer encoder sizes as `QuaternionEncoderBackbone` constructor kwargs.

"small": a sentence classifier trained from scratch on a CPU (SST-2 with a joint 8,000-piece
WordPiece vocabulary): 2 post-LN blocks, d_model 128, 4 heads (head width 32 = 8
quaternions), d_ff 512. "base": the Transformer-base encoder sizes of Vaswani et al. 2017
(Table 3: 6 layers, d_model 512, 8 heads, d_ff 2048), at which Tay et al. 2019 compare the
real and quaternion Transformers. Every width is a multiple of 4 (whole quaternions).
"""

QUATERNION_ENCODER_PRESETS = {
    "small": {
        "vocabulary_size": 8000,
        "num_layers": 2,
        "num_heads": 4,
        "hidden_dim": 128,
        "intermediate_dim": 512,
        "dropout": 0.1,
        "max_sequence_length": 128,
        "quaternion": True,
    },
    "base": {
        "vocabulary_size": 30522,
        "num_layers": 6,
        "num_heads": 8,
        "hidden_dim": 512,
        "intermediate_dim": 2048,
        "dropout": 0.1,
        "max_sequence_length": 512,
        "quaternion": True,
    },
}
