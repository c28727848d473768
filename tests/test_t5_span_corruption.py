"""The span-corruption objective (Raffel et al. 2020 §3.1.4, the reference's
``random_spans_helper`` / ``random_spans_noise_mask``) and the SentencePiece vocabulary
with sentinels at its top: exact lengths (568 raw tokens -> 512 inputs / 114 targets),
the corruption itself, noise and span counts on WikiText-2 text, determinism per seed."""

import numpy as np
import pytest
import tensorflow as tf

from lmfactory import models
from lmfactory.components.pretraining_data import features, span_corruption
from lmfactory.components.vocabulary import sentence_piece

VOCABULARY = 32128
SENTINELS = [VOCABULARY - 1 - i for i in range(100)]
STATE = {"eos_id": 1, "sentinel_ids": SENTINELS}


def _config(max_seq_length=512):
    return features.resolve_config({"objective": "span_corruption",
                                    "max_seq_length": max_seq_length})


def _parse(records, config):
    spec = features.feature_spec(config)
    return [{k: v.numpy() for k, v in tf.io.parse_single_example(r, spec).items()}
            for r in records]


@pytest.fixture(scope="module")
def wikitext_ids(shared_data):
    """WikiText-2 valid as word ids (3.., one id per distinct word): real text."""
    text = (shared_data / "wikitext-2" / "valid.txt").read_text(encoding="utf-8")
    ids, documents = {}, []
    for paragraph in text.split("\n\n"):
        words = paragraph.split()
        if words:
            documents.append([ids.setdefault(w, 3 + len(ids) % 30000) for w in words])
    return documents


def test_568_raw_tokens_give_512_inputs_and_114_targets():
    assert span_corruption.random_spans_helper(512, 0.15) == (568, 114)
    assert span_corruption.span_counts(568, 0.15) == (85, 28)
    config = _config()
    assert {k: v.shape for k, v in features.feature_spec(config).items()} == {
        "inputs": [512], "targets": [114]}
    document = list(np.random.default_rng(0).integers(3, 30000, 568))
    records, stats = span_corruption.shard_examples([document], STATE, config, (1, "train", 0))
    (example,) = _parse(records, config)
    assert (example["inputs"] != 0).sum() == 512 and (example["targets"] != 0).sum() == 114
    assert stats == {"segments": 1, "tokens": 568, "noise_tokens": 85, "noise_spans": 28}


def test_spans_become_sentinels_counting_down_and_targets_hold_the_spans():
    tokens = [10, 11, 12, 13, 14, 15, 16, 17, 18, 19]
    mask = np.array([0, 1, 1, 0, 0, 0, 1, 0, 0, 1], bool)
    inputs, targets = span_corruption.corrupt(tokens, mask, SENTINELS, eos_id=1)
    top = VOCABULARY - 1  # <extra_id_0> is the last id, <extra_id_1> one below, ...
    assert inputs == [10, top, 13, 14, 15, top - 1, 17, 18, top - 2, 1]
    assert targets == [top, 11, 12, top - 1, 16, top - 2, 19, 1]
    # A noise mask has exactly the reference's counts, non-noise first and noise last.
    rng = np.random.default_rng(3)
    for length in (2, 10, 35, 568, 1000):
        drawn = span_corruption.noise_mask(length, 0.15, rng)
        noise, spans = span_corruption.span_counts(length, 0.15)
        assert drawn.sum() == noise and not drawn[0] and drawn[-1]
        assert int(np.sum(drawn[1:] & ~drawn[:-1])) == spans


def test_noise_and_span_counts_on_wikitext(wikitext_ids):
    config = _config()
    records, stats = span_corruption.shard_examples(wikitext_ids, STATE, config,
                                                    (7, "train", 0))
    parsed = _parse(records, config)
    full = stats["tokens"] // 568
    assert stats["segments"] == full + (stats["tokens"] % 568 >= 2)
    for example in parsed[:full]:  # every full segment: 512 inputs / 114 targets exactly
        inputs, targets = example["inputs"], example["targets"]
        assert (inputs != 0).sum() == 512 and (targets != 0).sum() == 114
        sentinels = inputs[inputs >= SENTINELS[-1]]
        assert sentinels.tolist() == SENTINELS[:28]  # 28 spans, in order
        assert targets[targets >= SENTINELS[-1]].tolist() == SENTINELS[:28]
    noise_fraction = stats["noise_tokens"] / stats["tokens"]
    mean_span = stats["noise_tokens"] / stats["noise_spans"]
    print(f"WikiText-2 valid: {stats['tokens']} tokens, {stats['segments']} segments, "
          f"noise fraction {noise_fraction:.4f}, mean span length {mean_span:.3f}")
    assert abs(noise_fraction - 0.15) < 0.002 and abs(mean_span - 3.0) < 0.1


def test_records_are_deterministic_per_seed(wikitext_ids):
    config = _config(64)
    documents = wikitext_ids[:5]
    first, _ = span_corruption.shard_examples(documents, STATE, config, (1, "train", 0))
    again, _ = span_corruption.shard_examples(documents, STATE, config, (1, "train", 0))
    other, _ = span_corruption.shard_examples(documents, STATE, config, (2, "train", 0))
    assert first == again and first != other


def test_the_batch_is_teacher_forcing_from_the_start_id():
    config = _config(16)
    records, _ = span_corruption.shard_examples([list(range(3, 20))], STATE, config, (0,))
    batch = features.feature_spec(config)
    parsed = tf.io.parse_example(tf.constant(records), batch)
    x, y, weights = span_corruption.span_corruption_batch(parsed)
    real = int(weights.numpy()[0].sum())
    assert x["decoder_token_ids"].numpy()[0, 0] == 0
    assert x["decoder_token_ids"].numpy()[0, 1:real].tolist() == y.numpy()[0, :real - 1].tolist()
    assert y.numpy()[0, real - 1] == 1 and (y.numpy()[0, real:] == 0).all()


def test_sentencepiece_vocabulary_puts_the_sentinels_at_the_top(shared_data):
    specials = models.get("t5").special_tokens
    text = (shared_data / "wikitext-2" / "valid.txt").read_text(encoding="utf-8")
    counts = {}
    for word in sentence_piece.pretokenize_lines(text.splitlines()[:400]):
        counts[word] = counts.get(word, 0) + 1
    model = sentence_piece.learn_model(counts.items(), 600, specials)
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor(model_proto=model)
    assert processor.get_piece_size() == 600
    assert [processor.id_to_piece(i) for i in (0, 1, 2)] == ["<pad>", "<unk>", "</s>"]
    assert processor.piece_to_id("<extra_id_0>") == 599
    assert processor.piece_to_id("<extra_id_99>") == 500
    assert max(processor.encode("the <extra_id_0> game")) < 500  # never produced from text

    class Tokenizer:  # the objective's view of that vocabulary
        def token_to_id(self, token):
            return processor.piece_to_id(token)

        def vocabulary_size(self):
            return processor.get_piece_size()

    state = span_corruption.vocabulary_state(Tokenizer(), {"special_tokens": specials})
    assert state["sentinel_ids"][:2] == [599, 598] and state["eos_id"] == 2
    shuffled = dict(specials, sentinel_0="<extra_id_5>")
    with pytest.raises(ValueError, match="count down from the last id"):
        span_corruption.vocabulary_state(Tokenizer(), {"special_tokens": shuffled})
    with pytest.raises(ValueError, match="sentinel"):
        span_corruption.vocabulary_state(Tokenizer(), {"special_tokens": {
            "pad": "<pad>", "end_of_text": "</s>"}})


def test_vocabulary_config_accepts_numbered_sentinel_roles_only():
    from lmfactory.components.vocabulary.executor import VocabularyConfig

    specials = models.get("t5").special_tokens
    config = VocabularyConfig(kind="sentencepiece", vocab_size=600, special_tokens=specials)
    assert config.resolved_special_tokens["sentinel_99"] == "<extra_id_99>"
    with pytest.raises(ValueError, match="unknown role"):
        VocabularyConfig(kind="sentencepiece", vocab_size=600,
                         special_tokens=dict(specials, sentinel_x="<x>"))
