"""BERT pretraining instances: masked LM + next-sentence prediction.

Follows Devlin et al. 2019, "BERT" §3.1 (Task #1 masked LM, Task #2 NSP) and Appendix A.2
(pretraining procedure), and the data recipe of google-research/bert
``create_pretraining_data.py`` (re-implemented here from its description, on token ids):

* Instances per document (App. A.2): segments (sentences) are accumulated until they reach a
  target length (``max_seq_length - 3``; with probability ``short_seq_prob`` a random length in
  ``[2, max_seq_length - 3]`` so the model also sees short inputs), the chunk is split at a
  random segment boundary into A and B, and B is replaced by text from a random *other*
  document 50% of the time (label 1 = "NotNext"); segments of the chunk not used then go back
  to be read again. The pair is truncated one token at a time from the longer side, at the
  front or back at random, to ``max_seq_length - 3`` tokens, and laid out as
  ``[CLS] A [SEP] B [SEP]`` with segment ids 0 for ``[CLS] A [SEP]`` and 1 for ``B [SEP]``.
* Masked LM (§3.1, App. C.2): ``round(n * masked_lm_prob)`` (at least 1, at most
  ``max_predictions_per_seq``) of the ``n`` tokens other than [CLS]/[SEP] are chosen; each
  chosen token becomes [MASK] 80% of the time, a random non-special token 10%, and stays
  unchanged 10%. Positions are reported in increasing order. With ``whole_word_masking``
  all pieces of a word (for WordPiece a piece and the ``##`` pieces that follow it) are
  chosen together and share one 80/10/10 decision; ``ngram_masking`` selects spans of whole
  words instead (ALBERT §4.1). The masking code is shared with the other MLM objectives and
  lives in ``masking.py``.

Adaptations, and why:

* Scale-out. The reference keeps every document of the corpus in memory and draws the random
  next segment from the whole corpus. Here the Beam pipeline hashes documents into shards
  (see ``executor.py``); one shard (about ``documents_per_shard`` documents) is processed at a
  time, its documents sorted by content hash so the result does not depend on Beam's element
  order, and the random other document is drawn from the same shard. Each (seed, split, shard,
  dupe round) gets its own RNG (:func:`seeded_rng`), so output is a function of the seed.
* ``n`` excludes [CLS]/[SEP] (the reference counts them), so exactly ``masked_lm_prob`` of the
  maskable tokens are predicted, as §3.1 describes ("15% of all WordPiece tokens").
* NSP balance. The reference always picks a random next segment when the chunk is a single
  segment, which pushes "NotNext" above the 50% of §3.1 on corpora with long sentences or
  short paragraphs. By default the coin is thrown first and a single-segment chunk that
  must be "IsNext" is split inside the segment (BERT's "sentences" are arbitrary spans of
  contiguous text, §3). ``reference_nsp_sampling=True`` restores the reference behaviour.
* Whole-word groups only join *adjacent* pieces (a ``##`` piece right after [SEP] does not
  join the last word of segment A).

Registered as objective ``bert_mlm_nsp`` (``OBJECTIVE``; the record reader, vocabulary state
and config check are the masked-LM ones of ``mlm_objective.py``, with the ``nsp`` task).
"""

from __future__ import annotations

import random
from typing import NamedTuple, Sequence

import tensorflow as tf

from lmfactory.components.pretraining_data import registry
from lmfactory.components.pretraining_data.masking import (  # noqa: F401  (re-exported)
    BertVocabulary, MaskedLmPredictions, count_masking, create_masked_lm_predictions,
    int_feature, masked_lm_features, masking_stats, padded)
from lmfactory.components.pretraining_data.mlm_objective import (
    SentenceTask, masked_lm_objective)
# The instances and records of a shard (no TensorFlow there: what a Beam worker imports).
from lmfactory.components.pretraining_data.nsp_instances import (  # noqa: F401  (re-exported)
    IS_NEXT, NOT_NEXT, NSP_FEATURE, PairSpans, create_pair_spans, seeded_rng, segment_starts,
    shard_examples, truncation)

NSP = SentenceTask("nsp", NSP_FEATURE)


class TrainingInstance(NamedTuple):
    """One ``[CLS] A [SEP] B [SEP]`` sequence before masking."""

    tokens: list
    segment_ids: list
    is_random_next: bool


def create_instances_from_document(documents: Sequence[Sequence[Sequence]],
                                   document_index: int, max_seq_length: int,
                                   short_seq_prob: float, rng: random.Random, cls_id,
                                   sep_id, reference_nsp_sampling: bool = False) -> list:
    """Sentence-pair instances of ``documents[document_index]`` (BERT App. A.2) as token
    lists: :func:`create_pair_spans` laid out as ``[CLS] A [SEP] B [SEP]``.

    ``documents`` is the list of documents available for random-next sampling (one shard),
    each a list of segments (sequences of token ids, or of any per-token items).
    """
    spans = create_pair_spans(_LazyStarts(documents), document_index, max_seq_length,
                              short_seq_prob, rng, reference_nsp_sampling)
    streams = {}
    instances = []
    for span in spans:
        for document in (span.a_document, span.b_document):
            if document not in streams:
                streams[document] = [t for segment in documents[document] for t in segment]
        tokens_a = streams[span.a_document][span.a_start:span.a_end]
        tokens_b = streams[span.b_document][span.b_start:span.b_end]
        tokens = [cls_id] + tokens_a + [sep_id] + tokens_b + [sep_id]
        segment_ids = [0] * (len(tokens_a) + 2) + [1] * (len(tokens_b) + 1)
        instances.append(TrainingInstance(tokens, segment_ids, span.is_random_next))
    return instances


class _LazyStarts:
    """``segment_starts`` of each document, computed when asked (one document at a time)."""

    def __init__(self, documents):
        self._documents = documents

    def __len__(self) -> int:
        return len(self._documents)

    def __getitem__(self, index: int) -> list:
        return segment_starts(self._documents[index])


def truncate_seq_pair(tokens_a: list, tokens_b: list, max_num_tokens: int,
                      rng: random.Random) -> None:
    """Trims the longer of A/B, one token at a time from a random end, in place (App. A.2;
    :func:`truncation`)."""
    a_front, a_back, b_front, b_back = truncation(len(tokens_a), len(tokens_b),
                                                  max_num_tokens, rng)
    for tokens, front, back in ((tokens_a, a_front, a_back), (tokens_b, b_front, b_back)):
        del tokens[len(tokens) - back:]
        del tokens[:front]


# --------------------------------------------------------------------------- records


def to_tf_example(tokens, segment_ids, is_random_next: bool, max_seq_length: int,
                  masked: MaskedLmPredictions | None, max_predictions_per_seq: int
                  ) -> tf.train.Example:
    """The google-research/bert feature layout (CONTRACTS §3); no ``masked_lm_*`` when
    ``masked`` is None (dynamic masking)."""
    return pair_example(tokens, segment_ids, NSP.feature,
                        NOT_NEXT if is_random_next else IS_NEXT, max_seq_length, masked,
                        max_predictions_per_seq)


def pair_example(tokens, segment_ids, label_name: str, label: int, max_seq_length: int,
                 masked: MaskedLmPredictions | None, max_predictions_per_seq: int
                 ) -> tf.train.Example:
    """A two-segment record with one sentence-level label (NSP here, SOP in ALBERT)."""
    input_ids = masked.output_tokens if masked is not None else tokens
    features = {
        "input_ids": int_feature(padded(input_ids, max_seq_length)),
        "input_mask": int_feature(padded([1] * len(tokens), max_seq_length)),
        "segment_ids": int_feature(padded(segment_ids, max_seq_length)),
        label_name: int_feature([label]),
    }
    if masked is not None:
        features.update(masked_lm_features(masked, max_predictions_per_seq))
    return tf.train.Example(features=tf.train.Features(feature=features))


OBJECTIVE = registry.register(masked_lm_objective(
    "bert_mlm_nsp", shard_examples, NSP,
    paper="Devlin et al. 2019, BERT: Pre-training of Deep Bidirectional Transformers for "
          "Language Understanding, §3.1 (masked LM, next-sentence prediction)"))
