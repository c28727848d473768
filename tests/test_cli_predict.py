"""``lmfactory predict`` and ``lmfactory evaluate`` on a tiny sentence-pair classifier
exported with the project's own code (components/trainer/export.py), pushed as a versioned
serving folder, and on a tiny causal LM; plus the signature-driven input parsing every task
kind's SavedModel goes through."""

import io
import json
import shutil
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from lmfactory import cli, models
from lmfactory.cli import predict as predict_lib
from lmfactory.components.evaluator import metrics as metric_lib
from lmfactory.components.trainer.export import write_model_artifact
from lmfactory.components.vocabulary import wordpiece
from lmfactory.models.classifier_preprocessor import classifier_preprocessor, select_inputs
from lmfactory.models.tokenizers import write_tokenizer_config

WORDS = "the a cat dog sat on mat good bad film movie is was great awful plot".split()
PAIRS = [("the cat sat", "good film"), ("a dog", "bad movie"), ("the mat", "great plot"),
         ("a cat", "awful film"), ("the dog sat on the mat", "a good movie"),
         ("bad", "the plot was great")]


@pytest.fixture(scope="module")
def pushed(tmp_path_factory):
    """A run folder: the FineTuner's Model artifact of a 2-class pair classifier (labels
    no / yes) and two pushed versions of its SavedModel; the Keras model's probabilities."""
    root = tmp_path_factory.mktemp("cli_run")
    vocab = str(root / "vocab")
    wordpiece.write_files(vocab, list(wordpiece.RESERVED_TOKENS) + WORDS)
    write_tokenizer_config(vocab, wordpiece.tokenizer_config(True, True))
    keras.utils.set_random_seed(7)
    backbone = models.build("bert", "tiny", vocabulary_size=len(wordpiece.RESERVED_TOKENS)
                            + len(WORDS), num_layers=1, hidden_dim=16, num_heads=2,
                            intermediate_dim=32, max_sequence_length=32)
    head = models.get("bert").head("classification")(backbone, num_classes=2)
    preprocessor = classifier_preprocessor(vocab, "bert", 16, num_text_features=2)
    packed = preprocessor((tf.constant([a for a, _ in PAIRS]), tf.constant([b for _, b in PAIRS])))
    # A random tiny encoder gives nearly equal logits to every pair: amplify the output layer
    # and centre its decision between the pairs' margins, so both classes are predicted.
    kernel, bias = head.weights[-2], head.weights[-1]
    kernel.assign(kernel * 300.0)
    logits = head(select_inputs(head, packed), training=False).numpy()
    margins = np.sort(logits[:, 1] - logits[:, 0])
    bias.assign(bias + np.array([0.0, -(margins[2] + margins[3]) / 2], "float32"))
    artifact = root / "run" / "pipeline" / "FineTuner" / "model" / "5"
    write_model_artifact(str(artifact / "Format-Serving"), head, backbone, vocab, {
        "task": {"kind": "classification", "text_features": ["sentence1", "sentence2"],
                 "num_classes": 2, "sequence_length": 16, "label_vocabulary": ["no", "yes"],
                 "label_feature": "label"}}, preprocessor=preprocessor)
    serving = root / "run" / "serving" / "pairs"
    shutil.copytree(artifact / "Format-Serving", serving / "1700000000")
    (serving / "900").mkdir()  # an older, incomplete version: never chosen
    logits = head(select_inputs(head, packed), training=False)
    probabilities = tf.nn.softmax(tf.cast(logits, tf.float32)).numpy()
    return {"run": root / "run", "artifact": artifact, "serving": serving,
            "probabilities": probabilities, "vocab": vocab}


def _json_lines(text):
    return [json.loads(line) for line in text.splitlines()]


def test_predict_console_script_is_quiet_and_matches_the_keras_model(pushed):
    """The serving folder (its newest version), TEXT arguments and JSON lines on stdin; no
    TensorFlow / absl / Google line on stderr at the default verbosity."""
    stdin = "".join(json.dumps({"sentence1": a, "sentence2": b}) + "\n" for a, b in PAIRS[2:])
    result = subprocess.run(
        [sys.executable, "-m", "lmfactory.cli", "predict", str(pushed["serving"]),
         *[f"{a}\t{b}" for a, b in PAIRS[:2]], "--file", "-"],
        input=stdin + "\n", capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stderr == "lmfactory: skipped 1 blank input line(s)\n"
    rows = _json_lines(result.stdout)
    assert len(rows) == len(PAIRS)
    expected = pushed["probabilities"]
    np.testing.assert_allclose([r["probabilities"] for r in rows], expected, atol=1e-5)
    assert [r["label"] for r in rows] == expected.argmax(-1).tolist()
    assert [r["label_name"] for r in rows] == [["no", "yes"][i] for i in expected.argmax(-1)]
    assert sorted(r["label"] for r in rows) == [0, 0, 0, 1, 1, 1]


def test_predict_fields_order_and_one_line_errors(pushed, capsys):
    signatures = predict_lib.load_signatures(str(pushed["serving"] / "1700000000"))
    a, b = PAIRS[0]
    out = io.StringIO()
    assert predict_lib.predict("", [f"{b}\t{a}"], fields=["sentence2", "sentence1"], out=out,
                               signatures=signatures) == 1
    row, = _json_lines(out.getvalue())
    np.testing.assert_allclose(row["probabilities"], pushed["probabilities"][0], atol=1e-5)
    for line, message in [
        ("only one field",
         "input 1: 1 tab-separated field(s) for the model's 2 inputs ['sentence1', 'sentence2']"),
        ('{"sentence1": "a"', "input 1: not valid JSON"),
        ('{"sentence1": ["a", "b"], "sentence2": "c"}',
         "inputs 1-1: serving_default: 'sentence1' must be a 1-D batch of UTF-8 strings")]:
        with pytest.raises(predict_lib.PredictError) as error:
            predict_lib.predict("", [line], out=io.StringIO(), signatures=signatures)
        assert str(error.value).startswith(message), str(error.value)
    for argv, message in [
        ([str(pushed["serving"]), "x\ty", "--signature", "nope"],
         "lmfactory: the model has no signature 'nope'"),
        ([str(pushed["run"] / "nowhere"), "x"], "lmfactory: No model at")]:
        assert cli.main(["predict", *argv]) == 2
        err = capsys.readouterr().err
        assert err.startswith(message) and len(err.strip().splitlines()) == 1, err


def _broken_copies(pushed, tmp_path):
    """Copies of the good version with a broken SavedModel each: ``{case: folder}``."""
    good = pushed["serving"] / "1700000000"
    cases = {}
    for case in ("garbage", "empty", "truncated", "no_variables"):
        folder = tmp_path / case
        shutil.copytree(good, folder)
        graph = folder / "saved_model.pb"
        if case == "garbage":
            graph.write_bytes(b"\x00not a protocol buffer\xff" * 50)
        elif case == "empty":
            graph.write_bytes(b"")
        elif case == "truncated":
            graph.write_bytes(graph.read_bytes()[:2000])
        else:
            shutil.rmtree(folder / "variables")
        cases[case] = folder
    return cases


def test_a_broken_saved_model_is_one_line_and_a_serving_folder_falls_back(pushed, tmp_path,
                                                                          capsys):
    for case, folder in _broken_copies(pushed, tmp_path).items():
        assert cli.main(["predict", str(folder), "a\tb"]) == 2, case
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "does not load" in err, (case, err)
        if case == "empty":  # not TensorFlow's words about missing tag-sets
            assert "saved_model.pb is empty" in err and "tags" not in err, err
    # a newer version that does not load: the model server keeps serving the one it has
    serving = tmp_path / "serving"
    shutil.copytree(pushed["serving"] / "1700000000", serving / "1700000000")
    shutil.copytree(_broken_copies(pushed, tmp_path / "again")["garbage"],
                    serving / "1800000000")
    assert cli.main(["predict", str(serving), f"{PAIRS[0][0]}\t{PAIRS[0][1]}"]) == 0
    captured = capsys.readouterr()
    row, = _json_lines(captured.out)
    np.testing.assert_allclose(row["probabilities"], pushed["probabilities"][0], atol=1e-5)
    assert "1800000000 does not load" in captured.err
    assert f"version before it, {serving / '1700000000'}" in captured.err


def test_output_files_are_checked_before_the_work(pushed, tmp_path, capsys):
    missing = tmp_path / "no" / "such" / "folder" / "result.json"
    assert cli.main(["evaluate", str(pushed["serving"]), "--data",
                     str(tmp_path / "unused.tsv"), "--json", str(missing)]) == 2
    err = capsys.readouterr().err
    assert "does not exist" in err and len(err.strip().splitlines()) == 1
    assert cli.main(["few-shot", "--model", str(pushed["artifact"]), "--task", "sst2",
                     "--markdown", str(missing)]) == 2
    err = capsys.readouterr().err
    assert "--markdown" in err and len(err.strip().splitlines()) == 1


def test_evaluate_a_pushed_classifier_on_a_new_tsv(pushed, tmp_path, capsys):
    """Accuracy and F1 of class 'yes' on a held-out TSV whose labels agree with the model on
    four of six rows; a malformed row is counted, not scored."""
    predicted = pushed["probabilities"].argmax(-1)
    gold = predicted.copy()
    gold[[1, 4]] = 1 - gold[[1, 4]]
    data = tmp_path / "held_out.tsv"
    data.write_text("sentence1\tsentence2\tlabel\n" + "".join(
        f"{a}\t{b}\t{['no', 'yes'][y]}\n" for (a, b), y in zip(PAIRS, gold)) + "no tabs\n")
    result_file = tmp_path / "result.json"
    assert cli.main(["evaluate", str(pushed["serving"] / "1700000000"), "--data", str(data),
                     "--json", str(result_file)]) == 0
    out, err = capsys.readouterr()
    result = json.loads(result_file.read_text())
    assert result["model"] == str(pushed["artifact"])
    assert result["counts"]["good"] == 6 and result["counts"]["malformed"] == 1
    metrics = result["metrics"]
    assert metrics["examples"] == 6
    assert metrics["accuracy"] == pytest.approx(4 / 6)
    assert metrics["f1"] == pytest.approx(metric_lib.f1(gold, predicted))
    assert f"accuracy: {4 / 6:.4f}" in out
    assert "F1 of class 1 ('yes') against all others" in out
    assert "note: accuracy counts each of the 6 examples of held_out.tsv once" in out
    assert "records: bad 1, good 6, malformed 1" in err and "scoring: done in" in err


def test_evaluate_a_causal_lm_on_a_text_file(tmp_path, capsys, monkeypatch):
    """Perplexity of a causal LM on a held-out text file: the file becomes the model's
    causal_lm windows (documents + end-of-text, blocks of sequence_length + 1)."""
    import collections

    from lmfactory.components.trainer import export
    from lmfactory.components.vocabulary import bpe
    from lmfactory.models.gpt2 import GPT2CausalLM
    from lmfactory.models.tokenizers import load_tokenizer

    # The generation SavedModel is not read by the evaluation (and slow to trace).
    monkeypatch.setattr(export, "export_serving_model", lambda *args, **kwargs: None)
    vocab = str(tmp_path / "vocab")
    lines = ["the cat sat on the mat", "a dog is a good dog", "the film was great"]
    tokens, merges = bpe.learn_merges(collections.Counter(bpe.pretokenize_lines(lines * 5))
                                      .items(), 300)
    bpe.write_files(vocab, tokens, merges)
    write_tokenizer_config(vocab, bpe.tokenizer_config())
    tokenizer = load_tokenizer(vocab)
    keras.utils.set_random_seed(2)
    backbone = models.build("gpt2", "tiny", vocabulary_size=tokenizer.vocabulary_size(),
                            num_layers=1, hidden_dim=16, num_heads=2, intermediate_dim=32,
                            max_sequence_length=32)
    artifact = tmp_path / "Pretrainer" / "model" / "3"
    write_model_artifact(str(artifact / "Format-Serving"), GPT2CausalLM(backbone), backbone,
                         vocab, {"task": {"kind": "language_model", "objective": "causal_lm",
                                          "sequence_length": 8}})
    documents = ["the cat sat on the mat\nthe dog sat on a mat", "a good film was great",
                 "the dog is a good dog and the cat is a good cat"]
    data = tmp_path / "held_out.txt"
    data.write_text("\n\n".join(documents) + "\n")
    assert cli.main(["evaluate", str(artifact), "--data", str(data)]) == 0
    out, err = capsys.readouterr()
    values = dict(line.split(": ")[:2] for line in out.splitlines() if ": " in line)
    stream = sum(len(tokenizer.tokenize(d).numpy()) + 1 for d in documents)
    assert int(values["tokens"].split()[0]) == stream // 9 * 8  # full blocks of 8 + 1 ids
    perplexity, nll = float(values["perplexity"].split()[0]), float(values["nll"].split()[0])
    assert perplexity == pytest.approx(np.exp(nll), rel=1e-3)
    # an untrained model's small initial logits predict nearly uniformly: perplexity about
    # the vocabulary size (measured 299.5 for 289 ids); a wrong count or NLL lands far off
    vocabulary_size = tokenizer.vocabulary_size()
    assert 0.8 * vocabulary_size < perplexity < 1.25 * vocabulary_size
    assert "causal_lm windows: done in" in err
    short = tmp_path / "short.txt"
    short.write_text("the cat\n")
    assert cli.main(["evaluate", str(artifact), "--data", str(short)]) == 2
    err = capsys.readouterr().err
    assert "too short for one causal_lm window of 8 tokens" in err
    assert len([line for line in err.splitlines() if line.startswith("lmfactory:")]) == 1
    assert "Traceback" not in err


def test_evaluate_checks_the_data_against_the_models_task(pushed, tmp_path, capsys):
    """Files that do not hold what the pair classifier reads (sentence1, sentence2, label):
    one line naming what the records have and what is missing, before any scoring."""
    text = tmp_path / "plain.txt"
    text.write_text("a gorgeous film\nutterly dull\n")
    single = tmp_path / "single.tsv"
    single.write_text("sentence\tlabel\na gorgeous film\tyes\nutterly dull\tno\n")
    conll = tmp_path / "tags.conll"
    conll.write_text("Paris\tB-location\nis\tO\n\n")
    for data, extra, expected in [
            (text, [], "missing ['sentence1', 'sentence2', 'label']"),
            (single, [], "missing ['sentence1', 'sentence2']"),
            (conll, ["--format", "conll"], "missing ['sentence1', 'sentence2', 'label']")]:
        assert cli.main(["evaluate", str(pushed["serving"]), "--data", str(data),
                         *extra]) == 2, data
        err = capsys.readouterr().err
        lines = [line for line in err.splitlines() if line.startswith("lmfactory:")]
        assert len(lines) == 1 and expected in lines[0], err
        assert "Traceback" not in err and "scoring" not in err


def test_predict_multiple_choice_takes_a_row_of_choices(pushed, tmp_path):
    """Surplus tab-separated fields, or a JSON list, become the [batch, choices] input of a
    multiple-choice SavedModel (components/tasks/multiple_choice_serving.py)."""
    from lmfactory.components.tasks.multiple_choice_serving import (
        export_multiple_choice_model)
    from lmfactory.models.tasks.multiple_choice_head import MultipleChoice
    from lmfactory.models.tasks.multiple_choice_preprocessor import MultipleChoicePreprocessor

    keras.utils.set_random_seed(4)
    backbone = models.build("bert", "tiny", vocabulary_size=len(wordpiece.RESERVED_TOKENS)
                            + len(WORDS), num_layers=1, hidden_dim=16, num_heads=2,
                            intermediate_dim=32, max_sequence_length=32)
    model = MultipleChoice(backbone, num_choices=3)
    preprocessor = MultipleChoicePreprocessor.from_vocabulary(pushed["vocab"], "bert",
                                                              sequence_length=12)
    export_multiple_choice_model(model, preprocessor, str(tmp_path / "mc"))
    signatures = predict_lib.load_signatures(str(tmp_path / "mc"))
    questions = [("the cat sat on", ["the mat", "a dog", "bad film"]),
                 ("a good", ["movie", "plot", "cat"])]
    lines = [q + "\t" + "\t".join(c) for q, c in questions[:1]] + [
        json.dumps({"context": q, "choices": c}) for q, c in questions[1:]]
    out = io.StringIO()
    predict_lib.predict("", lines, fields=["context", "choices"], out=out,
                        signatures=signatures)
    rows = _json_lines(out.getvalue())
    packed = preprocessor((tf.constant([q for q, _ in questions]),
                           tf.constant([c for _, c in questions])))
    expected = tf.nn.softmax(model(packed, training=False)).numpy()
    np.testing.assert_allclose([r["probabilities"] for r in rows], expected, atol=1e-5)
    assert [r["label"] for r in rows] == expected.argmax(-1).tolist()
    with pytest.raises(predict_lib.PredictError,
                       match="inputs 1-1: serving_default: every question needs exactly 3 "
                             "choices"):
        predict_lib.predict("", ["q\tonly\ttwo"], fields=["context", "choices"],
                            out=io.StringIO(), signatures=signatures)


# --------------------------------------------------------------------------- every kind


class _Signature:
    """Stands for a loaded signature: its declared inputs (what `choose_signature` reads)."""

    def __init__(self, **inputs):
        self.structured_input_signature = ((), {
            name: tf.TensorSpec(None, dtype, name=name) for name, dtype in inputs.items()})


GENERATOR = {"serving_default": _Signature(prompt=tf.string, max_length=tf.int32,
                                           sampler=tf.string, temperature=tf.float32,
                                           k=tf.int32, p=tf.float32),
             "generate_default": _Signature(prompt=tf.string)}


@pytest.mark.parametrize("signatures, settings, fields, expected", [
    ({"serving_default": _Signature(sentences=tf.string)}, {}, None,
     ("serving_default", ["sentences"])),  # tagger
    ({"serving_default": _Signature(question=tf.string, context=tf.string)}, {},
     ["question", "context"], ("serving_default", ["question", "context"])),  # span QA
    ({"serving_default": _Signature(context=tf.string, choices=tf.string)}, {},
     None, ("serving_default", ["choices", "context"])),  # multiple choice
    (GENERATOR, {}, None, ("generate_default", ["prompt"])),
    (GENERATOR, {"max_length": "9", "sampler": "greedy", "temperature": "1", "k": "5",
                 "p": "0.9"}, None, ("serving_default", ["prompt"])),
    ({"serving_default": _Signature(words=tf.string),
      "nearest_neighbours": _Signature(words=tf.string)}, {}, None,
     ("serving_default", ["words"])),  # word vectors
])
def test_signature_choice_for_every_task_kind(signatures, settings, fields, expected):
    name, _, inputs = predict_lib.choose_signature(signatures, None, settings, fields)
    assert (name, inputs) == expected


def test_signature_choice_and_example_errors():
    with pytest.raises(predict_lib.PredictError, match=r"no signature takes these inputs: "
                       r"serving_default\(k, max_length, p, prompt, sampler, temperature\)"):
        predict_lib.choose_signature({"serving_default": GENERATOR["serving_default"]},
                                     None, {}, None)
    parse = predict_lib.parse_example
    assert parse("a\tb", ["sentences"], 1) == {"sentences": "a\tb"}
    assert parse("Where?\tA\tB\tC", ["context", "choices"], 1) == {
        "context": "Where?", "choices": ["A", "B", "C"]}
    assert parse('{"context": "c", "choices": ["x", "y"]}', ["choices", "context"], 2) == {
        "choices": ["x", "y"], "context": "c"}
    with pytest.raises(predict_lib.PredictError, match="input 3: the model takes"):
        parse('{"question": "q"}', ["context", "question"], 3)
    # text that only starts like JSON is text for a model of one input
    assert parse("{curly} braces", ["prompt"], 4) == {"prompt": "{curly} braces"}
    with pytest.raises(predict_lib.PredictError, match="input 5: JSON nested too deeply"):
        parse('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}", ["prompt"], 5)


def test_closed_stdin_and_out_of_range_settings_are_one_line_errors(monkeypatch):
    monkeypatch.setattr("sys.stdin", None)  # what Python gives a process started with 0<&-
    for file in (None, "-"):
        with pytest.raises(predict_lib.PredictError, match="stdin is closed"):
            predict_lib.read_inputs([], file)
    with pytest.raises(ValueError, match="outside int32's range"):
        predict_lib._cast("4294967306", tf.int32)  # tf.constant would give 10
    assert predict_lib._cast("40", tf.int32) == 40


def test_rows_trim_padding_decode_and_round():
    outputs = {"tags": tf.constant([["B-person", "O", ""], ["O", "O", "O"]]),
               "lengths": tf.constant([2, 3]),
               "vectors": tf.constant([[0.1234567, 1.0], [2.0, 3.0]]),
               "answer": tf.constant(["Paris", ""])}
    assert predict_lib.rows_of(outputs, 2) == [
        {"answer": "Paris", "lengths": 2, "tags": ["B-person", "O"],
         "vectors": [0.123457, 1.0]},
        {"answer": "", "lengths": 3, "tags": ["O", "O", "O"], "vectors": [2.0, 3.0]}]
