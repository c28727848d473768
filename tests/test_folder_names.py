"""Recipe values that become folder names (the run's ``name``, ``serving.model_name``) are
one safe path component, checked when the recipe is validated: a run writes only under the
folders it is given."""

import os

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
