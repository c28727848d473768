"""The Beam DirectRunner mode policy (components/beam_options.py) and the TensorFlow-free
worker side of VocabularyGen's counting (components/vocabulary/counting.py)."""

import collections
import os
import subprocess
import sys

import apache_beam as beam
import pytest
import tensorflow as tf
from apache_beam.testing.util import assert_that, equal_to

from lmfactory import recipe as recipes
from lmfactory.components import beam_options
from lmfactory.components.vocabulary import counting, executor

POLICY = f"{beam_options.POLICY_FLAG}=1000"
MULTI = ["--direct_running_mode=multi_processing", "--direct_num_workers=2"]


def _mode(args):
    return [arg for arg in args if arg.startswith("--direct_")]


def test_small_input_runs_in_memory_and_the_flag_is_removed():
    assert _mode(beam_options.resolve_args(MULTI + [POLICY], 999)) == [
        "--direct_running_mode=in_memory", "--direct_num_workers=1"]
    assert beam_options.resolve_args(MULTI + [POLICY, "--foo=1"], 0) == [
        "--foo=1", "--direct_running_mode=in_memory", "--direct_num_workers=1"]


def test_large_or_unknown_input_keeps_the_configured_mode():
    assert beam_options.resolve_args(MULTI + [POLICY], 1000) == MULTI
    assert beam_options.resolve_args([POLICY] + MULTI, None) == MULTI


def test_explicit_settings_win():
    # no policy flag: the arguments are used as written, however small the input
    assert beam_options.resolve_args(MULTI, 1) == MULTI
    assert beam_options.policy_args("multi_processing", 2, []) == MULTI
    assert beam_options.policy_args("in_memory", 1, ["--x=1"]) == [
        "--direct_running_mode=in_memory", "--direct_num_workers=1", "--x=1"]
    # a mode or another runner among the extra arguments: no policy either
    for extra in (["--direct_running_mode=multi_threading"], ["--runner=DataflowRunner"],
                  ["--runner", "FlinkRunner"]):
        args = beam_options.policy_args("auto", 2, extra)
        assert not any(arg.startswith(beam_options.POLICY_FLAG) for arg in args), extra
    # a policy flag reaching another runner is dropped and nothing else changes
    dataflow = ["--runner=DataflowRunner", POLICY, "--project=p"]
    assert beam_options.resolve_args(dataflow, 1) == ["--runner=DataflowRunner", "--project=p"]


def test_recipe_default_is_auto_and_an_explicit_mode_wins():
    args = recipes.beam_pipeline_args(recipes.load_recipe("bert_tiny_sst2"))
    threshold = int(beam_options.DEFAULT_IN_MEMORY_BELOW_BYTES)
    assert args == MULTI + [f"{beam_options.POLICY_FLAG}={threshold}"]
    assert _mode(beam_options.resolve_args(args, 10_000)) == [
        "--direct_running_mode=in_memory", "--direct_num_workers=1"]
    assert beam_options.resolve_args(args, threshold) == MULTI
    explicit = recipes.load_recipe("bert_tiny_sst2", [
        "runtime.beam.direct_running_mode=multi_processing",
        "runtime.beam.in_memory_below_mb=0.5"])
    assert recipes.beam_pipeline_args(explicit) == MULTI
    with pytest.raises(recipes.RecipeError, match="in_memory_below_mb"):
        recipes.load_recipe("bert_tiny_sst2", ["runtime.beam.in_memory_below_mb=-1"])


def test_input_size_counts_globs_and_folders(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.gz").write_bytes(b"12345")
    (tmp_path / "a" / "y.gz").write_bytes(b"123")
    (tmp_path / "b.txt").write_bytes(b"1234567")
    assert beam_options.input_size([str(tmp_path / "a" / "*.gz")]) == 8
    assert beam_options.input_size([str(tmp_path / "a"), str(tmp_path / "b.txt")]) == 15
    assert beam_options.input_size([str(tmp_path / "none*")]) == 0


def _example(features):
    return tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString()


def test_text_lines_read_examples_like_tensorflow():
    serialized = _example({
        "text": tf.train.Feature(bytes_list=tf.train.BytesList(
            value=["one line\n\n  \nsecond Ünïcode line".encode(), b"third"])),
        "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[3, 4])),
        "score": tf.train.Feature(float_list=tf.train.FloatList(value=[0.5])),
        "bad": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"ok \xff\xfe"]))})
    assert list(counting.text_lines(serialized, ["text", "label", "score", "missing"])) == [
        "one line", "second Ünïcode line", "third"]
    assert list(counting.text_lines(serialized, ["bad"])) == ["ok \ufffd\ufffd"]


def test_bundle_counts_equal_batch_counts():
    lines = [f"word{i % 7} and, some <|endoftext|> more {i}" for i in range(50)]
    records = [_example({"text": tf.train.Feature(bytes_list=tf.train.BytesList(
        value=[line.encode()]))}) for line in lines]
    config = executor.VocabularyConfig(kind="bpe", vocab_size=300)
    expected = collections.Counter(dict(executor.count_words(lines, config)))
    # max_held_words=3: counts also leave the DoFn inside process(), not only at the end
    with beam.Pipeline(argv=["--direct_running_mode=in_memory"]) as pipeline:
        counts = (pipeline | beam.Create(records)
                  | beam.ParDo(counting.CountWordsFn(
                      counting.count_bpe, config.count_settings, ["text"],
                      lines_per_batch=8, max_held_words=3))
                  | beam.CombinePerKey(sum))
        assert_that(counts, equal_to(list(expected.items())))


_WORKER = """
import pickle, sys
from apache_beam.internal import pickler
step = pickler.loads(sys.stdin.buffer.read())
step.start_bundle()
list(step.process(step_input))
pairs = dict(value.value for value in step.finish_bundle())
print(sorted(pairs.items()))
print("tensorflow" in sys.modules, "tfx" in sys.modules)
"""


@pytest.mark.parametrize("kind", ["bpe", "wordpiece"])
def test_a_counting_worker_imports_no_tensorflow(kind):
    """What an SDK worker does with the pickled step: unpickle it and count an Example."""
    from apache_beam.internal import pickler

    config = executor.VocabularyConfig(kind=kind, vocab_size=300)
    step = counting.CountWordsFn(executor.LEARNERS[kind].count, config.count_settings,
                                 ["text"])
    record = _example({"text": tf.train.Feature(bytes_list=tf.train.BytesList(
        value=[b"Hello hello world"]))})
    code = f"step_input = {record!r}\n" + _WORKER
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    result = subprocess.run([sys.executable, "-c", code], input=pickler.dumps(step),
                            capture_output=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    counts, imported = result.stdout.decode().strip().splitlines()[-2:]
    assert counts == str(sorted(executor.count_words(["Hello hello world"], config)))
    assert imported == "False False"


def test_a_tfx_beam_executor_gets_the_resolved_arguments(monkeypatch):
    from apache_beam.options.pipeline_options import DirectOptions
    from tfx.dsl.components.base import base_beam_executor
    from tfx.utils import dependency_utils

    monkeypatch.setattr(dependency_utils, "make_beam_dependency_flags", list)
    args = beam_options.policy_args("auto", 2, [], in_memory_below_bytes=1000)
    for size, mode, workers in ((10, "in_memory", 1), (5000, "multi_processing", 2)):
        stage = executor.Executor(base_beam_executor.BaseBeamExecutor.Context(
            beam_pipeline_args=args))
        options = beam_options.executor_pipeline(stage, size)().options.view_as(DirectOptions)
        assert (options.direct_running_mode, options.direct_num_workers) == (mode, workers)
        assert not any(beam_options.POLICY_FLAG in arg for arg in stage._beam_pipeline_args)
