"""The sentence classifier on the Quaternion Transformer encoder."""

import keras

from lmfactory.models.quaternion_encoder.quaternion_encoder_backbone import INPUT_NAMES
from lmfactory.models.task_model import SequenceClassifier, first_token_vector


def _output_initializer():
    return keras.initializers.GlorotUniform()


class QuaternionEncoderClassifier(SequenceClassifier):
    """A `QuaternionEncoderBackbone` with a classification layer on the final vector of the
    first token (`[CLS]`, the packing of models/classifier_preprocessor.py): dropout, then a
    real Dense(K) (the output layer stays real, as the paper's models keep their real
    softmax layers; it is K * d_model weights).

    Inputs (dict, int32 [B, T]): `token_ids`, `padding_mask` (a packer's `segment_ids` is
        ignored: the encoder has no segment embeddings).
    Output: logits [B, num_classes].

    Args:
        backbone: a `QuaternionEncoderBackbone`.
        num_classes: K.
        dropout: the dropout before the output layer.
    """

    task_inputs = INPUT_NAMES

    def __init__(self, backbone, num_classes, dropout=0.1, **kwargs):
        if int(num_classes) < 1:
            raise ValueError(f"num_classes must be a positive integer, got {num_classes!r}")
        # === Layers ===
        self.add_output_layers(num_classes, dropout, _output_initializer,
                               dtype=backbone.dtype_policy)
        super().__init__(backbone, num_classes, dropout, **kwargs)

    def classify(self, outputs):
        return self.output_head(first_token_vector(outputs))
