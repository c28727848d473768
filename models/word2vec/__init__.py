"""word2vec (Mikolov et al. 2013): continuous skip-gram and CBOW trained with negative
sampling. Importing this package registers the "word2vec" architecture.

* backbone (`Word2VecBackbone`): the input and output word-vector matrices;
* objectives ``skipgram`` and ``cbow`` (components/pretraining_data/word_windows.py: Beam
  writes one record per kept centre word after frequent-word subsampling, with its dynamic
  window's context words), trained by `Word2VecSkipGram` / `Word2VecCBOW` with k negatives
  per pair from the unigram^3/4 distribution (`UnigramNoise`);
* tokenizer: the ``word`` kind (whitespace-split words, top-N by corpus frequency, per-word
  corpus counts recorded in the vocabulary folder: subsampling and the noise distribution
  need them);
* no fine-tuning head: the pipeline's ``word_vectors`` task kind continues the objective on
  a target corpus and exports the vectors (words -> vectors, nearest neighbours, the
  TensorBoard projector files).
"""

from lmfactory.models import registry
from lmfactory.models.word2vec.word2vec_backbone import Word2VecBackbone
from lmfactory.models.word2vec.word2vec_cbow import Word2VecCBOW
from lmfactory.models.word2vec.word2vec_negative_sampling import (NegativeSamplingTask,
                                                                   negative_sampling_loss)
from lmfactory.models.word2vec.word2vec_noise import UnigramNoise, noise_log_probabilities
from lmfactory.models.word2vec.word2vec_presets import WORD2VEC_PRESETS
from lmfactory.models.word2vec.word2vec_skipgram import Word2VecSkipGram

# word2vec.c's starting learning rates (the papers give none): 0.025 for skip-gram, 0.05 for
# CBOW, decayed linearly to alpha * 1e-4 over training; plain SGD (2013a §4: "mini-batch
# asynchronous gradient descent ... Adagrad" in DistBelief; word2vec.c is plain SGD).
WORD2VEC_OPTIMIZATION = {
    "skipgram": {"optimizer": "sgd", "learning_rate": 0.025},
    "cbow": {"optimizer": "sgd", "learning_rate": 0.05},
    "common": {"warmup_fraction": 0.0, "weight_decay": 0.0, "clip_norm": 0.0,
               "learning_rate_decay": "linear", "final_learning_rate_fraction": 1e-4},
}
SPECIAL_TOKENS = {"pad": "<pad>", "unk": "<unk>"}

ARCHITECTURE = registry.register(
    registry.Architecture(
        name="word2vec",
        family="embedding",
        backbone_cls=Word2VecBackbone,
        presets=WORD2VEC_PRESETS,
        tokenizer_kind="word",
        pretrainers={"skipgram": Word2VecSkipGram, "cbow": Word2VecCBOW},
        special_tokens=SPECIAL_TOKENS,
        paper="Mikolov, Chen, Corrado, Dean 2013, Efficient Estimation of Word "
              "Representations in Vector Space, arXiv:1301.3781; Mikolov, Sutskever, Chen, "
              "Corrado, Dean 2013, Distributed Representations of Words and Phrases and their "
              "Compositionality (NIPS), arXiv:1310.4546",
    )
)

__all__ = ["ARCHITECTURE", "NegativeSamplingTask", "SPECIAL_TOKENS", "UnigramNoise",
           "WORD2VEC_OPTIMIZATION", "WORD2VEC_PRESETS", "Word2VecBackbone", "Word2VecCBOW",
           "Word2VecSkipGram", "negative_sampling_loss", "noise_log_probabilities"]
