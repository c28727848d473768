"""The feature-based use of a pre-trained biLM (Peters et al. 2018 §3.3): the shared part of
ELMo's task models (`ElmoClassifier`, `ElmoTagger`)."""

from __future__ import annotations

import keras
from keras import ops

from lmfactory.models.elmo.elmo_bilm import backbone_inputs
from lmfactory.models.elmo.elmo_scalar_mix import ElmoScalarMix
from lmfactory.models.task_model import Task


class ElmoFeatureTask(Task, register=False):
    """A supervised model whose input (and optionally output) gets ELMo vectors of a frozen
    biLM.

    §3.3: "we first freeze the weights of the biLM and then concatenate the ELMo vector
    ELMo_k^task with x_k and pass the ELMo enhanced representation [x_k; ELMo_k^task] into
    the task RNN", and "for some tasks ... further improvement by also including ELMo at the
    output of the task RNN by introducing another set of output specific linear weights and
    replacing h_k with [h_k; ELMo_k^task]" (``elmo_at_output``). x_k is a learned word
    embedding of ``token_ids`` (the paper's baselines use pre-trained GloVe vectors; none are
    shipped, so they are trained from scratch here). ELMo_k^task is `ElmoScalarMix` over the
    biLM's ``layer_outputs`` (``mix`` "all": eq. 1; "top": the top layer only), with dropout
    and the L2 penalty on its weights, and by default §3.2's layer normalisation of each
    layer before weighting (``layer_norm``): the token layer here is the unclipped
    projection of the character CNN, whose scale (RMS 37 after the benchmark's few minutes
    of training) dwarfs the clipped LSTM layers' (about 3), so without it the token layer
    swamps the mix and the task LSTM saturates. The task RNN is ``num_lstm_layers`` bidirectional LSTMs
    of ``lstm_units`` per direction, masked by the padding. The biLM runs in inference mode
    and is not trained (``backbone.trainable = False``).

    A subclass defines `head(hidden, mask)` -> its outputs and passes its own arguments on.
    """

    def __init__(self, backbone, mix="all", word_embedding_dim=64, lstm_units=64,
                 num_lstm_layers=1, elmo_dropout=0.5, l2=0.001, elmo_at_output=False,
                 dropout=0.2, layer_norm=True, **kwargs):
        for name, value in (("word_embedding_dim", word_embedding_dim),
                            ("lstm_units", lstm_units), ("num_lstm_layers", num_lstm_layers)):
            if int(value) < 1:
                raise ValueError(f"{name} must be positive, got {value}")
        self.backbone = backbone
        backbone.trainable = False
        layers = int(backbone.num_layers) + 1
        mixing = dict(mix=mix, dropout=elmo_dropout, l2=l2, layer_norm=layer_norm)
        self.input_mix = ElmoScalarMix(layers, name="input_mix", **mixing)
        self.output_mix = (ElmoScalarMix(layers, name="output_mix", **mixing)
                           if elmo_at_output else None)
        self.word_embedding = keras.layers.Embedding(
            int(backbone.vocabulary_size), int(word_embedding_dim), name="word_embedding")
        self.task_lstms = [keras.layers.Bidirectional(
            keras.layers.LSTM(int(lstm_units), return_sequences=True), name=f"task_bilstm_{i}")
            for i in range(int(num_lstm_layers))]
        self.task_dropout = keras.layers.Dropout(dropout, name="task_dropout")

        inputs = backbone_inputs(backbone)
        mask = ops.cast(inputs["padding_mask"], "bool")
        layer_outputs = backbone(inputs, training=False)["layer_outputs"]
        layer_outputs = ops.cast(layer_outputs, "float32")
        hidden = ops.concatenate([self.word_embedding(inputs["token_ids"]),
                                  self.input_mix(layer_outputs)], axis=-1)
        for lstm in self.task_lstms:
            hidden = lstm(self.task_dropout(hidden), mask=mask)
        if self.output_mix is not None:
            hidden = ops.concatenate([hidden, self.output_mix(layer_outputs)], axis=-1)
        outputs = self.head(self.task_dropout(hidden), mask)
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        self.mix = mix
        self.word_embedding_dim = int(word_embedding_dim)
        self.lstm_units = int(lstm_units)
        self.num_lstm_layers = int(num_lstm_layers)
        self.elmo_dropout = float(elmo_dropout)
        self.l2 = float(l2)
        self.elmo_at_output = bool(elmo_at_output)
        self.dropout = float(dropout)
        self.layer_norm = bool(layer_norm)

    def head(self, hidden, mask):
        raise NotImplementedError(f"{type(self).__name__} defines no head")

    def get_config(self):
        config = super().get_config()
        config.update({"mix": self.mix, "word_embedding_dim": self.word_embedding_dim,
                       "lstm_units": self.lstm_units, "num_lstm_layers": self.num_lstm_layers,
                       "elmo_dropout": self.elmo_dropout, "l2": self.l2,
                       "elmo_at_output": self.elmo_at_output, "dropout": self.dropout,
                       "layer_norm": self.layer_norm})
        return config
