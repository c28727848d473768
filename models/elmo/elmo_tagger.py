"""Sequence tagging (NER) with ELMo features (Peters et al. 2018 §3.3, §4 "Named entity
extraction")."""

from __future__ import annotations

import keras

from lmfactory.models.elmo.elmo_feature_task import ElmoFeatureTask
from lmfactory.models.tasks.token_classifier import FirstSubTokenLoss


class ElmoTagger(FirstSubTokenLoss, ElmoFeatureTask):
    """`ElmoFeatureTask` with a per-token linear layer over the tags.

    The paper's NER baseline (Peters et al. 2017; Lample et al. 2016) is pre-trained word
    embeddings and a character CNN, two biLSTM layers and a CRF; this head keeps the word
    embeddings and the biLSTM (``num_lstm_layers``) with ELMo at its input, and predicts each
    tag independently (softmax, no CRF; the biLM's character CNN already reads spelling).

    Inputs: ``token_ids``, ``character_ids``, ``padding_mask``. Output: logits [B, T, L].
    Loss (`FirstSubTokenLoss`): mean NLL over the positions with non-zero ``sample_weight``
    (else every real token), plus the scalar mixes' L2 penalty.

    Args: ``num_labels`` = L, and those of `ElmoFeatureTask`.
    """

    def __init__(self, backbone, num_labels, **kwargs):
        if int(num_labels) < 1:
            raise ValueError(f"num_labels must be positive, got {num_labels}")
        self.logits_layer = keras.layers.Dense(int(num_labels), name="logits")
        super().__init__(backbone, **kwargs)
        self.num_labels = int(num_labels)
        self._create_tagging_metrics()

    def head(self, hidden, mask):
        return self.logits_layer(hidden)

    def get_config(self):
        config = super().get_config()
        config.update({"num_labels": self.num_labels})
        return config
