"""RNNsearch sizes as `RNNsearchBackbone` constructor kwargs.

"rnnsearch": the model of Bahdanau, Cho & Bengio 2015 (§4.2 and Appendix A): 1000 hidden
units in each encoder direction and in the decoder (n = 1000), word embeddings of 620
(m = 620), an alignment model of n' = 1000 hidden units, and a deep output with a maxout
hidden layer of l = 500 units; gated hidden units (§A.1.1), additive alignment (§A.1.2). The paper's vocabularies are 30,000 words per language; the pipeline sets
``vocabulary_size`` from the learned (joint) vocabulary. "small": the same network at a size
that trains on a CPU in minutes (multi30k benchmark); its attention width and maxout size
follow from ``hidden_dim`` as in the paper (n' = n, l = n / 2).
"""

RNNSEARCH_PRESETS = {
    "small": {
        "vocabulary_size": 8000,
        "hidden_dim": 128,
        "embedding_dim": 96,
        "cell_type": "gru",
        "attention": "additive",
        "max_sequence_length": 64,
    },
    "rnnsearch": {
        "vocabulary_size": 30000,
        "hidden_dim": 1000,
        "embedding_dim": 620,
        "attention_dim": 1000,
        "maxout_dim": 500,
        "cell_type": "gru",
        "attention": "additive",
        "max_sequence_length": 80,
    },
}
