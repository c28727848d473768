"""What a recipe cannot do however it is written: values that become folder names (the
run's ``name``, ``serving.model_name``) are one safe path component, checked when the recipe
is validated, so a run writes only under the folders it is given; YAML that does not parse
(a file or a ``--set`` value) is a one-line error; aliases that would expand a few KB of YAML
into millions of values are refused before anything walks them; a full disk during a run is
one line naming the path."""

import os
from pathlib import Path

import pytest

from lmfactory import cli
from lmfactory.pipelines import runners
from lmfactory.recipe import MAX_NAME_LENGTH, RecipeError, load_recipe

BAD_NAMES = ["../../elsewhere", "/abs/path", "a/b", "..", ".", ".hidden", "", "x" * 301,
             "123 apples", "caf\u00e9", "123", "[a, b]", "{a: 1}", "null"]


@pytest.mark.parametrize("field", ["name", "serving.model_name"])
@pytest.mark.parametrize("value", BAD_NAMES)
def test_a_name_that_is_not_one_safe_folder_name_is_refused(field, value):
    # "123" is read by YAML as an integer, "[a, b]" as a list, "null" as no value
    with pytest.raises(RecipeError) as error:
        load_recipe("bert_tiny_sst2", [f"{field}={value}" if value else f"{field}=''"])
    assert error.value.field == field
    assert "\n" not in str(error.value) and len(str(error.value)) < 250


@pytest.mark.parametrize("value", ["bert_tiny_sst2", "Model-2.v1", "x" * MAX_NAME_LENGTH])
def test_safe_names_are_kept(value):
    recipe = load_recipe("bert_tiny_sst2", [f"name={value}", f"serving.model_name={value}"])
    assert recipe["name"] == recipe["serving"]["model_name"] == value


def test_the_run_and_its_serving_folder_stay_under_the_output_folder(tmp_path):
    layout = runners.local_layout(load_recipe("bert_tiny_sst2"), str(tmp_path))
    for path in layout.values():
        assert os.path.commonpath([str(tmp_path), path]) == str(tmp_path)


def test_validate_prints_one_line_for_a_path_as_a_name(capsys):
    status = cli.main(["validate", "bert_tiny_sst2", "--set", "name=../../elsewhere"])
    error = capsys.readouterr().err
    assert status == 2
    assert error.count("\n") == 1 and "'name'" in error and "folder name" in error


def test_bad_yaml_in_a_set_value_is_one_line():
    with pytest.raises(RecipeError) as error:
        load_recipe("bert_tiny_sst2", ["finetuning.task_args={a: [1, 2"])
    assert error.value.field == "finetuning.task_args"
    assert "not valid YAML" in str(error.value) and "\n" not in str(error.value)


def test_exponent_notation_is_a_number_in_a_set_value_and_a_recipe_file(tmp_path):
    """"3e-5" (no dot) is a float, as YAML 1.2 reads it: YAML 1.1 would make it the string
    '3e-5', which the recipe's number checks refuse; quoted, it stays a string."""
    recipe = load_recipe("bert_tiny_sst2", ["finetuning.learning_rate=3e-5",
                                            "pretraining.learning_rate=1E-3"])
    assert recipe["finetuning"]["learning_rate"] == 3e-5
    assert recipe["pretraining"]["learning_rate"] == 1e-3
    with pytest.raises(RecipeError, match="finetuning.learning_rate"):
        load_recipe("bert_tiny_sst2", ['finetuning.learning_rate="3e-5"'])
    shipped = Path(__file__).resolve().parent.parent / "recipes" / "bert_tiny_sst2.yaml"
    path = tmp_path / "rates.yaml"
    path.write_text(shipped.read_text(encoding="utf-8").replace(
        "learning_rate: 0.0003", "learning_rate: 2e-5"), encoding="utf-8")
    assert load_recipe(str(path))["finetuning"]["learning_rate"] == 2e-5


def test_a_recipe_of_nested_aliases_is_refused_before_it_is_expanded(tmp_path):
    """Nine levels of nine aliases ("billion laughs"): 9**9 values from 1 KB of YAML."""
    lines = ["name: bomb", 'l0: &l0 ["x"]']
    for level in range(1, 10):
        lines.append(f"l{level}: &l{level} [" + ", ".join([f"*l{level - 1}"] * 9) + "]")
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(RecipeError, match="expands to more than") as error:
        load_recipe(str(path))
    assert "\n" not in str(error.value) and str(path) in str(error.value)
    many = tmp_path / "many.yaml"
    many.write_text("a: &a 1\nb: [" + ", ".join(["*a"] * 500) + "]\n", encoding="utf-8")
    with pytest.raises(RecipeError, match="aliases"):
        load_recipe(str(many))


@pytest.mark.parametrize("raised", [
    OSError(28, "No space left on device", "/runs/x/pipeline/Pretrainer/model/3/keras"),
    RuntimeError("Beam stage failed"),  # with the OS error as its cause, as Beam re-raises
])
def test_a_full_disk_during_a_run_is_one_line(raised, monkeypatch, tmp_path, capsys):
    if isinstance(raised, RuntimeError):
        try:
            raise raised from Exception("write failed: [Errno 28] No space left on device: "
                                        "'/runs/x/shard-00001'")
        except RuntimeError as chained:
            raised = chained

    def full_disk(*args, **kwargs):
        raise raised

    monkeypatch.setattr(runners, "run_local", full_disk)
    assert cli.main(["run", "bert_tiny_sst2", "--output-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "the disk is full" in err, err
    assert "/runs/x/" in err
