"""word2vec sizes as `Word2VecBackbone` constructor kwargs.

``base``: 300-dimensional vectors, the size of Mikolov et al. 2013a Table 4/6 and of the
published GoogleNews vectors (2013b §4), over a 30,000-word vocabulary (the paper's
vocabulary is 1M words of a 6B-token corpus; the pipeline sets ``vocabulary_size`` to the
learned vocabulary's). ``small``: 100-dimensional vectors (word2vec.c's default ``-size
100``), the size the gensim comparison uses. ``tiny``: for tests and smoke runs.
"""

WORD2VEC_PRESETS = {
    "base": {"vocabulary_size": 30_000, "embedding_dim": 300},
    "small": {"vocabulary_size": 30_000, "embedding_dim": 100},
    "tiny": {"vocabulary_size": 2_000, "embedding_dim": 16},
}
