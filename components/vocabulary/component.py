"""VocabularyGen: a TFX component that learns a WordPiece, byte-level BPE or SentencePiece
vocabulary, or writes the fixed byte vocabulary (with the corpus's byte counts).

    vocabulary_gen = VocabularyGen(examples=example_gen.outputs["examples"],
                                   kind="wordpiece", vocab_size=30522)
    vocabulary_gen.with_beam_pipeline_args([...])  # DirectRunner, Dataflow, Flink, Spark

The output ``vocabulary`` artifact is a folder readable by
:func:`lmfactory.models.tokenizers.load_tokenizer` (CONTRACTS §2).
"""

from __future__ import annotations

import json
from typing import Mapping, Sequence

from tfx import types
from tfx.dsl.components.base import base_beam_component, executor_spec
from tfx.types import standard_artifacts
from tfx.types.component_spec import ChannelParameter, ExecutionParameter

from lmfactory.components.artifacts import Vocabulary
from lmfactory.components.vocabulary.executor import (EXAMPLES_KEY, EXTRA_EXAMPLES_KEY,
                                                      VOCABULARY_KEY, Executor)


class VocabularyGenSpec(types.ComponentSpec):
    """Exec properties, input and output of VocabularyGen (lists travel as JSON strings)."""

    PARAMETERS = {
        "kind": ExecutionParameter(type=str),
        "vocab_size": ExecutionParameter(type=int),
        "text_features": ExecutionParameter(type=str, optional=True),
        "splits": ExecutionParameter(type=str, optional=True),
        "lowercase": ExecutionParameter(type=bool, optional=True),
        "strip_accents": ExecutionParameter(type=bool, optional=True),
        "min_frequency": ExecutionParameter(type=int, optional=True),
        "max_unique_words": ExecutionParameter(type=int, optional=True),
        "special_tokens": ExecutionParameter(type=str, optional=True),
    }
    INPUTS = {EXAMPLES_KEY: ChannelParameter(type=standard_artifacts.Examples),
              EXTRA_EXAMPLES_KEY: ChannelParameter(type=standard_artifacts.Examples,
                                                   optional=True)}
    OUTPUTS = {VOCABULARY_KEY: ChannelParameter(type=Vocabulary)}


class VocabularyGen(base_beam_component.BaseBeamComponent):
    """Learns a sub-word vocabulary from the text features of an Examples artifact (and,
    optionally, of a second one: e.g. ULMFiT's target-task text beside the general corpus)."""

    SPEC_CLASS = VocabularyGenSpec
    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(Executor)

    def __init__(self, examples: types.BaseChannel, kind: str, vocab_size: int,
                 text_features: Sequence[str] = ("text",), splits: Sequence[str] = ("train",),
                 lowercase: bool = True, strip_accents: bool = True, min_frequency: int = 2,
                 max_unique_words: int = 1_000_000,
                 special_tokens: Mapping[str, str] | None = None,
                 extra_examples: types.BaseChannel | None = None):
        """Args:
          examples: channel of ``Examples`` (GZIP TFRecords of tf.train.Example).
          kind: "wordpiece" (BERT), "bpe" (GPT-2 / RoBERTa byte-level BPE),
            "sentencepiece" (ALBERT's unigram SentencePiece), "byte" (the 256 UTF-8 byte
            values, nothing learned; the character LM of Al-Rfou et al. 2018) or "word"
            (whole whitespace-separated words, the rest <unk>; NNLM, word2vec, AWD-LSTM).
          vocab_size: target number of tokens, special tokens included (for "byte":
            exactly 256 + the distinct special tokens).
          text_features: bytes features holding text; values are split into lines on "\\n".
          splits: which splits to learn from.
          lowercase, strip_accents: WordPiece / SentencePiece normalization (ignored for
            BPE and bytes; words: lowercase only).
          min_frequency: WordPiece: lowest piece frequency searched; BPE: a pair must occur
            this often to be merged; words: a kept word occurs this often; ignored by
            SentencePiece.
          max_unique_words: the learner sees at most this many distinct words, most
            frequent first.
          special_tokens: role -> token (roles pad, unk, cls, sep, mask, end_of_text) the
            vocabulary reserves; None = the kind's default: BERT's [PAD] [UNK] [CLS] [SEP]
            [MASK], GPT-2's <|endoftext|> (BPE and bytes), ALBERT's <pad> <unk> [CLS]
            [SEP] [MASK]. BPE
            with encoder roles (e.g. RoBERTa's {"cls": "<s>", "pad": "<pad>", "sep": "</s>",
            "unk": "<unk>", "mask": "<mask>"}) puts them at the first ids.
          extra_examples: an optional second channel of ``Examples`` whose same splits and
            text features are counted together with ``examples``' (one vocabulary over
            both, e.g. the general corpus and the target task's text).
        """
        spec = VocabularyGenSpec(
            examples=examples, vocabulary=types.Channel(type=Vocabulary), kind=kind,
            vocab_size=vocab_size, text_features=json.dumps(list(text_features)),
            splits=json.dumps(list(splits)), lowercase=bool(lowercase),
            strip_accents=bool(strip_accents), min_frequency=min_frequency,
            max_unique_words=max_unique_words,
            special_tokens=None if special_tokens is None else json.dumps(dict(special_tokens)),
            **({EXTRA_EXAMPLES_KEY: extra_examples} if extra_examples is not None else {}))
        super().__init__(spec=spec)
