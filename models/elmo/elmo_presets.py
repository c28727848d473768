"""ELMo presets: constructor arguments of `ElmoBackbone`.

* ``original``: Peters et al. 2018 §3.4 and the released biLM's options (Jozefowicz et al.
  2016's CNN-BIG-LSTM halved): character CNN filters [1,32] [2,32] [3,64] [4,128] [5,256]
  [6,512] [7,1024] (2048 in all) on 16-dimensional character embeddings of 50 characters
  per token, 2 highway layers, projection 512; 2 biLSTM layers of 4096 cells with 512
  projections, cell and projection clip 3, a residual connection between the layers,
  dropout 0.1; the 1B Word Benchmark vocabulary of 793,471 words.
* ``small``: the released "small" biLM (1024 cells, 128 projections, 1 highway layer,
  same filters).
* ``tiny``: a few-minute CPU model for tests and demos (not from the paper).
"""

ORIGINAL_FILTERS = [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]]

ELMO_PRESETS = {
    "original": {
        "vocabulary_size": 793471, "num_layers": 2, "lstm_units": 4096,
        "projection_dim": 512, "filters": ORIGINAL_FILTERS, "num_highway_layers": 2,
        "character_embedding_dim": 16, "max_characters_per_token": 50, "cell_clip": 3.0,
        "projection_clip": 3.0, "dropout": 0.1,
    },
    "small": {
        "vocabulary_size": 793471, "num_layers": 2, "lstm_units": 1024,
        "projection_dim": 128, "filters": ORIGINAL_FILTERS, "num_highway_layers": 1,
        "character_embedding_dim": 16, "max_characters_per_token": 50, "cell_clip": 3.0,
        "projection_clip": 3.0, "dropout": 0.1,
    },
    "tiny": {
        "vocabulary_size": 10000, "num_layers": 2, "lstm_units": 64, "projection_dim": 16,
        "filters": [[1, 8], [2, 8], [3, 16], [4, 16]], "num_highway_layers": 2,
        "character_embedding_dim": 8, "max_characters_per_token": 50, "cell_clip": 3.0,
        "projection_clip": 3.0, "dropout": 0.1,
    },
}
