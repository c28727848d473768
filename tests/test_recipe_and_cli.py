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
    ("pretraining.optimizer=adagrad", "pretraining.optimizer"),  # with weight decay 0.01
    # Sizes the architecture cannot take fail here, not deep inside a stage.
    ("finetuning.sequence_length=1024", "finetuning.sequence_length"),
    ("objective.max_seq_length=600", "objective.max_seq_length"),
    ("tokenizer.vocab_size=5", "tokenizer.vocab_size"),
    ("overrides.num_heads=3", "overrides"),
    ("overrides.num_layrs=1", "overrides"),
])
def test_bad_values_name_the_field(assignment, field):
    with pytest.raises(RecipeError) as error:
        load_recipe("bert_tiny_sst2", [assignment])
    assert error.value.field == field
    assert f"'{field}'" in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("assignment, field, suggestion", [
    ("pretrainng.steps=60", "pretrainng", "pretraining"),
    ("finetuning.learning_rat=0.1", "finetuning.learning_rat", "finetuning.learning_rate"),
    ("runtime.beam.direct_num_worker=3", "runtime.beam.direct_num_worker",
     "runtime.beam.direct_num_workers"),
    ("tokenizer.vocabsize=300", "tokenizer.vocabsize", "tokenizer.vocab_size"),
    ("teacher.pretrainig.steps=3", "teacher.pretrainig", "teacher.pretraining"),
    ("zzz=1", "zzz", None),
])
def test_unknown_keys_are_refused_with_the_closest_known_key(assignment, field, suggestion):
    """A misspelt key would leave the defaults in force silently."""
    with pytest.raises(RecipeError) as error:
        load_recipe("distilbert_tiny_sst2" if "teacher" in assignment else "bert_tiny_sst2",
                    [assignment])
    assert error.value.field == field
    message = str(error.value)
    assert "unknown key" in message and "\n" not in message
    if suggestion:
        assert f"did you mean {suggestion}?" in message
    else:
        assert "known keys here" in message and "pretraining" in message


def test_free_sections_and_kind_defaults_are_not_refused():
    recipe = load_recipe("bert_tiny_sst2", ["overrides.num_layers=1",
                                            "finetuning.task_args.anything=1",
                                            "pretraining.task_args={x: 1}"])
    assert recipe["overrides"]["num_layers"] == 1
    assert load_recipe("word2vec_wikitext2", ["finetuning.nearest_neighbours=5"])[
        "finetuning"]["nearest_neighbours"] == 5
    assert load_recipe("ulmfit_sst2", ["lm_finetuning.clip_norm=0.5"])[
        "lm_finetuning"]["clip_norm"] == 0.5
    with pytest.raises(RecipeError, match="lm_finetuning.init_checkpoint"):
        load_recipe("ulmfit_sst2", ["lm_finetuning.init_checkpoint=x"])


def test_size_limits_follow_the_overrides():
    recipe = load_recipe("bert_tiny_sst2", ["finetuning.sequence_length=1024",
                                            "overrides.max_sequence_length=1024"])
    assert recipe["finetuning"]["sequence_length"] == 1024
    with pytest.raises(RecipeError, match="512 positions of bert preset 'tiny'"):
        load_recipe("bert_tiny_sst2", ["finetuning.sequence_length=513"])
    with pytest.raises(RecipeError, match="at least 6"):  # BERT's 5 special tokens + 1
        load_recipe("bert_tiny_sst2", ["tokenizer.vocab_size=5"])


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


def test_console_script_reports_a_data_error_in_one_line(tmp_path):
    """A missing or malformed data file stops the run with one line, like a bad
    recipe value; -v shows the traceback."""
    missing = tmp_path / "missing.txt"
    result = subprocess.run(
        [sys.executable, "-m", "lmfactory.cli", "run", "bert_tiny_sst2", "--output-dir",
         str(tmp_path / "out"), "--set", f"data.corpus.path={missing}"],
        capture_output=True, text=True, timeout=600)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"lmfactory: No input files match '{missing}' (-v shows the traceback)")

