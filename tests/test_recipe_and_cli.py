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



def test_each_section_holds_its_defaults_and_the_resolved_recipe_resolves_to_itself():
    from lmfactory.components.trainer.config import TrainerConfig
    from lmfactory.recipe import (DEFAULTS, FinetuningStage, Recipe, Runtime, Tokenizer,
                                  TrainingStage, load, validate)

    recipe = load("bert_tiny_sst2")
    assert isinstance(recipe, Recipe) and isinstance(recipe.finetuning, FinetuningStage)
    assert recipe.runtime.beam.direct_num_workers == 2  # not in the YAML: a default
    assert recipe.tokenizer.learn_from == ("corpus",) and recipe.teacher is None
    assert DEFAULTS["tokenizer"] == Tokenizer.defaults() and "kind" not in DEFAULTS["tokenizer"]
    # The optimiser's and runtime's defaults are the Trainer's own.
    for key in ("batch_size", "learning_rate", "adam_beta_2", "adam_epsilon", "optimizer"):
        assert TrainingStage.defaults()[key] == TrainerConfig.__dataclass_fields__[key].default
    assert Runtime.defaults()["progress_seconds"] == TrainerConfig.progress_seconds
    assert FinetuningStage.defaults()["learning_rate"] == 5e-5
    for name in recipe_names():
        resolved = load_recipe(name)
        assert validate(resolved) == resolved == Recipe.from_dict(resolved).to_dict()


@pytest.mark.parametrize("name, assignment, field, message", [
    ("bert_tiny_sst2", "tokenizer.min_frequency=0", "tokenizer.min_frequency",
     "must be a positive integer, got 0"),
    ("bert_tiny_sst2", "tokenizer.lowercase=yes please", "tokenizer.lowercase",
     "must be true or false"),
    ("bert_tiny_sst2", "objective.ngram_masking=-1", "objective.ngram_masking",
     "must be an integer >= 0 (the longest masked n-gram; 0 = off), got -1"),
    ("bert_tiny_sst2", "objective.random_token_rate=0.5", "objective.random_token_rate",
     "must not exceed 1"),
    ("bert_tiny_sst2", "pretraining.warmup_fraction=0.995", "pretraining.warmup_fraction",
     "must be a number in [0.0, 0.99], got 0.995"),
    ("bert_tiny_sst2", "pretraining.init_checkpoint=3", "pretraining.init_checkpoint",
     "must be the path of a checkpoint folder"),
    ("bert_tiny_sst2", "finetuning.monitor=3", "finetuning.monitor",
     "must be the name of a validation metric"),
    ("bert_tiny_sst2", "finetuning.task_args=[1]", "finetuning.task_args",
     "must be a mapping"),
    ("ulmfit_sst2", "lm_finetuning.learning_rate=2", "lm_finetuning.learning_rate",
     "must be a number in [1e-08, 1.0], got 2"),
    ("distilbert_tiny_sst2", "teacher.pretraining.adam_beta_2=1", "teacher.pretraining.adam_beta_2",
     "must be a number in [0.0, 0.999999], got 1"),
    ("distilbert_tiny_sst2", "teacher.finetuning.keep=first", "teacher.finetuning.keep",
     "must be one of last, best; got 'first'"),
    ("bert_tiny_sst2", "evaluation.metric=bleu", "evaluation.metric", "must be one of"),
    ("bert_tiny_sst2", "evaluation.batch_size=0", "evaluation.batch_size",
     "must be a positive integer, got 0"),
    ("bert_tiny_sst2", "serving.model_name=../up", "serving.model_name",
     "must be a folder name"),
    ("bert_tiny_sst2", "runtime.seed=-1", "runtime.seed", "must be an integer >= 0, got -1"),
    ("bert_tiny_sst2", "runtime.beam.extra_args=--x", "runtime.beam.extra_args",
     "must be a list of --flag=value strings"),
    ("bert_tiny_sst2", "data.corpus.eval_fraction=2", "data.corpus.eval_fraction",
     "must be a number in [0.0, 0.9], got 2"),
])
def test_each_section_names_a_bad_value_in_one_line(name, assignment, field, message):
    with pytest.raises(RecipeError) as error:
        load_recipe(name, [assignment])
    assert error.value.field == field
    assert message in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("name, assignment, field, suggestion", [
    ("bert_tiny_sst2", "objective.max_seq_lenght=64", "objective.max_seq_lenght",
     "objective.max_seq_length"),
    ("bert_tiny_sst2", "evaluation.treshold=0.5", "evaluation.treshold", "evaluation.threshold"),
    ("bert_tiny_sst2", "serving.model_nam=x", "serving.model_nam", "serving.model_name"),
    ("bert_tiny_sst2", "serving.generation.temprature=2", "serving.generation.temprature",
     "serving.generation.temperature"),
    ("bert_tiny_sst2", "runtime.sed=3", "runtime.sed", "runtime.seed"),
    ("ulmfit_sst2", "lm_finetuning.step=3", "lm_finetuning.step", "lm_finetuning.steps"),
    ("ernie_fb15k237_sst2", "knowledge_graph.embedding.dims=8",
     "knowledge_graph.embedding.dims", "knowledge_graph.embedding.dim"),
    ("distilbert_tiny_sst2", "teacher.objectiv=mlm", "teacher.objectiv", "teacher.objective"),
])
def test_each_section_refuses_an_unknown_key(name, assignment, field, suggestion):
    with pytest.raises(RecipeError) as error:
        load_recipe(name, [assignment])
    assert error.value.field == field
    assert f"unknown key; did you mean {suggestion}?" in str(error.value)


def test_knowledge_graph_sections_name_their_fields():
    from lmfactory.components.knowledge_graph import settings
    from lmfactory.recipe.knowledge import Embedding, Linking

    with pytest.raises(RecipeError) as error:
        Embedding.from_dict({**settings.EMBEDDING_DEFAULTS, "norm": 3})
    assert error.value.field == "knowledge_graph.embedding.norm"
    with pytest.raises(RecipeError) as error:
        Linking.from_dict({**settings.LINKING_DEFAULTS, "max_ngram": 0})
    assert error.value.field == "knowledge_graph.linking.max_ngram"
    assert Embedding.from_dict(settings.EMBEDDING_DEFAULTS).to_dict() == \
        settings.EMBEDDING_DEFAULTS


def test_a_training_stage_gives_the_trainer_its_settings():
    """The stage section writes the Trainer's custom_config: the stage's own values, the
    runtime's, and the Trainer's defaults for what a stage does not choose."""
    from lmfactory.components.trainer.config import TrainerConfig
    from lmfactory.pipelines.pipeline import trainer_config
    from lmfactory.recipe import load

    recipe = load("distilbert_tiny_sst2", ["pretraining.learning_rate=0.002",
                                           "runtime.seed=7", "finetuning.keep=best"])
    resolved = recipe.to_dict()
    pretraining = TrainerConfig.from_dict(recipe.trainer_config("pretraining"))
    assert (pretraining.learning_rate, pretraining.seed, pretraining.keep) == (0.002, 7, "last")
    assert pretraining.task_args == resolved["pretraining"]["task_args"]
    assert recipe.trainer_config("pretraining") == trainer_config(
        resolved, "pretraining")
    finetuning = recipe.trainer_config("finetuning", task={"kind": "x"}, serves=True)
    assert (finetuning["keep"], finetuning["export_serving"], finetuning["task"]) == (
        "best", True, {"kind": "x"})
    teacher = recipe.trainer_config("pretraining", teacher=True)
    assert teacher["architecture"] == recipe.teacher.architecture == "bert"
    assert teacher["task_args"] == {} and "task_args" not in resolved["teacher"]["pretraining"]
    assert teacher["learning_rate"] == 0.002  # the student's, which the teacher did not set


def test_cli_validate_prints_the_resolved_recipe(capsys, tmp_path):
    import yaml

    assert cli.main(["validate", "ulmfit_sst2", "--print", "--set", "finetuning.steps=7"]) == 0
    printed = capsys.readouterr().out
    resolved = load_recipe("ulmfit_sst2", ["finetuning.steps=7"])
    assert yaml.safe_load(printed) == resolved
    assert resolved["runtime"]["beam"]["direct_running_mode"] == "auto"  # defaults filled
    (tmp_path / "printed.yaml").write_text(printed)
    assert load_recipe(str(tmp_path / "printed.yaml")) == resolved  # it loads as it is
    assert cli.main(["validate", "ulmfit_sst2"]) == 0
    assert capsys.readouterr().out == "recipe ulmfit_sst2 is valid\n"
