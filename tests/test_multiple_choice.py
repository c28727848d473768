"""Multiple choice (BERT §4.4): CommonsenseQA / SWAG readers, packing, the MultipleChoice
head and its loss, accuracy and the serving SavedModel (the DAG fine-tunes it:
tests/test_pipeline_tasks.py)."""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the tokenizer ops a loaded SavedModel uses)
from keras import ops

from lmfactory import models
from lmfactory.components.example_gen import multiple_choice_readers as mc_data
from lmfactory.components.example_gen.multiple_choice_readers import (
    MultipleChoiceDataError, read_commonsenseqa, read_multiple_choice, read_swag)
from lmfactory.components.tasks.multiple_choice_data import (choice_accuracy,
                                                             make_multiple_choice_dataset)
from lmfactory.components.tasks.multiple_choice_serving import (
    SERVING_SIGNATURE, export_multiple_choice_model)
from lmfactory.components.vocabulary import wordpiece
from lmfactory.models.classifier_preprocessor import ClassifierPreprocessor
from lmfactory.models.tasks.multiple_choice_head import MultipleChoice
from lmfactory.models.tasks.multiple_choice_preprocessor import MultipleChoicePreprocessor
from lmfactory.models.tokenizers import load_tokenizer, write_tokenizer_config

WORDS = ["the", "cat", "sat", "on", "mat", "up", "right", "wrong", "a", "dog", "ran", "is",
         "where", "what", "he", "she", "went", "to", "store", "park", "home", "?", "."]
TINY = dict(hidden_dim=32, intermediate_dim=64, num_heads=2, num_layers=2,
            max_sequence_length=32)


def _question(stem, answers, key="A", **extra):
    labels = "ABCDE"[:len(answers)]
    record = {"id": stem[:8], "question": {"stem": stem, "choices": [
        {"label": label, "text": text} for label, text in zip(labels, answers)]}}
    if key is not None:
        record["answerKey"] = key
    record.update(extra)
    return json.dumps(record)


# ------------------------------------------------------------------------------ readers


def test_commonsenseqa_reader_counts_and_reports_malformed_lines(tmp_path):
    path = tmp_path / "small.jsonl"
    lines = [
        _question("where is the cat?", ["mat", "park", "home"], "B"),   # 1 good
        '{"question": {"stem": "broken"',                               # 2 bad JSON
        _question("what sat?", ["cat", "dog", "he"], key=None),         # 3 no answerKey
        "",                                                             # 4 blank: skipped
        _question("who ran?", ["dog", "cat", "she"], "D"),              # 5 unknown label
        _question("who went?", ["he", "she"], "A"),                     # 6 2 choices, not 3
        _question("the dog ran to the?", ["store", "park", "home"], "C"),  # 7 good
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    split = read_commonsenseqa(str(path))
    assert [(e.context, e.choices, e.label) for e in split] == [
        ("where is the cat?", ("mat", "park", "home"), 1),
        ("the dog ran to the?", ("store", "park", "home"), 2)]
    assert [(m.line, m.reason.split(":")[0]) for m in split.malformed] == [
        (2, "invalid JSON"), (3, "missing 'answerKey'"), (5, "unknown answer label"),
        (6, "wrong number of choices")]
    report = split.report()
    assert report["examples"] == 2 and report["malformed"] == 4
    assert report["num_choices"] == 3
    assert report["malformed_lines"][0].startswith(f"{path}:2: invalid JSON")
    assert report["malformed_by_reason"]["missing 'answerKey'"] == 1

    with pytest.raises(MultipleChoiceDataError, match=rf"{path}:2: invalid JSON"):
        read_commonsenseqa(str(path), strict=True)
    # A fixed number of choices: now the 3-choice questions are the malformed ones.
    two = read_commonsenseqa(str(path), num_choices=2)
    assert [(e.context, e.label) for e in two] == [("who went?", 0)]
    assert [m.line for m in two.malformed] == [1, 2, 3, 5, 7]


def test_commonsenseqa_reader_rejects_files_of_another_shape(tmp_path):
    path = tmp_path / "squad.jsonl"
    path.write_text('{"context": "x", "qas": []}\n{"context": "y", "qas": []}\n')
    with pytest.raises(MultipleChoiceDataError,
                       match=r"squad.jsonl is not a CommonsenseQA file.*question.stem"):
        read_multiple_choice(str(path))
    with pytest.raises(MultipleChoiceDataError, match=r"notes.txt.*\.jsonl.*\.csv"):
        read_multiple_choice(str(tmp_path / "notes.txt"))
    with pytest.raises(FileNotFoundError, match="missing.jsonl"):
        read_multiple_choice(str(tmp_path / "missing.jsonl"))


def test_commonsenseqa_real_files(shared_data):
    folder = shared_data / "commonsenseqa"
    train = read_multiple_choice(str(folder / "train_rand_split.jsonl"))
    dev = read_multiple_choice(str(folder / "dev_rand_split.jsonl"))
    assert (len(train), len(dev)) == (9741, 1221)
    assert train.malformed == [] and dev.malformed == []
    assert train.num_choices == dev.num_choices == 5
    assert dev[0].context.startswith("A revolving door is convenient")
    assert dev[0].choices == ("bank", "library", "department store", "mall", "new york")
    assert dev[0].label == 0
    assert {e.label for e in train} == {0, 1, 2, 3, 4}
    test_file = str(folder / "test_rand_split_no_answers.jsonl")
    with pytest.raises(MultipleChoiceDataError,
                       match=r"test_rand_split_no_answers.jsonl has no answers.*1140"):
        read_multiple_choice(test_file)
    test = read_multiple_choice(test_file, require_labels=False)
    assert len(test) == 1140 and not test.has_labels
    assert {e.label for e in test} == {mc_data.NO_LABEL}


SWAG_HEADER = ",video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1," \
              "ending2,ending3,label"


def test_swag_reader(tmp_path):
    path = tmp_path / "val.csv"
    rows = [
        SWAG_HEADER,
        '0,lsmdc1,17,"She sits. She","She sits.",She,gold,smiles.,runs away.,'
        '"eats, quickly.",jumps.,2',                                          # line 2 good
        "1,lsmdc2,18,too,few,columns,gold,a,b,c,1",                           # line 3 short
        '2,anetv,19,"He ran, then","He ran, then",then,gen,"he\nstopped.",b,c,d,0',  # 4-5
        "3,anetv,20,x,x,y,gen,a,b,c,d,7",                                     # line 6 label
        "4,anetv,21,x,A man waits.,,gen,He sleeps.,b,c,d,3",                  # 7: empty sent2
    ]
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    split = read_multiple_choice(str(path))
    assert split.format == "swag"
    assert [e.id for e in split] == ["lsmdc1/17", "anetv/19", "anetv/21"]
    first = split[0]
    assert first.context == "She sits."
    assert first.choices == ("She smiles.", "She runs away.", "She eats, quickly.",
                             "She jumps.")
    assert first.label == 2
    assert split[1].choices[0] == "then he\nstopped." and split[1].label == 0
    assert split[2].choices[0] == "He sleeps." and split[2].label == 3
    assert [str(m).split(": ")[0] for m in split.malformed] == [f"{path}:3", f"{path}:6"]
    assert "wrong column count: 11 columns, expected 12" in str(split.malformed[0])
    assert "unknown answer label: '7'" in str(split.malformed[1])
    with pytest.raises(MultipleChoiceDataError, match=rf"{path}:3: wrong column count"):
        read_swag(str(path), strict=True)

    # The test file has no label column; the header without the pandas index is fine too.
    test = tmp_path / "test.csv"
    test.write_text(SWAG_HEADER[1:].removesuffix(",label") + "\n"
                    "v,1,s,First.,Then,gen,a,b,c,d\n", encoding="utf-8")
    with pytest.raises(MultipleChoiceDataError, match=r"test.csv has no 'label' column"):
        read_swag(str(test))
    assert read_swag(str(test), require_labels=False)[0].label == mc_data.NO_LABEL

    other = tmp_path / "train.csv"
    other.write_text("sentence,label\nfine,1\n", encoding="utf-8")
    with pytest.raises(MultipleChoiceDataError,
                       match=r"train.csv is not a SWAG CSV file: expected the header columns "
                             r"video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0"):
        read_multiple_choice(str(other))


# ------------------------------------------------------------------------------ packing


@pytest.fixture(scope="module")
def vocab_dir(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("vocab"))
    wordpiece.write_files(folder, list(wordpiece.RESERVED_TOKENS) + WORDS)
    write_tokenizer_config(folder, wordpiece.tokenizer_config(True, True))
    return folder


@pytest.fixture(scope="module")
def preprocessor(vocab_dir):
    return MultipleChoicePreprocessor.from_vocabulary(vocab_dir, "bert", sequence_length=10)


def test_packing_shapes_and_segments(preprocessor, vocab_dir):
    ids = {token: index for index, token in
           enumerate(list(wordpiece.RESERVED_TOKENS) + WORDS)}
    packed = preprocessor((tf.constant(["The cat sat", "where is the dog?"]),
                           tf.constant([["on the mat", "up"], ["home", "the park ."]])))
    assert {name: tuple(value.shape) for name, value in packed.items()} == {
        "token_ids": (2, 2, 10), "segment_ids": (2, 2, 10), "padding_mask": (2, 2, 10)}
    tokens = lambda text: [ids[w] for w in text.split()]  # noqa: E731
    cls, sep = ids["[CLS]"], ids["[SEP]"]
    # Example 0, choice 0: [CLS] the cat sat [SEP] on the mat [SEP] + 1 padding.
    assert packed["token_ids"][0, 0].numpy().tolist() == (
        [cls] + tokens("the cat sat") + [sep] + tokens("on the mat") + [sep, 0])
    assert packed["segment_ids"][0, 0].numpy().tolist() == [0] * 5 + [1] * 4 + [0]
    # Example 0, choice 1: [CLS] the cat sat [SEP] up [SEP] + 3 padding.
    assert packed["token_ids"][0, 1].numpy().tolist() == (
        [cls] + tokens("the cat sat") + [sep] + tokens("up") + [sep] + [0, 0, 0])
    assert packed["segment_ids"][0, 1].numpy().tolist() == [0] * 5 + [1, 1] + [0] * 3
    assert packed["padding_mask"][0, 1].numpy().tolist() == [1] * 7 + [0] * 3
    # Example 1, choice 1: 5 + 3 tokens do not fit 10 - 3 specials: round robin trims the
    # longer context first -> where is the dog | the park .
    assert packed["token_ids"][1, 1].numpy().tolist() == (
        [cls] + tokens("where is the dog") + [sep] + tokens("the park .") + [sep])

    # RoBERTa's pair layout: two separators between context and choice.
    roberta = MultipleChoicePreprocessor(ClassifierPreprocessor(
        load_tokenizer(vocab_dir), sequence_length=8, layout="roberta"))
    row = roberta((tf.constant(["the cat"]), tf.constant([["up", "on"]])))["token_ids"]
    assert row[0, 0].numpy().tolist() == ([cls] + tokens("the cat") + [sep, sep]
                                          + tokens("up") + [sep, 0])
    with pytest.raises(ValueError, match=r"choices \[batch, num_choices\]"):
        preprocessor((tf.constant(["a"]), tf.constant(["a", "b"])))


# --------------------------------------------------------------------------------- head


@pytest.fixture(scope="module")
def bert_model():
    keras.utils.set_random_seed(1)
    backbone = models.build("bert", "tiny", vocabulary_size=len(WORDS) + 5, **TINY)
    return MultipleChoice(backbone, num_choices=3)


def test_head_scores_each_choice_with_one_vector_and_softmaxes(bert_model):
    rng = np.random.default_rng(0)
    inputs = {"token_ids": rng.integers(5, 28, (4, 3, 9)).astype("int32"),
              "padding_mask": np.ones((4, 3, 9), "int32"),
              "segment_ids": np.tile(np.repeat([0, 1], [4, 5]), (4, 3, 1)).astype("int32")}
    inputs["padding_mask"][1, 2, 6:] = 0
    logits = bert_model(inputs, training=False).numpy()
    assert logits.shape == (4, 3)
    # By hand: each (question, choice) sequence through the backbone alone, the pooled
    # [CLS] vector dotted with the one score vector (plus bias).
    kernel, bias = (w.numpy() for w in bert_model.score.weights)
    assert kernel.shape == (bert_model.backbone.get_config()["hidden_dim"], 1)
    for b in range(4):
        for c in range(3):
            one = {name: value[b:b + 1, c] for name, value in inputs.items()}
            pooled = bert_model.backbone(one, training=False)["pooled_output"].numpy()
            np.testing.assert_allclose(logits[b, c], (pooled @ kernel + bias)[0, 0],
                                       atol=1e-5)
    labels = np.array([0, 2, 1, 2])
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    expected_loss = -log_probs[np.arange(4), labels].mean()
    loss = bert_model.compute_loss(y=tf.constant(labels), y_pred=tf.constant(logits))
    np.testing.assert_allclose(float(loss), expected_loss, rtol=1e-5)
    bert_model.compile(optimizer="sgd")
    result = bert_model.evaluate(inputs, labels, verbose=0, return_dict=True)
    np.testing.assert_allclose(result["loss"], expected_loss, rtol=1e-5)
    assert result["accuracy"] == pytest.approx(np.mean(logits.argmax(axis=1) == labels))


def test_head_config_round_trip(bert_model, tmp_path):
    path = str(tmp_path / "mc.keras")
    bert_model.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded, MultipleChoice) and loaded.num_choices == 3
    inputs = {"token_ids": np.full((1, 3, 6), 7, "int32"),
              "padding_mask": np.ones((1, 3, 6), "int32"),
              "segment_ids": np.zeros((1, 3, 6), "int32")}
    np.testing.assert_allclose(loaded(inputs).numpy(), bert_model(inputs).numpy(), atol=1e-6)


def _marker_backbone(marker_id: int, with_pooler: bool) -> keras.Model:
    """A stand-in encoder: feature 0 of every vector is 1 when the sequence holds the token
    ``marker_id`` (a fixed embedding, max-pooled over the sequence), else 0."""
    token_ids = keras.Input(shape=(None,), dtype="int32", name="token_ids")
    padding_mask = keras.Input(shape=(None,), dtype="int32", name="padding_mask")
    table = np.zeros((len(WORDS) + 5, 4), "float32")
    table[marker_id, 0] = 1.0
    embedded = keras.layers.Embedding(len(WORDS) + 5, 4, weights=[table], trainable=False)(
        token_ids)
    embedded = embedded * ops.expand_dims(ops.cast(padding_mask, "float32"), -1)
    pooled = ops.max(embedded, axis=1)
    sequence = embedded * 0.0 + ops.expand_dims(pooled, 1)  # every position sees the max
    outputs = {"sequence_output": sequence}
    if with_pooler:
        outputs["pooled_output"] = pooled
    return keras.Model({"token_ids": token_ids, "padding_mask": padding_mask}, outputs)


@pytest.mark.parametrize("with_pooler", [True, False])
def test_set_score_vector_picks_the_marked_choice(preprocessor, vocab_dir, with_pooler):
    """With the score vector set to read "does this choice hold the word `right`", every
    question is answered correctly (and with the sign flipped, none is): the choice order
    survives packing, folding into the batch and unfolding."""
    marker = load_tokenizer(vocab_dir).token_to_id("right")
    model = MultipleChoice(_marker_backbone(marker, with_pooler), num_choices=4)
    examples = []
    for i in range(10):
        answers = ["the wrong mat", "a wrong dog", "wrong store", "the wrong park"]
        answers[i % 4] = answers[i % 4].replace("wrong", "right")
        examples.append(mc_data.MultipleChoiceExample(str(i), "where is it ?",
                                                      tuple(answers), i % 4))
    data = make_multiple_choice_dataset(examples, preprocessor, batch_size=3,
                                        input_names=list(model.input))
    model.score.set_weights([np.array([[5.0], [0.0], [0.0], [0.0]], "float32"),
                             np.zeros((1,), "float32")])
    assert choice_accuracy(model, data) == {"accuracy": 1.0, "examples": 10}
    model.score.set_weights([np.array([[-5.0], [0.0], [0.0], [0.0]], "float32"),
                             np.zeros((1,), "float32")])
    assert choice_accuracy(model, data)["accuracy"] == 0.0


def test_tfrecords_read_like_records(preprocessor, tmp_path):
    examples = [mc_data.MultipleChoiceExample(str(i), f"where is the {w} ?",
                                              ("home", f"the {w}", "up"), i)
                for i, w in enumerate(["cat", "dog", "mat"])]
    path = str(tmp_path / "records.gz")
    with tf.io.TFRecordWriter(path, options="GZIP") as writer:
        for example in examples:
            writer.write(mc_data.to_tf_example(example).SerializeToString())
    from_files = list(make_multiple_choice_dataset(path, preprocessor, 2, num_choices=3))
    from_memory = list(make_multiple_choice_dataset(examples, preprocessor, 2))
    assert len(from_files) == len(from_memory) == 2
    for (x1, y1), (x2, y2) in zip(from_files, from_memory):
        assert y1.numpy().tolist() == y2.numpy().tolist()
        for name in ("token_ids", "segment_ids", "padding_mask"):
            np.testing.assert_array_equal(x1[name].numpy(), x2[name].numpy())
    with pytest.raises(ValueError, match="num_choices"):
        make_multiple_choice_dataset(path, preprocessor, 2)


# ------------------------------------------------------------------------------ serving


def test_serving_round_trip(bert_model, preprocessor, tmp_path):
    export_dir = str(tmp_path / "serving")
    export_multiple_choice_model(bert_model, preprocessor, export_dir)
    serve = tf.saved_model.load(export_dir).signatures[SERVING_SIGNATURE]
    context = tf.constant(["where is the cat ?", "he went to the"])
    choices = tf.constant([["on the mat", "home", "up"], ["store", "park", "the dog"]])
    result = serve(context=context, choices=choices)
    expected = tf.nn.softmax(bert_model(preprocessor((context, choices)), training=False))
    np.testing.assert_allclose(result["probabilities"].numpy(), expected.numpy(), atol=1e-5)
    assert result["probabilities"].shape == (2, 3)
    np.testing.assert_allclose(result["probabilities"].numpy().sum(axis=1), 1.0, atol=1e-5)
    assert result["label"].numpy().tolist() == expected.numpy().argmax(axis=1).tolist()
    with pytest.raises(tf.errors.InvalidArgumentError, match="exactly 3 choices"):
        serve(context=context, choices=tf.constant([["a", "b"], ["c", "d"]]))
    with pytest.raises(tf.errors.InvalidArgumentError, match="same batch size"):
        serve(context=tf.constant(["a"]), choices=choices)
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"choices.{0,3} must be a \[batch, num_choices\] matrix"):
        serve(context=context, choices=tf.constant(["a", "b"]))
