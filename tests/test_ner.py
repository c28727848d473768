"""NER (token tagging): CoNLL reader, first-sub-token featurizer, TokenClassifier
loss and the serving SavedModel (the DAG fine-tunes it on WNUT-17: tests/test_pipeline_tasks.py)."""

import io

import keras
import numpy as np
import pytest
import tensorflow as tf

from lmfactory import models
from lmfactory.components.example_gen import conll, formats
from lmfactory.components.tasks.tagging_serving import SERVING_SIGNATURE, export_tagger
from lmfactory.models.tasks.ner_training import predict_tags, tagging_dataset
from lmfactory.models.tasks.token_classification_preprocessor import (
    TokenClassificationPreprocessor, word_predictions)
from lmfactory.models.tasks.token_classifier import TokenClassifier
from lmfactory.models.tokenizers import BertWordPieceTokenizer

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "un", "##aff", "##able", "the", "cat",
         "sat", "on", "mat", "@", "!", "a", "paris", "london", "is", "big"]
LABELS = ["O", "B-location", "I-location", "B-person", "I-person"]

SMALL_FILE = (
    "-DOCSTART-\tO\n"
    "\n"
    "Paris\tB-location\n"
    "is\tO\n"
    "big\tO\n"
    "\t\n"                      # a lone tab separates sentences (WNUT-17 train)
    "London\tB-location\n"
    "notab\n"                   # malformed: no tab
    "\tO\n"                     # malformed: empty token
    "calling\tO\n"
    "   \n"                     # whitespace only: a separator
    "\n"
    "-DOCSTART- -X- -X- O\n"
    "a\tO\r\n"                  # CRLF line end
    "cat\tO\n"
    "x\t\n"                     # malformed: empty tag
)


def _tokenizer():
    return BertWordPieceTokenizer(vocabulary=VOCAB, lowercase=True, strip_accents=True)


def _preprocessor(sequence_length=16):
    return TokenClassificationPreprocessor(_tokenizer(), LABELS, sequence_length=sequence_length)


def _backbone():
    return models.build("bert", "tiny", vocabulary_size=len(VOCAB), hidden_dim=32,
                        intermediate_dim=64, num_heads=2, num_layers=2,
                        max_sequence_length=64)


# --- the CoNLL reader ---------------------------------------------------------------------


def test_reader_separators_docstart_and_malformed_lines(tmp_path):
    path = tmp_path / "small.conll"
    path.write_bytes(SMALL_FILE.encode("utf-8"))
    data = conll.read_conll(str(path))
    assert data.sentences == [
        [("Paris", "B-location"), ("is", "O"), ("big", "O")],
        [("London", "B-location"), ("calling", "O")],
        [("a", "O"), ("cat", "O")],
    ]
    assert [(bad.line_number, bad.reason) for bad in data.malformed] == [
        (8, "no tab between token and tag"), (9, "empty token"), (16, "empty tag")]
    report = data.report()
    assert "3 sentences, 7 tokens, 3 malformed lines" in report
    assert f"{path}:8: no tab between token and tag: 'notab'" in report
    with pytest.raises(ValueError, match=r"small\.conll:8: no tab"):
        conll.read_conll(str(path), on_malformed="raise")
    with pytest.raises(ValueError, match="on_malformed"):
        conll.read_conll(str(path), on_malformed="ignore")
    with pytest.raises(FileNotFoundError):
        conll.read_conll(str(tmp_path / "missing.conll"))


def test_streaming_records_for_ingestion():
    lines = list(formats.iter_file_lines(io.BytesIO(SMALL_FILE.encode("utf-8")).read, 1000))
    records = list(conll.split_sentences(lines))
    assert len(records) == 3
    first = conll.parse_conll_sentence(records[0])
    features = first.features.feature
    assert list(features[conll.TOKENS_FEATURE].bytes_list.value) == [b"Paris", b"is", b"big"]
    assert list(features[conll.TAGS_FEATURE].bytes_list.value) == [b"B-location", b"O", b"O"]
    bad = conll.parse_conll_sentence(records[1])  # holds "notab"
    assert bad == formats.BadRecord(formats.MALFORMED,
                                    "sentence line 2: no tab between token and tag: 'notab'")
    assert conll.parse_conll_sentence(records[2]).reason == formats.MALFORMED  # "x\t"
    assert conll.parse_conll_sentence(None).reason == formats.TOO_LONG
    assert conll.parse_conll_sentence(b"\xff\tO").reason == formats.INVALID_UTF8
    # An over-long line spoils only its own sentence.
    assert list(conll.split_sentences([b"a\tO", None, b"", b"b\tO"])) == [None, b"b\tO"]


def test_reader_counts_on_the_real_wnut17_files(shared_data):
    folder = shared_data / "wnut17"
    counts = {}
    for name in ("wnut17train.conll", "emerging.dev.conll", "emerging.test.annotated"):
        data = conll.read_conll(str(folder / name))
        assert data.malformed == [], data.report()
        counts[name] = len(data.sentences)
    assert counts == {"wnut17train.conll": 3394, "emerging.dev.conll": 1009,
                      "emerging.test.annotated": 1287}
    labels = conll.label_vocabulary(conll.read_conll(str(folder / "wnut17train.conll")).tags)
    assert labels[:3] == ["O", "B-corporation", "I-corporation"] and len(labels) == 13


# --- first-sub-token featurization ----------------------------------------------------------


def test_first_sub_token_alignment_and_truncation():
    preprocessor = _preprocessor(sequence_length=8)
    words = tf.ragged.constant([["unaffable", "paris", "\u200b", "@the!"], ["london"]])
    tags = tf.ragged.constant([["B-person", "B-location", "O", "I-location"],
                               ["B-location"]])
    out = {k: v.numpy().tolist() for k, v in preprocessor(words, tags).items()}
    # "unaffable" -> un ##aff ##able (3 sub-tokens, one label); the zero-width space
    # normalises to nothing; "@the!" -> @ the ! is cut after "the" (8 = [CLS] 6 [SEP]).
    assert out["token_ids"] == [[2, 5, 6, 7, 16, 13, 8, 3], [2, 17, 3, 0, 0, 0, 0, 0]]
    assert out["padding_mask"] == [[1] * 8, [1, 1, 1, 0, 0, 0, 0, 0]]
    assert out["segment_ids"] == [[0] * 8, [0] * 8]
    assert out["word_ids"] == [[-1, 0, -1, -1, 1, 3, -1, -1], [-1, 0, -1, -1, -1, -1, -1, -1]]
    assert out["labels"] == [[0, 3, 0, 0, 1, 2, 0, 0], [0, 1, 0, 0, 0, 0, 0, 0]]
    assert out["sample_weight"] == [[0, 1, 0, 0, 1, 1, 0, 0], [0, 1, 0, 0, 0, 0, 0, 0]]
    # Truncation past a word's first sub-token: the word gets no position at all.
    short = preprocessor(tf.ragged.constant([["the"] * 6 + ["unaffable", "cat"]]))
    assert short["word_ids"].numpy().tolist() == [[-1, 0, 1, 2, 3, 4, 5, -1]]
    # Back to words: a word without a first sub-token gets the default (O) id.
    per_word = word_predictions(out["labels"], out["word_ids"], words.row_lengths())
    assert per_word.to_list() == [[3, 1, 0, 2], [1]]


def test_featurizer_inside_tf_data_dense_input_and_errors():
    preprocessor = _preprocessor()
    records = [conll.sentence_example(["Paris", "is", "big"],
                                      ["B-location", "O", "O"]).SerializeToString(),
               conll.sentence_example(["unaffable"], ["B-person"]).SerializeToString()]
    x, labels, weights = next(iter(tagging_dataset(records, preprocessor, batch_size=2)))
    assert sorted(x) == ["padding_mask", "segment_ids", "token_ids"]
    assert labels.numpy()[:, :5].tolist() == [[0, 1, 0, 0, 0], [0, 3, 0, 0, 0]]
    assert weights.numpy()[:, :5].tolist() == [[0, 1, 1, 1, 0], [0, 1, 0, 0, 0]]
    dense = preprocessor(tf.constant([["paris", "is"], ["london", ""]]))
    assert dense["word_ids"].numpy()[:, :4].tolist() == [[-1, 0, 1, -1], [-1, 0, -1, -1]]
    with pytest.raises(tf.errors.InvalidArgumentError, match="not in label_vocabulary"):
        preprocessor(tf.ragged.constant([["paris"]]), tf.ragged.constant([["B-city"]]))
    with pytest.raises(tf.errors.InvalidArgumentError, match="one tag per word"):
        preprocessor(tf.ragged.constant([["paris", "is"]]), tf.ragged.constant([["O"]]))
    with pytest.raises(ValueError, match="duplicates"):
        TokenClassificationPreprocessor(_tokenizer(), ["O", "O"])
    config = preprocessor.get_config()
    assert (config["label_vocabulary"], config["sequence_length"]) == (LABELS, 16)
    assert config["special_tokens"] == {"cls": "[CLS]", "sep": "[SEP]", "pad": "[PAD]"}


# --- the TokenClassifier ------------------------------------------------------------------------


def test_token_classifier_loss_counts_first_sub_tokens_only():
    keras.utils.set_random_seed(1)
    model = TokenClassifier(_backbone(), num_labels=len(LABELS), dropout=0.0)
    features = _preprocessor()(tf.ragged.constant([["unaffable", "paris", "is", "big"],
                                                   ["the", "cat", "sat"]]),
                               tf.ragged.constant([["B-person", "B-location", "O", "O"],
                                                   ["O", "B-person", "O"]]))
    x = {name: features[name] for name in model.input}
    logits = model(x)
    assert logits.shape == (2, 16, len(LABELS))
    labels, weights = features["labels"], features["sample_weight"]
    loss = float(model.compute_loss(x, labels, logits, weights))
    log_probs = tf.nn.log_softmax(logits).numpy()
    nll = -np.take_along_axis(log_probs, labels.numpy()[..., None], -1)[..., 0]
    w = weights.numpy()
    assert w.sum() == 7  # one per word, none for ##aff, ##able, [CLS], [SEP], padding
    np.testing.assert_allclose(loss, (nll * w).sum() / (w.sum() + 1e-5), rtol=1e-5)
    # Labels at weight-0 positions (continuation sub-tokens, specials) do not matter ...
    scrambled = tf.where(weights > 0, labels, 4 - labels % 5)
    assert float(model.compute_loss(x, scrambled, logits, weights)) == pytest.approx(loss,
                                                                                     rel=1e-6)
    # ... a first sub-token's label does.
    changed = tf.tensor_scatter_nd_update(labels, [[0, 1]], [(int(labels[0, 1]) + 1) % 5])
    assert abs(float(model.compute_loss(x, changed, logits, weights)) - loss) > 1e-4
    # Config round trip (registered, backbone serialised whole).
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(model))
    assert isinstance(restored, TokenClassifier)
    assert (restored.num_labels, restored.dropout) == (len(LABELS), 0.0)
    restored.set_weights(model.get_weights())
    np.testing.assert_allclose(restored(x), logits, atol=1e-5)


def test_token_classifier_on_a_backbone_without_segment_ids():
    backbone = models.build("distilbert", "tiny", vocabulary_size=len(VOCAB), hidden_dim=32,
                            intermediate_dim=64, num_heads=2, num_layers=2)
    model = TokenClassifier(backbone, num_labels=3)
    assert "segment_ids" not in model.input
    features = _preprocessor()(tf.ragged.constant([["the", "cat"]]))
    assert model({name: features[name] for name in model.input}).shape == (1, 16, 3)


# --- serving ----------------------------------------------------------------------------------


def test_serving_round_trip(tmp_path):
    keras.utils.set_random_seed(3)
    preprocessor = _preprocessor(sequence_length=8)
    model = TokenClassifier(_backbone(), num_labels=len(LABELS))
    export_dir = str(tmp_path / "tagger")
    export_tagger(preprocessor, model, export_dir)
    serve = tf.saved_model.load(export_dir).signatures[SERVING_SIGNATURE]
    sentences = ["Paris is big", "the  cat sat on the unaffable mat !", ""]
    out = serve(sentences=tf.constant(sentences))
    lengths = out["lengths"].numpy().tolist()
    assert lengths == [3, 8, 0]
    tags = [[t.decode() for t in row[:n]] for row, n in zip(out["tags"].numpy(), lengths)]
    words = [[w.decode() for w in row[:n]] for row, n in zip(out["words"].numpy(), lengths)]
    assert words == [s.split() for s in sentences]
    assert out["tags"].shape == (3, 8) and out["tags"].numpy()[0, 3:].tolist() == [b""] * 5
    # The same predictions as the in-process model; words past the 6 sub-token budget
    # ("mat" and "!" come after un ##aff ##able, sub-tokens 6-8) are O.
    assert tags == predict_tags(model, preprocessor, [s.split() for s in sentences])
    assert tags[1][6:] == ["O", "O"]
    assert all(tag in LABELS for row in tags for tag in row)
    assert len({tag for row in tags for tag in row}) > 1  # random weights: not all one tag
    with pytest.raises(tf.errors.InvalidArgumentError, match="1-D batch"):
        serve(sentences=tf.constant([["Paris is big"]]))


# --- feature-based NER (BERT §5.3) ---------------------------------------------------------


def test_feature_based_tagger_trains_the_bilstm_only():
    from lmfactory.models.tasks.feature_based_tagger import FeatureBasedTagger

    keras.utils.set_random_seed(5)
    backbone = models.build("bert", "tiny", vocabulary_size=len(VOCAB), hidden_dim=16,
                            intermediate_dim=32, num_heads=2, num_layers=4,
                            max_sequence_length=32)
    model = FeatureBasedTagger(backbone, num_labels=len(LABELS), mode="concat_last_four",
                               lstm_units=8, dropout=0.0)
    assert not backbone.trainable
    assert {v.path.split("/")[0] for v in model.trainable_variables} == {
        "bilstm_0", "bilstm_1", "logits"}
    records = [conll.sentence_example(w.split(), t.split()).SerializeToString() for w, t in [
        ("Paris is big", "B-location O O"), ("the cat sat on the mat", "O B-person O O O O"),
        ("London is unaffable", "B-location O O")]]
    dataset = tagging_dataset(records, _preprocessor(), batch_size=3,
                              input_names=list(model.input))
    x, labels, weights = next(iter(dataset))
    assert model(x).shape == (3, 16, len(LABELS))
    before = [w.numpy() for w in backbone.weights]
    first = float(model.compute_loss(x, labels, model(x), weights))
    model.compile(optimizer=keras.optimizers.Adam(0.03), run_eagerly=True)  # no LSTM tracing
    model.fit(dataset.repeat(), steps_per_epoch=20, epochs=1, verbose=0)
    assert float(model.compute_loss(x, labels, model(x), weights)) < 0.5 * first
    for old, new in zip(before, backbone.weights):
        np.testing.assert_array_equal(old, new.numpy())
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(model))
    assert (restored.mode, restored.lstm_units, restored.num_lstm_layers) == (
        "concat_last_four", 8, 2)
