"""ELMo (Peters et al. 2018, "Deep contextualized word representations", NAACL): a
character-CNN biLM (§3.1, §3.4) whose layers a task mixes into ELMo vectors (§3.2) and
uses feature-based, frozen (§3.3)."""

from lmfactory.models import registry
from lmfactory.models.elmo.elmo_backbone import ElmoBackbone
from lmfactory.models.elmo.elmo_bilm import ElmoBiLM
from lmfactory.models.elmo.elmo_classifier import ElmoClassifier
from lmfactory.models.elmo.elmo_preprocessor import ElmoPreprocessor, elmo_preprocessor
from lmfactory.models.elmo.elmo_presets import ELMO_PRESETS
from lmfactory.models.elmo.elmo_tagger import ElmoTagger
from lmfactory.models.elmo.elmo_tagging_preprocessor import (ElmoTaggingPreprocessor,
                                                              elmo_tagging_preprocessor)

ARCHITECTURE = registry.register(
    registry.Architecture(
        name="elmo",
        family="recurrent",
        backbone_cls=ElmoBackbone,
        presets=ELMO_PRESETS,
        tokenizer_kind="word",
        pretrainers={"bilm": ElmoBiLM},
        heads={"classification": ElmoClassifier, "tagging": ElmoTagger},
        preprocessors={"classification": elmo_preprocessor,
                       "tagging": elmo_tagging_preprocessor},
        special_tokens={"pad": "<pad>", "unk": "<unk>", "cls": "<S>", "sep": "</S>"},
        paper="Peters et al. 2018, Deep contextualized word representations, NAACL "
              "(biLM of Jozefowicz et al. 2016, Exploring the limits of language modeling)",
    )
)

__all__ = ["ARCHITECTURE", "ElmoBackbone", "ElmoBiLM", "ElmoClassifier", "ElmoPreprocessor",
           "ElmoTagger", "ElmoTaggingPreprocessor", "elmo_preprocessor",
           "elmo_tagging_preprocessor"]
