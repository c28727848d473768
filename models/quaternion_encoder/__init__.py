"""The Quaternion Transformer encoder (Tay et al. 2019, ACL). Importing this package
registers the "quaternion_encoder" architecture: the encoder stack of the Quaternion
Transformer (its quaternion blocks come from ``models/quaternion_transformer``) with a
sentence classifier on the first token, trained from scratch on the task (no pretraining
objective, ``pretraining: null``). A separate registration because the registry keys heads
by family: the encoder-decoder's ``seq2seq_lm`` and this encoder's ``classification`` (and
the encoder family's tagging / span / choice heads) need backbones with different inputs."""

from lmfactory.models import registry
from lmfactory.models.quaternion_encoder.quaternion_encoder_backbone import (
    QuaternionEncoderBackbone)
from lmfactory.models.quaternion_encoder.quaternion_encoder_classifier import (
    QuaternionEncoderClassifier)
from lmfactory.models.quaternion_encoder.quaternion_encoder_presets import (
    QUATERNION_ENCODER_PRESETS)

ARCHITECTURE = registry.register(
    registry.Architecture(
        name="quaternion_encoder",
        family="encoder",
        backbone_cls=QuaternionEncoderBackbone,
        presets=QUATERNION_ENCODER_PRESETS,
        tokenizer_kind="wordpiece",
        pretrainers={},
        heads={"classification": QuaternionEncoderClassifier},
        special_tokens={"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]"},
        segment_layout="bert",
        paper="Tay et al. 2019, Lightweight and Efficient Neural Natural Language "
              "Processing with Quaternion Networks (ACL)",
    )
)

__all__ = ["ARCHITECTURE", "QUATERNION_ENCODER_PRESETS", "QuaternionEncoderBackbone",
           "QuaternionEncoderClassifier"]
