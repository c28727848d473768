"""`benchmarks/accelerator_pretraining.py` in its CPU mode (``--tiny``): the project's BERT
(MLM + NSP) and GPT-2 pretraining task models and keras-hub's `BertMaskedLM` and
`GPT2CausalLM` each train a few bfloat16 steps under JAX, and the JSON records carry every
figure the accelerator run reports.

The script runs in the JAX environment ``.venv-jax`` (JAX, Keras, keras-hub, no
TensorFlow; ``./run.sh setup`` makes it beside the TensorFlow one), started once for the
whole file. No figure is compared with a speed: on a CPU they only show that each is
computed."""

import json
import math
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
JAX_PYTHON = REPO / ".venv-jax" / "bin" / "python"
SCRIPT = REPO / "benchmarks" / "accelerator_pretraining.py"
CASES = {"bert-32": "bert", "bert-64": "bert", "gpt2-64": "gpt2"}
IMPLEMENTATIONS = {"lmfactory", "keras-hub"}
POSITIVE_FIELDS = ("batch", "seq", "step_time_s", "tokens_per_s", "flops_per_step",
                   "achieved_tflops", "peak_tflops", "compile_s", "compiled_memory_bytes",
                   "parameters")
TEXT_FIELDS = ("case", "implementation", "backend", "device", "model_class")
VERSIONS = ("jax", "keras", "keras_hub")


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """(records, printed output) of one ``--tiny --json`` run in the JAX environment."""
    if not JAX_PYTHON.exists():
        pytest.fail(f"{JAX_PYTHON} is missing: the JAX environment the accelerator "
                    "benchmark runs in is made by `./run.sh setup`")
    output = tmp_path_factory.mktemp("accelerator") / "accelerator.json"
    # The TensorFlow suite's Keras backend and paths stay out of the JAX environment.
    environment = {name: value for name, value in os.environ.items()
                   if name not in ("KERAS_BACKEND", "PYTHONPATH", "PYTHONHOME")}
    process = subprocess.run([str(JAX_PYTHON), str(SCRIPT), "--tiny", "--json", str(output)],
                             capture_output=True, text=True, env=environment, timeout=600,
                             cwd=output.parent)
    assert process.returncode == 0, (f"exit {process.returncode}\n{process.stdout[-6000:]}\n"
                                     f"{process.stderr[-6000:]}")
    return json.loads(output.read_text()), process.stdout


def test_every_case_ran_with_both_implementations(tiny_run):
    records, _ = tiny_run
    assert not [record for record in records if "error" in record]
    ran = {(record["case"], record["implementation"]) for record in records}
    assert ran == {(case, implementation) for case in CASES
                   for implementation in IMPLEMENTATIONS}
    for record in records:
        assert record["architecture"] == CASES[record["case"]]
        assert record["dtype_policy"] == "mixed_bfloat16"
    classes = {(record["case"], record["implementation"]): record["model_class"]
               for record in records}
    assert classes[("bert-32", "lmfactory")] == "BertPretrainer"
    assert classes[("bert-32", "keras-hub")] == "BertMaskedLM"
    assert classes[("gpt2-64", "keras-hub")] == "GPT2CausalLM"


def test_every_figure_is_finite_and_positive(tiny_run):
    records, _ = tiny_run
    for record in records:
        where = f"{record['case']} / {record['implementation']}"
        for field in POSITIVE_FIELDS:
            value = record[field]
            assert isinstance(value, (int, float)), (where, field, value)
            assert math.isfinite(value) and value > 0, (where, field, value)
        assert math.isfinite(record["final_loss"]), where
        for field in TEXT_FIELDS:
            assert isinstance(record[field], str) and record[field], (where, field)
        for library in VERSIONS:
            assert record["versions"][library], (where, library)
        assert record["tokens_per_s"] == pytest.approx(
            record["batch"] * record["seq"] / record["step_time_s"])


def test_mfu_is_a_fraction_of_the_measured_peak(tiny_run):
    records, _ = tiny_run
    for record in records:
        assert 0 < record["mfu"] <= 1, (record["case"], record["implementation"], record["mfu"])
        assert record["mfu"] == pytest.approx(
            record["flops_per_step"] / record["step_time_s"] / (record["peak_tflops"] * 1e12))


def test_peak_memory_is_measured_or_explained(tiny_run):
    records, _ = tiny_run
    for record in records:
        if record["peak_memory_bytes"] is None:
            assert record["backend"] == "cpu" and record["peak_memory_note"], record
        else:
            assert record["peak_memory_bytes"] > 0, record


def test_the_run_imports_no_tensorflow_and_prints_the_table(tiny_run):
    records, printed = tiny_run
    assert all(record["tensorflow_imported"] is False for record in records)
    assert "bf16 matmul peak" in printed and "no next-sentence head" in printed
    for case in CASES:
        assert f"| {case} | lmfactory |" in printed and f"| {case} | keras-hub |" in printed
