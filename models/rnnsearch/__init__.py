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
        tokenizer_kind="word",
        pretrainers={},
        heads={"seq2seq_lm": Seq2SeqLM},
        # A joint word vocabulary of both languages; sentences end with </s> (§2.1), the
        # decoder starts from <s>.
        special_tokens={"pad": "<pad>", "unk": "<unk>", "start": "<s>",
                        "end_of_text": "</s>"},
        paper="Bahdanau, Cho & Bengio 2015, Neural Machine Translation by Jointly Learning "
              "to Align and Translate (ICLR)",
    )
)

__all__ = ["ARCHITECTURE", "RNNSEARCH_PRESETS", "RNNsearchBackbone"]
