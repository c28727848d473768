"""SQuAD span question answering (Devlin et al. 2019 §4.2-4.3): the reader, the windowed
featurizer with character offsets, the span head and its loss, n-best decoding with the
v2.0 null score, and the serving SavedModel."""

import collections
import json
import math
import os

import numpy as np
import pytest
import tensorflow as tf

from lmfactory import models
from lmfactory.components.example_gen import squad
from lmfactory.components.vocabulary import wordpiece
from lmfactory.models.tasks import span_decoding
from lmfactory.models.tasks.span_extractor import MASKED_LOGIT, SpanExtractor, span_loss
from lmfactory.models.tasks.span_preprocessor import (answer_positions, byte_offset,
                                                      span_preprocessor)
from lmfactory.models.tokenizers import load_tokenizer, write_tokenizer_config

SQUAD_DEV = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "squad",
                         "dev-v1.1.json")
LETTERS = "a b c d e f g h i j k l m n o p"
TEXTS = ["The café opened in 1895 (Paris), near Zürich's old-town — said Ünïcödé.",
         "Who opened the café? When was it opened?", LETTERS, "x y z",
         "Tesla moved to New York City in 1884; he worked for Edison."]


def _write(path, data):
    with open(path, "w") as f:
        json.dump(data, f)
    return str(path)


# --- reader ------------------------------------------------------------------------------
V1 = {"version": "1.1", "data": [{"title": "T", "paragraphs": [{
    "context": "Paris is in France.",
    "qas": [{"id": "q1", "question": "Where is Paris?",
             "answers": [{"text": "France", "answer_start": 12},
                         {"text": "in France", "answer_start": 9}]}]}]}]}
V2 = {"version": "v2.0", "data": [{"title": "T", "paragraphs": [{
    "context": "Paris is in France.",
    "qas": [{"id": "q1", "question": "Where is Paris?", "is_impossible": False,
             "answers": [{"text": "France", "answer_start": 12}]},
            {"id": "q2", "question": "Where is Rome?", "is_impossible": True, "answers": [],
             "plausible_answers": [{"text": "France", "answer_start": 12}]}]}]}]}


def test_reader_v1(tmp_path):
    read = squad.read_squad(_write(tmp_path / "v1.json", V1))
    assert read.version == "1.1" and read.num_malformed == 0
    (record,) = read.records
    assert (record.id, record.question, record.context) == ("q1", "Where is Paris?",
                                                            "Paris is in France.")
    assert record.answers == ("France", "in France") and record.answer_starts == (12, 9)
    assert not record.is_impossible and record.title == "T"


def test_reader_v2_unanswerable(tmp_path):
    read = squad.read_squad(_write(tmp_path / "v2.json", V2))
    answerable, impossible = read.records
    assert answerable.answers == ("France",) and not answerable.is_impossible
    assert impossible.is_impossible and impossible.answers == ()
    assert impossible.plausible_answers == ("France",)
    assert squad.gold_answers(read.records) == {"q1": ["France"], "q2": []}


def test_reader_malformed_entry_named_and_counted(tmp_path):
    data = json.loads(json.dumps(V1))
    qas = data["data"][0]["paragraphs"][0]["qas"]
    qas.append({"id": "bad", "question": "?", "answers": [{"text": "Rome",
                                                             "answer_start": 0}]})
    qas.append({"question": "no id", "answers": []})
    path = _write(tmp_path / "broken.json", data)
    with pytest.raises(ValueError, match=r"broken\.json.*article 'T', paragraph 0, qas\[1\]"
                                         r".*'bad'.*'Rome' is not at answer_start 0"):
        squad.read_squad(path)
    read = squad.read_squad(path, skip_malformed=True)
    assert [r.id for r in read.records] == ["q1"]
    assert read.malformed == {"answer_not_at_start": 1, "missing_id": 1}
    assert "broken.json" in read.messages[0] and "qas[2]" in read.messages[1]


def test_reader_real_dev_file_counts():
    read = squad.read_squad(SQUAD_DEV)
    assert len(read.records) == 10570 and read.num_malformed == 0
    assert read.num_articles == 48 and len({r.context for r in read.records}) == 2067
    assert sum(len(r.answers) for r in read.records) == 34726
    train, held = squad.split_by_article(read.records, 0.8)
    assert not {r.title for r in train} & {r.title for r in held}
    v2 = squad.make_unanswerable(held, 0.5, seed=1)
    impossible = [r for r in v2 if r.is_impossible]
    assert 0.4 < len(impossible) / len(v2) < 0.6
    original = {r.id: r for r in held}
    for record in impossible[:50]:
        assert record.context not in {r.context for r in held
                                      if r.title == original[record.id[:-13]].title}


# --- vocabulary / featurizer -------------------------------------------------------------
@pytest.fixture(scope="module")
def vocab_dir(tmp_path_factory):
    read = squad.read_squad(SQUAD_DEV)
    lines = TEXTS + [r.context for r in read.records[:300:3]] + [r.question
                                                                for r in read.records[:300]]
    counts = collections.Counter(wordpiece.pretokenize_lines(lines))
    counts.update({letter: 5 for letter in LETTERS.split()})
    folder = str(tmp_path_factory.mktemp("vocab"))
    wordpiece.write_files(folder, wordpiece.learn_vocabulary(counts.items(), 1200,
                                                             min_frequency=1))
    write_tokenizer_config(folder, wordpiece.tokenizer_config(True, True))
    return folder


def test_context_ids_match_tokenizer_and_offsets_are_substrings(vocab_dir):
    preprocessor = span_preprocessor(vocab_dir, 32, 8, 8)
    tokenizer = load_tokenizer(vocab_dir)
    read = squad.read_squad(SQUAD_DEV)
    # Ids: every paragraph of the dev file gives the tokenizer's ids.
    every = sorted({r.context for r in read.records})
    all_ids, _, _ = preprocessor.context_tokens(tf.constant(every))
    assert all_ids.to_list() == [list(row) for row in tokenizer(tf.constant(every))]
    contexts = TEXTS + ["a\u00a0b\x00c\tD\u0301e", "中文字 ok", ""] + every[::40]
    ids, start, end = preprocessor.context_tokens(tf.constant(contexts))
    expected = tokenizer(tf.constant(contexts))
    for row, context in enumerate(contexts):
        assert ids[row].numpy().tolist() == list(expected[row]), context[:60]
        raw = context.encode("utf-8")
        pieces = [raw[s:e].decode("utf-8") for s, e in zip(start[row].numpy(),
                                                             end[row].numpy())]
        # Each piece is the original text it came from: normalised, it is the token.
        if not pieces:
            continue
        vocabulary = tokenizer.get_vocabulary()
        normalized = tokenizer.normalize(tf.constant(pieces)).numpy()
        for piece, text, token in zip(pieces, normalized, ids[row].numpy()):
            if vocabulary[token] != "[UNK]":
                assert text.decode() == vocabulary[token].removeprefix("##"), (piece, context)
    raw0 = contexts[0].encode("utf-8")
    tokens0 = [raw0[s:e].decode() for s, e in zip(start[0].numpy(), end[0].numpy())]
    assert "café" in tokens0 and "Zürich" in "".join(tokens0) and "—" in tokens0
    assert "(" in tokens0 and "1895" in "".join(tokens0)
    raw5 = contexts[5].encode("utf-8")
    assert [raw5[s:e].decode() for s, e in zip(start[5].numpy(), end[5].numpy())][-1] in (
        "e", "D\u0301e", "\u0301e")


def _reference_windows(num_doc, room, stride):
    """run_squad.py's doc-span loop and _check_is_max_context."""
    spans, begin = [], 0
    while begin < num_doc:
        length = min(num_doc - begin, room)
        spans.append((begin, length))
        if begin + length == num_doc:
            break
        begin += min(length, stride)
    best = {}
    for position in range(num_doc):
        scores = [(min(position - b, b + n - 1 - position) + 0.01 * n, -k)
                  for k, (b, n) in enumerate(spans) if b <= position < b + n]
        best[position] = -max(scores)[1]
    return spans, best


def test_windows_stride_labels_and_max_context(vocab_dir):
    preprocessor = span_preprocessor(vocab_dir, sequence_length=16, doc_stride=4,
                                     max_query_length=2)
    # [CLS] x y [SEP] (question truncated to 2 tokens), then the paragraph from position 4;
    # room = 16 - 3 - 2 = 11 letters a window.
    out = {k: v.numpy() for k, v in preprocessor(tf.constant(["x y z"]),
                                                 tf.constant([LETTERS])).items()}
    spans, best = _reference_windows(16, 11, 4)
    assert spans == [(0, 11), (4, 11), (8, 8)]
    assert out["example_index"].tolist() == [0, 0, 0]
    assert (out["token_ids"][:, 0] == 2).all() and out["segment_ids"][0, :4].sum() == 0
    for w, (begin, length) in enumerate(spans):
        docs = out["token_doc_index"][w]
        assert docs[4:4 + length].tolist() == list(range(begin, begin + length))
        assert (docs[:4] == -1).all() and (docs[4 + length:] == -1).all()
        assert out["segment_ids"][w, 4:5 + length].tolist() == [1] * (length + 1)
        for pos in range(4, 4 + length):
            assert out["max_context"][w, pos] == (best[docs[pos]] == w)
        assert out["span_mask"][w].tolist() == [True] + [False] * 3 + [True] * length + [
            False] * (12 - length)
    # "m" (token 12) is only in windows 1 and 2: window 0 points at [CLS].
    starts, ends = answer_positions(out, [LETTERS], [LETTERS.index("m")], ["m"])
    assert starts.tolist() == [0, 4 + 12 - 4, 4 + 12 - 8] and ends.tolist() == starts.tolist()
    # "j k l" crosses window 0's end (tokens 9..11, window 0 holds 0..10) -> [CLS] there.
    starts, ends = answer_positions(out, [LETTERS], [LETTERS.index("j")], ["j k l"])
    assert starts.tolist() == [0, 4 + 9 - 4, 4 + 9 - 8] and ends.tolist() == [0, 11, 7]
    # Unanswerable (v2.0): every window points at [CLS].
    starts, ends = answer_positions(out, [LETTERS], [0], [""])
    assert starts.tolist() == ends.tolist() == [0, 0, 0]


def test_window_count_matches_reference_loop(vocab_dir):
    preprocessor = span_preprocessor(vocab_dir, sequence_length=20, doc_stride=3,
                                     max_query_length=3)
    letters = LETTERS.split()
    contexts = [" ".join((letters * 3)[:n]) for n in (1, 14, 15, 16, 29, 40)]
    out = preprocessor(tf.constant(["a b c d"] * len(contexts)), tf.constant(contexts))
    example = out["example_index"].numpy()
    for row, context in enumerate(contexts):
        spans, best = _reference_windows(len(context.split()), 20 - 3 - 3, 3)
        rows = np.nonzero(example == row)[0]
        assert len(rows) == len(spans)
        for w, (begin, _) in zip(rows, spans):
            docs = out["token_doc_index"].numpy()[w]
            assert docs[5] == begin
            for pos in np.nonzero(docs >= 0)[0]:
                assert out["max_context"].numpy()[w, pos] == (rows[best[docs[pos]]] == w)


def test_offsets_map_a_span_back_to_the_original_text(vocab_dir):
    preprocessor = span_preprocessor(vocab_dir, 64, 16, 8)
    context = "Le café de Zürich — ouvert en 1895 (Paris), « très » cher!"
    out = {k: v.numpy() for k, v in preprocessor(tf.constant(["quand?"]),
                                                 tf.constant([context])).items()}
    for answer_text in ("café de Zürich", "1895 (Paris)", "« très »", "Zürich — ouvert",
                        "cher!"):
        char = context.index(answer_text)
        starts, ends = answer_positions(out, [context], [char], [answer_text])
        begin, stop = out["token_start"][0, starts[0]], out["token_end"][0, ends[0]]
        assert context.encode()[begin:stop].decode() == answer_text
        assert begin == byte_offset(context, char)


# --- decoding ----------------------------------------------------------------------------
def _hand_features(context_tokens, length=8, max_context=None):
    """One window: [CLS] q [SEP] then ``context_tokens`` (one-letter words) from position 3."""
    n = len(context_tokens)
    doc = -np.ones((1, length), np.int32)
    doc[0, 3:3 + n] = np.arange(n)
    start = -np.ones((1, length), np.int32)
    end = -np.ones((1, length), np.int32)
    start[0, 3:3 + n] = np.arange(n) * 2
    end[0, 3:3 + n] = np.arange(n) * 2 + 1
    mc = doc >= 0 if max_context is None else np.asarray([max_context])
    return {"example_index": np.zeros(1, np.int32), "token_doc_index": doc,
            "token_start": start, "token_end": end, "max_context": mc}


def _logits(values, length=8):
    row = np.full((1, length), MASKED_LOGIT, np.float32)
    for position, value in values.items():
        row[0, position] = value
    return row


def test_decode_best_span_rules():
    context = "a b c d e"
    features = _hand_features(context.split())
    # Best start 5 ("c"), best end 3 ("a") is before it -> the next best valid pair.
    start = _logits({0: 0.0, 5: 4.0, 3: 1.0})
    end = _logits({0: 0.0, 3: 5.0, 6: 2.0})
    (prediction,) = span_decoding.decode(features, start, end, [context])
    assert prediction.text == "c d" and prediction.score == pytest.approx(6.0)
    assert prediction.n_best[0][0] == "c d" and prediction.n_best[1][0] == "a"
    assert prediction.null_score == 0.0 and prediction.null_margin == pytest.approx(-6.0)
    # max_answer_length=1 keeps only one-token spans.
    (short,) = span_decoding.decode(features, start, end, [context], max_answer_length=1)
    assert short.text == "a" and short.score == pytest.approx(6.0)
    # A start token scored by another window (max-context rule) is skipped.
    masked = _hand_features(context.split(),
                            max_context=[False] * 3 + [True, True, False, True, True])
    (other,) = span_decoding.decode(masked, start, end, [context])
    assert other.text == "a" and other.score == pytest.approx(6.0)
    # Question / padding positions are never answers even with the highest logits.
    (never,) = span_decoding.decode(features, _logits({1: 9.0, 4: 1.0}),
                                    _logits({2: 9.0, 4: 1.0}), [context])
    assert never.text == "b"


def test_decode_null_score_v2():
    context = "a b c"
    features = _hand_features(context.split())
    start, end = _logits({0: 3.0, 3: 1.0}), _logits({0: 2.0, 4: 1.5})
    (prediction,) = span_decoding.decode(features, start, end, [context])
    assert prediction.text == "a b" and prediction.null_margin == pytest.approx(5.0 - 2.5)
    assert span_decoding.answer(prediction, None) == "a b"       # v1.1: always a span
    assert span_decoding.answer(prediction, 0.0) == ""           # s_null > s_span + 0
    assert span_decoding.answer(prediction, 3.0) == "a b"        # τ = 3 keeps the span
    # No valid span at all: empty text, margin +inf (abstains under any threshold).
    (empty,) = span_decoding.decode(_hand_features([]), start, end, [""])
    assert empty.text == "" and math.isinf(empty.null_margin)


def test_graph_decoding_agrees_with_numpy(vocab_dir):
    preprocessor = span_preprocessor(vocab_dir, sequence_length=24, doc_stride=5,
                                     max_query_length=4)
    contexts = [LETTERS + " " + LETTERS, "Tesla moved to New York City in 1884.", "x"]
    features = preprocessor(tf.constant(["a b", "who moved?", "q"]), tf.constant(contexts))
    numpy_features = {k: v.numpy() for k, v in features.items()}
    rng = np.random.default_rng(0)
    for _ in range(3):
        shape = numpy_features["token_ids"].shape
        start = np.where(numpy_features["span_mask"], rng.normal(size=shape),
                         MASKED_LOGIT).astype(np.float32)
        end = np.where(numpy_features["span_mask"], rng.normal(size=shape),
                       MASKED_LOGIT).astype(np.float32)
        expected = span_decoding.decode(numpy_features, start, end, contexts, 5, 4)
        got = span_decoding.decode_graph(features, start, end, tf.constant(contexts), 5, 4)
        assert [t.decode() for t in got["text"].numpy()] == [p.text for p in expected]
        np.testing.assert_allclose(got["null_margin"].numpy(),
                                   [p.null_margin for p in expected], rtol=1e-5, atol=1e-5)


# --- head, loss, serving -----------------------------------------------------------------
def _tiny_model(vocab_dir):
    backbone = models.build("bert", "tiny", vocabulary_size=len(
        load_tokenizer(vocab_dir).get_vocabulary()), num_layers=2, hidden_dim=32,
        num_heads=2, intermediate_dim=64, max_sequence_length=64)
    return SpanExtractor(backbone)


def test_span_extractor_masking_loss_and_config(vocab_dir):
    model = _tiny_model(vocab_dir)
    preprocessor = span_preprocessor(vocab_dir, 32, 8, 8)
    features = preprocessor(tf.constant(["who moved?", "when?"]),
                            tf.constant([TEXTS[4], TEXTS[0]]))
    inputs = {name: tf.cast(features[name], tf.int32) for name in model.input}
    assert sorted(inputs) == ["padding_mask", "segment_ids", "span_mask", "token_ids"]
    out = model(inputs, training=False)
    span_mask = features["span_mask"].numpy()
    for key in ("start_logits", "end_logits"):
        logits = out[key].numpy()
        assert logits.shape == span_mask.shape
        assert (logits[~span_mask] == MASKED_LOGIT).all()
        assert (np.abs(logits[span_mask]) < 10).all()
    y = {"start_positions": np.array([3, 0]), "end_positions": np.array([5, 0])}
    loss = float(span_loss(y, out))

    def nll(logits, labels):
        logits = logits.astype(np.float64)
        log_z = np.log(np.exp(logits - logits.max(1, keepdims=True)).sum(1)) + logits.max(1)
        return np.mean(log_z - logits[np.arange(len(labels)), labels])

    expected = (nll(out["start_logits"].numpy(), y["start_positions"])
                + nll(out["end_logits"].numpy(), y["end_positions"])) / 2
    assert loss == pytest.approx(expected, rel=1e-5)
    assert float(model.compute_loss(inputs, y, out)) == pytest.approx(expected, rel=1e-5)
    clone = SpanExtractor.from_config(model.get_config())
    clone.set_weights(model.get_weights())
    np.testing.assert_allclose(clone(inputs)["end_logits"], out["end_logits"], atol=1e-6)
    # A few steps on one batch lower the loss (the head and backbone train).
    model.compile(optimizer="adam")
    first = model.train_on_batch(inputs, y, return_dict=True)["span_loss"]
    for _ in range(8):
        last = model.train_on_batch(inputs, y, return_dict=True)["span_loss"]
    assert last < first


def test_serving_round_trip(vocab_dir, tmp_path):
    from lmfactory.models.tasks.span_serving import export

    model = _tiny_model(vocab_dir)
    preprocessor = span_preprocessor(vocab_dir, sequence_length=24, doc_stride=6,
                                     max_query_length=6)
    questions = ["Who opened the café?", "When did Tesla move?"]
    contexts = [TEXTS[0], TEXTS[4] + " " + TEXTS[4]]
    features = {k: v.numpy() for k, v in preprocessor(tf.constant(questions),
                                                      tf.constant(contexts)).items()}
    assert len(features["example_index"]) > 2  # the second context needs several windows
    logits = model.predict({n: features[n].astype("int32") for n in model.input}, verbose=0)
    expected = span_decoding.decode(features, logits["start_logits"], logits["end_logits"],
                                    contexts)
    # v2.0: a threshold between the two margins makes one question abstain.
    margins = [p.null_margin for p in expected]
    threshold = (margins[0] + margins[1]) / 2
    path = export(preprocessor, model, str(tmp_path / "serving"), null_threshold=threshold)
    serve = tf.saved_model.load(path).signatures["serving_default"]
    got = serve(question=tf.constant(questions), context=tf.constant(contexts))
    spans = [a.decode("utf-8") for a in got["span"].numpy()]
    assert spans == [p.text for p in expected] and all(spans)
    for span, context in zip(spans, contexts):
        assert span in context
    np.testing.assert_allclose(got["null_margin"].numpy(), margins, rtol=1e-4, atol=1e-4)
    answers = [a.decode("utf-8") for a in got["answer"].numpy()]
    assert answers == [span_decoding.answer(p, threshold) for p in expected]
    assert sorted(answer == "" for answer in answers) == [False, True]
    with pytest.raises(tf.errors.InvalidArgumentError, match="same batch size"):
        serve(question=tf.constant(questions), context=tf.constant(contexts[:1]))
