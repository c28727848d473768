"""T5 (Raffel et al. 2020). Importing this package registers the "t5" architecture: an
encoder-decoder pre-trained with span corruption (``span_corruption`` objective) and
fine-tuned text-to-text through its ``seq2seq_lm`` head."""

from lmfactory.models import registry
from lmfactory.models.t5.t5_backbone import T5Backbone
from lmfactory.models.t5.t5_converters import from_huggingface
from lmfactory.models.t5.t5_presets import T5_PRESETS
from lmfactory.models.t5.t5_seq2seq_lm import T5Seq2SeqLM

NUM_SENTINELS = 100
ARCHITECTURE = registry.register(
    registry.Architecture(
        name="t5",
        family="encoder_decoder",
        backbone_cls=T5Backbone,
        presets=T5_PRESETS,
        tokenizer_kind="sentencepiece",
        pretrainers={"span_corruption": T5Seq2SeqLM},
        heads={"seq2seq_lm": T5Seq2SeqLM},
        # The released vocabulary: <pad> = 0 (also the decoder's start token), </s> = 1,
        # <unk> = 2; the sentinels <extra_id_0..99> at the top, <extra_id_0> the last id.
        special_tokens={"pad": "<pad>", "end_of_text": "</s>", "unk": "<unk>",
                        "start": "<pad>",
                        **{f"sentinel_{i}": f"<extra_id_{i}>" for i in range(NUM_SENTINELS)}},
        converters={"huggingface": from_huggingface},
        hf_model_types=("t5",),
        paper="Raffel et al. 2020, Exploring the Limits of Transfer Learning with a "
              "Unified Text-to-Text Transformer (JMLR 21)",
    )
)

__all__ = ["ARCHITECTURE", "T5Backbone", "T5Seq2SeqLM", "T5_PRESETS"]
