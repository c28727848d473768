"""word2vec training windows (Mikolov et al. 2013a §3, 2013b §2.3): the ``skipgram`` and
``cbow`` objectives.

Both models read the same thing from the corpus: a centre word and the words around it. So
both objectives write the same record, one per kept centre word (built by
``word_window_records.py``: unknown and special tokens dropped, frequent-word subsampling,
a dynamic window per centre word):

* ``centre_id[1]``, the centre word;
* ``context_ids[2W]`` and ``context_mask[2W]`` (W = ``window``), the words at distance
  1..b on either side inside the sentence, padded with 0 / mask 0.

and their converters turn it into what the task models train on (skip-gram: every real
(centre, context) pair predicts the context word from the centre, 2013a §3.2; CBOW: the
mean of the context vectors predicts the centre, §3.1).

Word counts come from the vocabulary (the ``word`` tokenizer kind saves per-word corpus
counts); ``pretraining_config.json`` records them as ``token_counts`` (by id), so the task
model's negative-sampling table (unigram^0.75, 2013b §2.2) is built from the same counts.
``dupe_factor`` passes are written, each with its own subsampling and windows. Negatives
are drawn by the task model at train time.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from lmfactory.components.pretraining_data import registry
# What a Beam worker runs (numpy only); re-exported.
from lmfactory.components.pretraining_data.word_window_records import (  # noqa: F401
    WordStatistics, pass_windows, seeded_generator, shard_examples, subsample, windows)

SKIPGRAM = "skipgram"
CBOW = "cbow"
PAPERS = ("Mikolov, Chen, Corrado, Dean 2013, Efficient Estimation of Word Representations in "
          "Vector Space, §3 (CBOW, skip-gram); Mikolov, Sutskever, Chen, Corrado, Dean 2013, "
          "Distributed Representations of Words and Phrases and their Compositionality, §2.2 "
          "(negative sampling), §2.3 (subsampling)")


# --------------------------------------------------------------------------- registry record


def word_statistics(tokenizer, tokenizer_config: dict) -> WordStatistics:
    """The per-id corpus counts the ``word`` tokenizer kind records (``counts.txt``); the
    special tokens (``unk`` counts every out-of-vocabulary word) are not words."""
    from lmfactory.models.tokenizers.word import word_counts

    if tokenizer_config.get("kind") != "word":
        raise ValueError(f"word2vec's objectives need per-word corpus counts: use the 'word' "
                         f"tokenizer kind, not {tokenizer_config.get('kind')!r}")
    counts = word_counts(tokenizer_config[registry.VOCABULARY_FOLDER])
    specials = tokenizer_config.get("special_tokens", {}).values()
    special_ids = [tokenizer.token_to_id(token) for token in specials]
    return WordStatistics(list(counts), special_ids)


def check_config(config: dict) -> None:
    window = config["window"]
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(f"window must be an integer >= 1, got {window!r}")
    if not 0.0 <= float(config["subsample_threshold"]) < 1.0:
        raise ValueError(f"subsample_threshold must lie in [0, 1) (0 = no subsampling), got "
                         f"{config['subsample_threshold']!r}")


def feature_spec(config: dict) -> dict:
    length = 2 * int(config["window"])
    return {"centre_id": tf.io.FixedLenFeature([1], tf.int64),
            "context_ids": tf.io.FixedLenFeature([length], tf.int64),
            "context_mask": tf.io.FixedLenFeature([length], tf.int64)}


def window_batch(features: dict):
    """Records -> x = ``{"centre_ids" [B], "context_ids" [B, 2W], "context_mask" [B, 2W]
    bool}``, y = the centre ids [B], sample_weight = the context mask as float [B, 2W]
    (the task models compute their loss from x)."""
    centre_ids = tf.cast(features["centre_id"][:, 0], tf.int32)
    context_mask = features["context_mask"] > 0
    x = {"centre_ids": centre_ids,
         "context_ids": tf.cast(features["context_ids"], tf.int32),
         "context_mask": context_mask}
    return x, centre_ids, tf.cast(context_mask, tf.float32)


def converter(config: dict):
    return window_batch


def vocabulary_record(statistics: WordStatistics) -> dict:
    """``token_counts``: the corpus count of every id, 0 for the special tokens (the noise
    distribution's source: ``unk`` and the others are never drawn as negatives)."""
    counts = np.where(statistics.is_word, statistics.counts, 0)
    return {"token_counts": [int(count) for count in counts]}


for _name in (SKIPGRAM, CBOW):
    registry.register(registry.Objective(
        name=_name, document=registry.SENTENCES, vocabulary_state=word_statistics,
        shard_examples=shard_examples, feature_spec=feature_spec, converter=converter,
        check_config=check_config, vocabulary_record=vocabulary_record, paper=PAPERS))
