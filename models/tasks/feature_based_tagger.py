"""Feature-based NER: a BiLSTM tagger over frozen encoder features (Devlin et al. 2019 §5.3)."""

from __future__ import annotations

import functools

import keras
from keras import ops

from lmfactory.models.feature_extraction import EncoderFeatures
from lmfactory.models.task_model import Task, int_inputs
from lmfactory.models.tasks.token_classifier import FirstSubTokenLoss


class FeatureBasedTagger(FirstSubTokenLoss, Task):
    """Fixed contextual features of a pre-trained encoder feeding a two-layer BiLSTM tagger.

    §5.3: "we apply the feature-based approach by extracting the activations from one or more
    layers without fine-tuning any parameters of BERT. These contextual embeddings are used
    as input to a randomly initialized two-layer 768-dimensional BiLSTM before the
    classification layer." The encoder runs frozen in inference mode
    (``models/feature_extraction.EncoderFeatures``; ``mode`` picks Table 7's row, the best
    being ``concat_last_four``); the BiLSTM skips padding positions (the padding mask is its
    mask) and, as in the fine-tuning approach (§5.3: "we use the representation of the first
    sub-token"), the loss counts each word's first sub-token only (`FirstSubTokenLoss`).

    Inputs: the backbone's input dict, int32 [batch, seq_len].
    Output: logits [batch, seq_len, num_labels].

    Args:
        backbone: an encoder backbone with ``call_with_states`` (set non-trainable here).
        num_labels: the size of the tag set.
        mode: the feature mode (``feature_extraction.FEATURE_MODES``).
        lstm_units: units of each direction of each BiLSTM layer (768 in the paper).
        num_lstm_layers: stacked BiLSTM layers (2 in the paper).
        dropout: dropout rate on the BiLSTM output, before the classification layer.
    """

    def __init__(self, backbone, num_labels, mode="concat_last_four", lstm_units=768,
                 num_lstm_layers=2, dropout=0.1, **kwargs):
        if int(num_labels) < 1 or int(lstm_units) < 1 or int(num_lstm_layers) < 1:
            raise ValueError(f"num_labels, lstm_units and num_lstm_layers must be positive, "
                             f"got {num_labels}, {lstm_units}, {num_lstm_layers}")
        # === Layers ===
        self.backbone = backbone
        self.features = EncoderFeatures(backbone, mode=mode, freeze_backbone=True,
                                        name="encoder_features")
        self.lstm_layers = [
            keras.layers.Bidirectional(
                keras.layers.LSTM(int(lstm_units), return_sequences=True),
                name=f"bilstm_{index}")
            for index in range(int(num_lstm_layers))]
        self.add_output_layers(
            int(num_labels), dropout,
            functools.partial(keras.initializers.TruncatedNormal, stddev=0.02), dtype=None)

        # === Functional model ===
        inputs = int_inputs(backbone.input)
        mask = ops.cast(inputs["padding_mask"], "bool")
        hidden = ops.cast(self.features(inputs), "float32")
        for lstm in self.lstm_layers:
            hidden = lstm(hidden, mask=mask)
        logits = self.output_head(hidden)
        super().__init__(inputs=inputs, outputs=logits, **kwargs)

        # === Config ===
        self.num_labels = int(num_labels)
        self.mode = mode
        self.lstm_units = int(lstm_units)
        self.num_lstm_layers = int(num_lstm_layers)
        self.dropout = dropout

        # === Metrics ===
        self._create_tagging_metrics()

    def get_config(self):
        config = super().get_config()
        config.update({"num_labels": self.num_labels, "mode": self.mode,
                       "lstm_units": self.lstm_units, "num_lstm_layers": self.num_lstm_layers,
                       "dropout": self.dropout})
        return config
