"""ERNIE (Zhang et al. 2019). Importing this package registers the "ernie" architecture."""

from lmfactory.models import registry
from lmfactory.models.ernie.ernie_aggregator import ErnieAggregator
from lmfactory.models.ernie.ernie_backbone import ErnieBackbone
from lmfactory.models.ernie.ernie_classifier import ErnieClassifier
from lmfactory.models.ernie.ernie_converters import (from_bert, from_huggingface,
                                                     from_tf_checkpoint, knowledge_init)
from lmfactory.models.ernie.ernie_preprocessor import ErniePreprocessor, pipeline_preprocessor
from lmfactory.models.ernie.ernie_presets import ERNIE_PRESETS
from lmfactory.models.ernie.ernie_pretrainer import ErniePretrainer

ARCHITECTURE = registry.register(
    registry.Architecture(
        name="ernie",
        family="encoder",
        backbone_cls=ErnieBackbone,
        presets=ERNIE_PRESETS,
        tokenizer_kind="wordpiece",
        pretrainers={"ernie_dea": ErniePretrainer},
        heads={"classification": ErnieClassifier},
        preprocessors={"classification": pipeline_preprocessor},
        special_tokens={"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]",
                        "mask": "[MASK]"},
        segment_layout="bert",
        converters={"huggingface": from_huggingface, "tf_checkpoint": from_tf_checkpoint},
        knowledge_init=knowledge_init,
        links_entities=True,
        paper="Zhang et al. 2019, ERNIE: Enhanced Language Representation with Informative "
              "Entities (ACL), arXiv:1905.07129",
        backends=("tensorflow",),
        tensorflow_only_because=(
            "the entity prediction gathers the aligned entities with "
            "tf.boolean_mask and tf.unique, whose output sizes depend on the data (not "
            "traceable under jit)"),
    )
)

__all__ = ["ARCHITECTURE", "ERNIE_PRESETS", "ErnieAggregator", "ErnieBackbone",
           "ErnieClassifier", "ErniePreprocessor", "ErniePretrainer", "from_bert"]
