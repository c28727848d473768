"""NNLM sizes as `NnlmBackbone` constructor kwargs (Bengio et al. 2003, §4).

§4 reports networks on two corpora, with |V| = 16,383 words on the Brown corpus and
17,964 on AP News (`vocabulary_size` is replaced by the pipeline's vocabulary):

* "brown": n = 5, h = 100 hidden units, m = 30 word features, no direct connections (Table
  1's MLP9 / MLP10, its lowest test perplexity on the Brown corpus; its MLP1-MLP8 have
  direct connections and h = 0 or 50);
* "ap_news": n = 6, h = 60, m = 100, with direct connections (Table 2's MLP10 on AP News);
* "small": a trigram-sized model (n = 3, h = 64, m = 32) for tests and short runs.

`max_sequence_length` bounds generation only (the network conditions on n - 1 words).
"""


def _nnlm(vocabulary_size, order, hidden_dim, embedding_dim, direct_connections=True,
          max_sequence_length=256):
    return {
        "vocabulary_size": vocabulary_size,
        "embedding_dim": embedding_dim,
        "hidden_dim": hidden_dim,
        "order": order,
        "direct_connections": direct_connections,
        "max_sequence_length": max_sequence_length,
    }


NNLM_PRESETS = {
    "small": _nnlm(1000, order=3, hidden_dim=64, embedding_dim=32),
    "brown": _nnlm(16383, order=5, hidden_dim=100, embedding_dim=30, direct_connections=False),
    "ap_news": _nnlm(17964, order=6, hidden_dim=60, embedding_dim=100),
}
