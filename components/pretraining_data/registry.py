"""The pretraining-objective registry: one `Objective` record per CONTRACTS §3 ``objective``.

Each objective's own module (``bert_mlm_nsp.py``, ``albert_mlm_sop.py``, ``full_sentences.py``
for ``mlm``, ``causal_lm.py``) builds its record and calls :func:`register` when imported;
``objectives.py`` imports those modules (the one place that lists them) and re-exports this
interface. The Beam pipeline (``executor.py``), the config checks and the tf.data reader
(``features.py``) ask the record what to do, so a new objective is a new module plus one
import line, not edits across the folder.

This module imports nothing from its own package (only the shared `NamedRegistry`), so every
objective module can import it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from lmfactory.models.named_registry import NamedRegistry

# How `beam_steps.TokenizeDocuments` turns a corpus document (CONTRACTS §1: sentences joined by
# "\n") into what ``shard_examples`` receives:
# SENTENCES: a list of token-id arrays, one per non-blank line (blank lines and sentences that
#   tokenize to nothing are dropped; a document left with none is dropped);
# STREAM: one token-id array of the whole text, newlines included (e.g. a byte-level BPE
#   stream, GPT-2 §2.2);
# LINKED_SENTENCES: corpus Examples annotated by the EntityLinker (knowledge-graph entity
#   mentions); a list of (token-id array, entity-tag array) per sentence, the tag being the
#   entity index + 1 on the first token of a mention and 0 elsewhere (linked_documents.py).
SENTENCES = "sentences"
STREAM = "stream"
LINKED_SENTENCES = "linked_sentences"
DOCUMENT_FORMATS = (SENTENCES, STREAM, LINKED_SENTENCES)
# The key of the vocabulary folder's path in the tokenizer config ``vocabulary_state`` gets.
VOCABULARY_FOLDER = "vocabulary_folder"
# The parsed-batch feature holding a batch's stateless seed, int64 [2]: the reader's seed and
# the batch's index in the input (features.make_dataset), for what a converter draws on each
# read (dynamic masking's masks, a permutation LM's factorisation orders).
MASK_SEED = "mask_seed"


def _no_checks(config: dict) -> None:
    """An objective with no checks of its own beyond ``features.resolve_config``'s."""


def _records_nothing(vocabulary_state) -> dict:
    """An objective that adds nothing to ``pretraining_config.json``."""
    return {}


@dataclasses.dataclass(frozen=True)
class Objective:
    """What the pipeline needs to know about one pretraining objective.

    Attributes:
        name: registry key, the ``objective`` of the generation config (CONTRACTS §3).
        document: how a corpus document is tokenized for it, one of ``DOCUMENT_FORMATS``
            (``SENTENCES``: a list of token-id sentences; ``STREAM``: one token-id array).
        vocabulary_state: ``fn(tokenizer, tokenizer_config) -> state`` (the config holds
            the folder's path under ``VOCABULARY_FOLDER`` too): what building
            examples needs from the vocabulary (e.g. the masking ids, the end-of-text id),
            built once by ``executor.describe_vocabulary`` and shipped to the Beam workers with
            the shard step (so it must pickle); raises ``ValueError`` when the vocabulary
            lacks a token the objective needs.
        shard_examples: ``fn(documents, state, config, seed_scope) -> (records, stats)``:
            the serialized ``tf.train.Example`` records of one shard and their counts.
            ``documents`` are in canonical order (sorted by content hash), each in the
            ``document`` format; ``seed_scope`` is ``(random_seed, split, shard)``: the output
            must be a function of these arguments alone (byte-identical re-runs).
        feature_spec: ``fn(config) -> dict``, the ``tf.io.parse_example`` spec of its records.
        converter: ``fn(config) -> fn(parsed) -> (x, y, sample_weight)``: turns a batch of
            parsed records into what the Keras task model trains on (CONTRACTS §3).
        causal: True when the targets are left-to-right next tokens: the trained model
            generates text and is evaluated by perplexity.
        check_config: ``fn(config) -> None``, the objective's own checks of a resolved config
            (run after the shared ones); raises ``ValueError``.
        vocabulary_record: ``fn(state) -> dict``, entries that
            ``executor.describe_vocabulary`` adds to ``pretraining_config.json`` (e.g.
            ``end_of_text_id``).
        ordered_streams: True when its records are consecutive segments of one token stream
            that must be read in order (a model carrying state across segments: a
            segment-level recurrence memory, an LSTM's state across BPTT windows). The reader
            (``features.make_dataset``) then cuts the records into ``batch_size`` parallel
            streams, never shuffles, and row b of batch k + 1 continues row b of batch k
            (CONTRACTS §3 ``causal_lm_streams``); the trainer reads it to build the task
            model with ``stream_batch_size``.
        window_lengths: for an ``ordered_streams`` objective read in windows other than its
            records (``bptt_streams.py``, AWD-LSTM's variable-length BPTT): ``fn(config,
            training) -> fn(rng, total) -> lengths``, the window lengths covering a stream
            of ``total`` next-token positions; the reader rejoins the records into B token
            rows and cuts them so. None: each record is one window.
        paper: citation of the paper the objective follows.
    """

    name: str
    document: str
    vocabulary_state: Callable[[Any, dict], Any]
    shard_examples: Callable[..., tuple]
    feature_spec: Callable[[dict], dict]
    converter: Callable[[dict], Callable]
    causal: bool = False
    check_config: Callable[[dict], None] = _no_checks
    vocabulary_record: Callable[[Any], dict] = _records_nothing
    ordered_streams: bool = False
    window_lengths: Callable[[dict, bool], Callable] | None = None
    draws_per_read: bool = False
    paper: str = ""

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"An objective needs a non-empty name, got {self.name!r}")
        if self.document not in DOCUMENT_FORMATS:
            raise ValueError(f"Objective {self.name!r}: document must be one of "
                             f"{DOCUMENT_FORMATS}, got {self.document!r}")


_OBJECTIVES = NamedRegistry(
    "pretraining objective",
    unknown="Unknown pretraining objective {name!r}: objective must be one of {names}")
register = _OBJECTIVES.register  # each objective's module registers its record
unregister = _OBJECTIVES.unregister
registered = _OBJECTIVES.registered
get = _OBJECTIVES.get


def names() -> tuple:
    """The registered objectives, sorted."""
    return tuple(sorted(_OBJECTIVES.names()))
