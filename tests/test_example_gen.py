"""Tests of TextExampleGen: parsers, ingest() end to end, the TFX executor and component."""

import gzip
import json
import os
from pathlib import Path

import pytest
import tensorflow as tf

from lmfactory.components.example_gen import TextExampleGen
from lmfactory.components.example_gen import executor as executor_lib
from lmfactory.components.example_gen import formats
from lmfactory.components.example_gen import ingest

MAX_CHARS = 200
MULTI_PROCESSING_ARGS = ["--direct_running_mode=multi_processing", "--direct_num_workers=2"]


def read_examples(output_dir, split):
    """All Examples of a split as dicts feature -> list of Python values."""
    pattern = os.path.join(str(output_dir), f"Split-{split}", "data_tfrecord-*.gz")
    files = tf.io.gfile.glob(pattern)
    assert files, f"no files match {pattern}"
    examples = []
    for record in tf.data.TFRecordDataset(files, compression_type="GZIP").as_numpy_iterator():
        example = tf.train.Example.FromString(record)
        examples.append({name: _feature_values(feature)
                         for name, feature in example.features.feature.items()})
    return examples


def _feature_values(feature):
    kind = feature.WhichOneof("kind")
    return list(getattr(feature, kind).value)


def texts_of(examples):
    return sorted(example["text"][0].decode("utf-8") for example in examples)


def read_report(output_dir):
    return json.loads((Path(output_dir) / "ingestion_report.json").read_text())


def bad_counts(counts):
    return {reason: counts[reason] for reason in formats.BAD_REASONS if counts[reason]}


# ---------------------------------------------------------------------------------------------
# Pure parsers (no Beam).


def test_split_documents_groups_lines_and_marks_empty_and_overlong_documents():
    lines = [b"", b"a one ", b"a two", b"", b"", b"b one\r", b"", b"x" * 50, b"c", b"", b""]
    assert list(formats.split_documents(lines, max_document_bytes=40)) == [
        b"a one\na two", b"", b"b one", None]


def test_iter_file_lines_strips_bom_and_flags_overlong_lines():
    data = formats.UTF8_BOM + b"first\n" + b"y" * 30 + b"\nlast"
    chunks = iter([data[:5], data[5:12], data[12:], b""])
    lines = list(formats.iter_file_lines(lambda size: next(chunks), max_line_bytes=20))
    assert lines == [b"first", None, b"last"]


def test_record_checks_name_each_reason():
    options = formats.FormatOptions(format="text", max_record_chars=10)

    def reason_of(payload):
        return formats.parse_text_document(payload, options).reason

    assert reason_of(b"ab\xff") == formats.INVALID_UTF8
    assert reason_of(b"a\x00b") == formats.NUL_BYTES
    assert reason_of(b"  \n ") == formats.EMPTY
    assert reason_of(("é" * 11).encode("utf-8")) == formats.TOO_LONG
    assert reason_of(None) == formats.TOO_LONG
    example = formats.parse_text_document(("é" * 10).encode("utf-8"), options)
    assert example.features.feature["text"].bytes_list.value == [("é" * 10).encode("utf-8")]


def test_table_row_parsing():
    tsv = formats.FormatOptions(format="tsv", label_key="label", text_key="sentence")
    columns = ("sentence", "label")
    good = formats.parse_table_row(b'a "quoted" word\t1', columns, tsv)
    assert good.features.feature["text"].bytes_list.value == [b'a "quoted" word']
    assert good.features.feature["label"].int64_list.value == [1]
    assert formats.parse_table_row(b"a\t1\textra", columns, tsv).reason == formats.MALFORMED
    assert formats.parse_table_row(b"a\tpositive", columns, tsv).reason == formats.MALFORMED
    assert formats.parse_table_row(b"\t1", columns, tsv).reason == formats.EMPTY
    csv_options = formats.FormatOptions(format="csv", label_key="score", label_type="float")
    row = formats.parse_table_row(b'"x, ""y""\nz",4.5', ("text", "score"), csv_options)
    assert row.features.feature["text"].bytes_list.value == [b'x, "y"\nz']
    assert row.features.feature["label"].float_list.value == [4.5]
    assert formats.parse_table_row(b'"a"b,1', ("text", "score"), csv_options).reason == "malformed"


def test_csv_rows_may_span_lines():
    lines = [b"h1,h2", b'"multi', b'line",1', b"plain,2"]
    rows = list(formats.split_table_rows(lines, "csv", max_row_bytes=100))
    assert rows == [b"h1,h2", b'"multi\nline",1', b"plain,2"]


def test_counts_fall_back_to_side_output_when_metrics_are_missing_or_disagree():
    side = {"train": {"good": 3, "empty": 1}}
    counts, source = executor_lib.choose_counts(None, side)
    assert source == "side_output" and counts["train"]["good"] == 3
    assert counts["train"]["bad"] == 1 and counts["train"]["total"] == 4
    _, source = executor_lib.choose_counts({"train": {"good": 4, "empty": 1}}, side)
    assert source == "side_output"
    _, source = executor_lib.choose_counts({"train": {"good": 3, "empty": 1}}, side)
    assert source == "beam_metrics"

    class NoMetricsResult:
        def metrics(self):
            raise NotImplementedError("this runner has no metrics")

    assert executor_lib.counts_from_metrics(NoMetricsResult(), ["train"]) is None


# ---------------------------------------------------------------------------------------------
# ingest() end to end on the in-memory DirectRunner.


def test_text_corpus_one_example_per_document(tmp_path):
    (tmp_path / "part-0.txt").write_text(
        "The first document.\nIt has two sentences.\n\nThe second document.\n")
    with gzip.open(tmp_path / "part-1.txt.gz", "wt", encoding="utf-8") as handle:
        handle.write("A gzipped document.\n\nAnd one more,\n  with a spaced line.  \n")
    report = ingest({"format": "text", "splits": {"train": str(tmp_path / "part-*")}},
                    str(tmp_path / "out"))
    assert texts_of(read_examples(tmp_path / "out", "train")) == [
        "A gzipped document.",
        "And one more,\nwith a spaced line.",
        "The first document.\nIt has two sentences.",
        "The second document.",
    ]
    assert report["splits"]["train"]["good"] == 4 and report["totals"]["bad"] == 0
    assert read_report(tmp_path / "out") == report
    assert sorted(os.listdir(tmp_path / "out")) == ["Split-train", "ingestion_report.json"]


def test_bad_corpus_records_are_counted_per_reason(tmp_path):
    corpus = b"".join([
        b"Good document one.\nStill one.\n\n",
        b"Broken \xff\xfe bytes.\n\n",
        b"Has a NUL \x00 byte.\n\n",
        b"\n",  # a second blank line in a row: an empty document
        b"Too long: " + b"z" * (MAX_CHARS + 10) + b"\n\n",
        "Good document two, ünïcode.\n".encode("utf-8"),
    ])
    (tmp_path / "corpus.txt").write_bytes(corpus)
    report = ingest({"format": "text", "splits": {"train": str(tmp_path / "corpus.txt")},
                     "max_record_chars": MAX_CHARS}, str(tmp_path / "out"))
    counts = report["splits"]["train"]
    assert bad_counts(counts) == {"invalid_utf8": 1, "nul_bytes": 1, "empty": 1, "too_long": 1}
    assert counts["good"] == 2 and counts["total"] == 6
    assert report["counts_source"] == "beam_metrics"
    assert texts_of(read_examples(tmp_path / "out", "train")) == [
        "Good document one.\nStill one.", "Good document two, ünïcode."]


def test_glue_sst2_dev(shared_data, tmp_path):
    report = ingest({"format": "tsv", "label_column": "label",
                     "splits": {"eval": str(shared_data / "glue/SST-2/dev.tsv")}},
                    str(tmp_path / "out"))
    examples = read_examples(tmp_path / "out", "eval")
    assert report["splits"]["eval"]["good"] == 872 and report["totals"]["bad"] == 0
    assert len(examples) == 872
    assert {label for example in examples for label in example["label"]} == {0, 1}
    assert b"it 's a charming and often affecting journey . " in [
        example["sentence"][0] for example in examples]


def test_glue_cola_dev_without_header(shared_data, tmp_path):
    columns = ["source", "label", "original_label", "sentence"]
    report = ingest({"format": "tsv", "has_header": False, "column_names": columns,
                     "label_column": "label", "text_field": "sentence",
                     "splits": {"eval": str(shared_data / "glue/CoLA/dev.tsv")}},
                    str(tmp_path / "out"))
    examples = read_examples(tmp_path / "out", "eval")
    assert report["splits"]["eval"]["good"] == 1043 and report["totals"]["bad"] == 0
    assert set(examples[0]) == {"source", "label", "original_label", "text"}
    assert "The sailors rode the breeze clear of the rocks." in texts_of(examples)
    assert "John talked to Bill about himself." in texts_of(examples)  # the last row, no "\n"
    assert sum(example["label"][0] for example in examples) == 721


def test_glue_mrpc_dev_with_bom(shared_data, tmp_path):
    report = ingest({"format": "tsv", "label_column": "Quality",
                     "splits": {"eval": str(shared_data / "glue/MRPC/dev.tsv")}},
                    str(tmp_path / "out"))
    examples = read_examples(tmp_path / "out", "eval")
    assert report["splits"]["eval"]["good"] == 408 and report["totals"]["bad"] == 0
    assert set(examples[0]) == {"label", "#1 ID", "#2 ID", "#1 String", "#2 String"}
    first_strings = [example["#1 String"][0] for example in examples]
    assert (b"He said the foodservice pie business doesn 't fit the company 's long-term growth "
            b"strategy .") in first_strings


def test_malformed_tsv_rows_are_skipped(tmp_path):
    (tmp_path / "rows.tsv").write_text(
        "sentence\tlabel\n"
        "fine row\t1\n"
        "too\tmany\tcolumns\n"
        "no label column\n"
        "word label\tpositive\n"
        "\n"
        "another fine row\t0\n")
    report = ingest({"format": "tsv", "label_column": "label",
                     "splits": {"train": str(tmp_path / "rows.tsv")}}, str(tmp_path / "out"))
    assert bad_counts(report["splits"]["train"]) == {"malformed": 3, "empty": 1}
    examples = read_examples(tmp_path / "out", "train")
    assert sorted((example["sentence"][0], example["label"][0]) for example in examples) == [
        (b"another fine row", 0), (b"fine row", 1)]


def test_labels_outside_the_tasks_classes_are_malformed(tmp_path):
    """A label 7 or -1 in a 2-class task is caught at ingestion (counted and
    skipped), not by a TensorFlow traceback in the FineTuner."""
    (tmp_path / "rows.tsv").write_text(
        "sentence\tlabel\n" "fine row\t1\n" "seven\t7\n" "minus one\t-1\n" "zero\t0\n"
        "two\t2\n")
    config = {"format": "tsv", "label_column": "label",
              "splits": {"train": str(tmp_path / "rows.tsv")}}
    report = ingest({**config, "num_classes": 2}, str(tmp_path / "out"))
    assert bad_counts(report["splits"]["train"]) == {"malformed": 3}
    assert sorted(example["label"][0] for example in read_examples(tmp_path / "out", "train")
                  ) == [0, 1]
    assert ingest(config, str(tmp_path / "any"))["splits"]["train"]["good"] == 5
    for bad in (0, "2", True):
        with pytest.raises(ValueError, match="num_classes"):
            ingest({**config, "num_classes": bad}, str(tmp_path / "bad"))
    with pytest.raises(ValueError, match="num_classes"):
        ingest({**config, "label_type": "float", "num_classes": 2}, str(tmp_path / "bad"))


def test_csv_with_bom_and_quoted_fields(tmp_path):
    (tmp_path / "data.csv").write_bytes(
        formats.UTF8_BOM + b'text,label\r\n"Hello, ""world""",1\r\n"two\r\nlines",0\r\nbad,x\r\n')
    report = ingest({"format": "csv", "label_column": "label", "text_field": "text",
                     "splits": {"train": str(tmp_path / "data.csv")}}, str(tmp_path / "out"))
    assert bad_counts(report["splits"]["train"]) == {"malformed": 1}
    assert texts_of(read_examples(tmp_path / "out", "train")) == [
        'Hello, "world"', "two\r\nlines"]


def test_jsonl_with_bad_lines(tmp_path):
    (tmp_path / "data.jsonl").write_text(
        '{"body": "first text", "stars": 5, "tags": ["a", "b"], "score": 0.5}\n'
        '{"body": "second text", "stars": "4"}\n'
        '{"body": "broken json", \n'
        '["not", "an", "object"]\n'
        '{"body": "bad label", "stars": "many"}\n'
        '{"stars": 3}\n'
        '{"body": "", "stars": 1}\n')
    report = ingest({"format": "jsonl", "text_field": "body", "label_column": "stars",
                     "splits": {"train": str(tmp_path / "data.jsonl")}}, str(tmp_path / "out"))
    assert bad_counts(report["splits"]["train"]) == {"malformed": 4, "empty": 1}
    examples = sorted(read_examples(tmp_path / "out", "train"), key=lambda ex: ex["text"])
    assert examples[0] == {"text": [b"first text"], "label": [5], "tags": [b"a", b"b"],
                           "score": [0.5]}
    assert examples[1] == {"text": [b"second text"], "label": [4]}


def test_missing_inputs_raise_file_not_found_naming_them(tmp_path):
    missing = str(tmp_path / "nowhere.tsv")
    with pytest.raises(FileNotFoundError, match="nowhere.tsv"):
        ingest({"format": "tsv", "splits": {"train": missing}}, str(tmp_path / "out"))
    with pytest.raises(FileNotFoundError, match=r"shard-\*\.txt"):
        ingest({"format": "text", "path": str(tmp_path / "shard-*.txt")}, str(tmp_path / "out"))


def test_tsv_of_unknown_shape_raises_value_error_naming_file_and_columns(tmp_path):
    (tmp_path / "odd.tsv").write_text("sentence\tscore\nsome text\t1\n")
    with pytest.raises(ValueError, match=r"odd\.tsv.*'sentence', 'score'.*'label'"):
        ingest({"format": "tsv", "label_column": "label",
                "splits": {"train": str(tmp_path / "odd.tsv")}}, str(tmp_path / "out"))


def test_split_with_only_bad_records_raises_naming_the_split(tmp_path):
    (tmp_path / "good.txt").write_text("A fine document.\n")
    (tmp_path / "bad.txt").write_bytes(b"\xff\xff\n\nNUL\x00\n")
    with pytest.raises(ValueError, match=r"split 'eval': all 2 records were bad"):
        ingest({"format": "text", "splits": {"train": str(tmp_path / "good.txt"),
                                             "eval": str(tmp_path / "bad.txt")}},
               str(tmp_path / "out"))
    assert read_report(tmp_path / "out")["splits"]["eval"]["bad"] == 2


def _eval_fraction_config(shared_data):
    return {"format": "tsv", "has_header": False, "label_column": "label",
            "column_names": ["source", "label", "original_label", "sentence"],
            "path": str(shared_data / "glue/CoLA/dev.tsv"), "eval_fraction": 0.2}


def _sentences_by_split(output_dir):
    return {split: sorted(example["sentence"][0] for example in read_examples(output_dir, split))
            for split in ("train", "eval")}


def test_eval_fraction_split_is_deterministic(shared_data, tmp_path):
    config = _eval_fraction_config(shared_data)
    first = ingest(config, str(tmp_path / "run1"))
    second = ingest(config, str(tmp_path / "run2"))
    assert first["splits"] == second["splits"]
    assert first["split_names"] == ["train", "eval"]
    assert 100 < first["splits"]["eval"]["good"] < 320
    assert first["totals"]["good"] == 1043
    assert _sentences_by_split(tmp_path / "run1") == _sentences_by_split(tmp_path / "run2")


@pytest.mark.dag  # the slow tier (conftest.py)
def test_multi_processing_runner_gives_the_same_result(shared_data, tmp_path):
    config = _eval_fraction_config(shared_data)
    in_memory = ingest(config, str(tmp_path / "in_memory"))
    multi = ingest(config, str(tmp_path / "multi"), beam_pipeline_args=MULTI_PROCESSING_ARGS)
    assert multi["splits"] == in_memory["splits"]
    assert multi["totals"]["good"] == 1043
    assert _sentences_by_split(tmp_path / "multi") == _sentences_by_split(tmp_path / "in_memory")


def _prepare_tiny_tfds_dataset(data_dir):
    import tensorflow_datasets as tfds

    class TinyReviews(tfds.core.GeneratorBasedBuilder, skip_registration=True):
        """Four in-memory reviews; no download."""
        VERSION = tfds.core.Version("1.0.0")

        def _info(self):
            return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict({
                "review": tfds.features.Text(),
                "sentiment": tfds.features.ClassLabel(names=["neg", "pos"]),
                "idx": tf.int32}))

        def _split_generators(self, dl_manager):
            del dl_manager
            return {"train": self._generate_examples(["great film", "dull plot", "loved it"]),
                    "test": self._generate_examples(["not bad", ""])}

        def _generate_examples(self, reviews):
            for index, review in enumerate(reviews):
                yield index, {"review": review, "sentiment": index % 2, "idx": index}

    builder = TinyReviews(data_dir=str(data_dir))
    builder.download_and_prepare(
        download_config=tfds.download.DownloadConfig(try_download_gcs=False))
    return builder.name


def test_tfds_dataset_by_name_from_data_dir(tmp_path):
    name = _prepare_tiny_tfds_dataset(tmp_path / "tfds")
    report = ingest({"format": "tfds", "name": name, "data_dir": str(tmp_path / "tfds"),
                     "tfds_splits": {"train": "train", "eval": "test"},
                     "text_feature": "review", "label_feature": "sentiment"},
                    str(tmp_path / "out"))
    train = sorted(read_examples(tmp_path / "out", "train"), key=lambda ex: ex["idx"])
    assert train == [{"text": [b"great film"], "label": [0], "idx": [0]},
                     {"text": [b"dull plot"], "label": [1], "idx": [1]},
                     {"text": [b"loved it"], "label": [0], "idx": [2]}]
    assert report["splits"]["eval"]["good"] == 1
    assert bad_counts(report["splits"]["eval"]) == {"empty": 1}
    with pytest.raises(FileNotFoundError, match="not_prepared"):
        ingest({"format": "tfds", "name": "not_prepared", "data_dir": str(tmp_path / "tfds")},
               str(tmp_path / "out2"))


# ---------------------------------------------------------------------------------------------
# TFX executor and component.


def test_executor_do_fills_a_real_examples_artifact(tmp_path):
    from tfx.types import artifact_utils
    from tfx.types import standard_artifacts

    (tmp_path / "corpus.txt").write_text("One document.\n\nAnother document.\n")
    component = TextExampleGen(input_config={"format": "text",
                                             "splits": {"train": str(tmp_path / "corpus.txt")}})
    exec_properties = component.exec_properties
    examples = standard_artifacts.Examples()
    examples.uri = str(tmp_path / "examples")
    executor_lib.Executor().Do({}, {"examples": [examples]}, exec_properties)

    assert artifact_utils.decode_split_names(examples.split_names) == ["train"]
    assert examples.get_string_custom_property("payload_format") == "FORMAT_TF_EXAMPLE"
    assert examples.get_string_custom_property("file_format") == "tfrecords_gzip"
    assert (examples.get_string_custom_property("input_fingerprint")
            == exec_properties["input_fingerprint"])
    assert texts_of(read_examples(examples.uri, "train")) == ["Another document.", "One document."]
    assert read_report(examples.uri)["totals"]["good"] == 2


def test_component_fingerprint_follows_the_input_files(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("Version one.\n")
    config = {"format": "text", "splits": {"train": str(tmp_path / "*.txt")}}
    first = TextExampleGen(input_config=config)
    assert json.loads(first.exec_properties["input_config"]) == config
    assert first.outputs["examples"].type_name == "Examples"
    assert first.exec_properties["input_fingerprint"].startswith("files:1,")
    corpus.write_text("Version two, longer.\n")
    second = TextExampleGen(input_config=config)
    assert second.exec_properties["input_fingerprint"] != first.exec_properties["input_fingerprint"]
    (tmp_path / "extra.txt").write_text("More.\n")
    third = TextExampleGen(input_config=config)
    assert third.exec_properties["input_fingerprint"].startswith("files:2,")
    not_yet_there = TextExampleGen(input_config={"format": "text", "path": str(tmp_path / "x*")})
    assert ",missing:1," in not_yet_there.exec_properties["input_fingerprint"]
    with pytest.raises(ValueError, match="unknown keys"):
        TextExampleGen(input_config={"format": "text", "path": "x", "colum_names": ["a"]})


@pytest.mark.parametrize("case", ["missing", "empty", "header_only", "directory",
                                  "no_label_column"])
def test_data_file_errors_are_one_line_naming_the_file(tmp_path, case):
    """What a bad data file raises is an OSError / ValueError whose message is one
    line naming the file or its glob, the form `lmfactory run` prints (cli.DATA_ERRORS)."""
    from lmfactory.cli import DATA_ERRORS

    path = tmp_path / "train.tsv"
    if case == "empty":
        path.write_text("")
    elif case == "header_only":
        path.write_text("sentence\tlabel\n")
    elif case == "directory":
        path.mkdir()
    elif case == "no_label_column":
        path.write_text("sentence\tscore\na fine row\t1\n")
    with pytest.raises(DATA_ERRORS) as error:
        ingest({"format": "tsv", "label_column": "label", "splits": {"train": str(path)}},
               str(tmp_path / "out"))
    message = str(error.value)
    assert "\n" not in message.strip(), message
    assert str(path) in message or "'train'" in message, message
