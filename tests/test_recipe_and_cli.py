"""Recipes: validation with one-line errors naming the field; the CLI's list/validate."""

import subprocess
import sys

import pytest

from lmfactory import cli
from lmfactory import models
from lmfactory.recipe import RecipeError, load_recipe, recipe_names


def test_every_shipped_recipe_is_valid():
    assert {"bert_tiny_sst2", "gpt2_tiny_shakespeare"} <= set(recipe_names())
    for name in recipe_names():
        recipe = load_recipe(name)
        assert recipe["name"] == name
        assert recipe["architecture"] in models.names()


@pytest.mark.parametrize("assignment, field", [
    ("pretraining.steps=-3", "pretraining.steps"),
    ("tokenizer.kind=bpe", "tokenizer.kind"),
    ("architecture=transformer9000", "architecture"),
    ("preset=gigantic", "preset"),
    ("objective.masked_lm_prob=1.5", "objective.masked_lm_prob"),
    ("data.corpus.format=parquet", "data.corpus.format"),
    ("runtime.strategy=magic", "runtime.strategy"),
    ("finetuning.text_features=[]", "finetuning.text_features"),
    ("runtime.beam.direct_num_workers=zero", "runtime.beam.direct_num_workers"),
])
def test_bad_values_name_the_field(assignment, field):
    with pytest.raises(RecipeError) as error:
        load_recipe("bert_tiny_sst2", [assignment])
    assert error.value.field == field
    assert f"'{field}'" in str(error.value) and "\n" not in str(error.value)


def test_overrides_apply():
    recipe = load_recipe("bert_tiny_sst2", ["pretraining.steps=7", "runtime.jit_compile=true"])
    assert recipe["pretraining"]["steps"] == 7 and recipe["runtime"]["jit_compile"] is True


def test_unknown_recipe_lists_the_known_ones():
    with pytest.raises(FileNotFoundError, match="bert_tiny_sst2"):
        load_recipe("no_such_recipe")


def test_cli_list_prints_architectures_and_recipes_one_per_line(capsys):
    assert cli.main(["list"]) == 0
    lines = capsys.readouterr().out.split()
    assert lines == [*models.names(), *recipe_names()]
    assert {"bert", "gpt2", "bert_tiny_sst2"} <= set(lines)


def test_console_script_reports_a_bad_field_in_one_line():
    result = subprocess.run(
        [sys.executable, "-m", "lmfactory.cli", "validate", "bert_tiny_sst2",
         "--set", "finetuning.batch_size=0"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "lmfactory: recipe field 'finetuning.batch_size': must be a positive integer, got 0")
