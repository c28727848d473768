"""RNNsearch (Bahdanau, Cho & Bengio 2015). Importing this package registers the
"rnnsearch" architecture: an encoder-decoder trained from scratch on parallel text (no
pretraining objective), fine-tuned through the ``seq2seq_lm`` head (models/tasks/seq2seq_lm.py)
on the ``translation`` task kind."""

from lmfactory.models import registry
from lmfactory.models.rnnsearch.rnnsearch_backbone import RNNsearchBackbone
from lmfactory.models.rnnsearch.rnnsearch_presets import RNNSEARCH_PRESETS
from lmfactory.models.tasks.seq2seq_lm import Seq2SeqLM

ARCHITECTURE = registry.register(
    registry.Architecture(
        name="rnnsearch",
        family="encoder_decoder",
        backbone_cls=RNNsearchBackbone,
        presets=RNNSEARCH_PRESETS,
        tokenizer_kind="wordpiece",
        pretrainers={},
        heads={"seq2seq_lm": Seq2SeqLM},
        special_tokens={"pad": "<pad>", "unk": "<unk>", "cls": "<s>", "sep": "</s>"},
        paper="Bahdanau, Cho & Bengio 2015, Neural Machine Translation by Jointly Learning "
              "to Align and Translate (ICLR)",
    )
)

__all__ = ["ARCHITECTURE", "RNNSEARCH_PRESETS", "RNNsearchBackbone"]
