"""Recipes: plain YAML files that say what one pipeline run builds.

A recipe names the architecture and size preset, the tokenizer, the pretraining objective,
the data sources, the fine-tuning task, steps and batch sizes, the distribution strategy and
the Beam options. :func:`load_recipe` checks every value and raises :class:`RecipeError` with a
one-line message naming the field (``recipe field 'pretraining.steps': must be a positive
integer, got -3``).
"""

from __future__ import annotations

import copy
import difflib
import os
import re
from importlib import resources

import yaml

from lmfactory.components import beam_options
from lmfactory.components import tasks as task_kinds
from lmfactory.components.evaluator import transfer
from lmfactory.components.example_gen import formats as ingest_formats
from lmfactory.components.trainer.checkpoints import DEFAULT_MONITOR, KEEP_CHOICES
from lmfactory.components.trainer.config import LEARNING_RATE_RANGE
from lmfactory.components.trainer.optimization import DECAYS, OPTIMIZERS
from lmfactory.components.trainer.precision import PRECISIONS
from lmfactory.components.trainer.strategy import STRATEGIES
from lmfactory.recipe_knowledge import check_knowledge_graph
from lmfactory.recipe_knowledge import schema as knowledge_graph_schema
from lmfactory.recipe_lm_finetuning import check_lm_finetuning
from lmfactory.recipe_yaml import RecipeYamlError
from lmfactory.recipe_yaml import parse_yaml as _parse_yaml

RECIPE_SUFFIX = ".yaml"
FORMATS = ingest_formats.ALL_FORMATS  # text, tsv, csv, jsonl, tfds and the task formats
RUNNING_MODES = ("auto", "in_memory", "multi_threading", "multi_processing")
# A recipe value that becomes one folder's name (the run's folder under --output-dir, the
# model's folder under the serving directory): one path component, so that everything a run
# writes stays under the folders it was given, and a name every file system and GCS take.
MAX_NAME_LENGTH = 100
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")

# AdamW settings of a training stage (components/trainer/optimization.py): BERT's Adam
# moments and epsilon, global-norm clipping at 1.0, linear decay to zero after the warmup.
# GPT-3 (Brown et al. 2020, Appendix B): adam_beta_2 0.95, adam_epsilon 1e-8, weight_decay
# 0.1, learning_rate_decay cosine, final_learning_rate_fraction 0.1.
OPTIMIZER_DEFAULTS = {"adam_beta_1": 0.9, "adam_beta_2": 0.999, "adam_epsilon": 1e-6,
                      "clip_norm": 1.0, "learning_rate_decay": "linear",
                      "final_learning_rate_fraction": 0.0,
                      # "sgd": plain SGD on the same schedule (word2vec.c, Mikolov et al. 2013);
                      # "adagrad": accumulators from 1, clipped, no decay (ELMo's bilm-tf)
                      "optimizer": "adamw"}

DEFAULTS = {
    "description": "",
    "preset": "tiny",
    "overrides": {},
    # learn_from: the data sections whose text the vocabulary is learned from (ULMFiT's
    # target task words need ["corpus", "target_corpus"]).
    "tokenizer": {"vocab_size": 8000, "lowercase": True, "strip_accents": True,
                  "min_frequency": 2, "learn_from": ["corpus"]},
    "objective": {"max_seq_length": 128, "masked_lm_prob": 0.15, "max_predictions_per_seq": 20,
                  "short_seq_prob": 0.1, "dupe_factor": 5, "whole_word_masking": False,
                  "dynamic_masking": False, "ngram_masking": 0, "mask_token_rate": 0.8,
                  "random_token_rate": 0.1, "seed": 12345,
                  "window": 5, "subsample_threshold": 1e-3},
    "pretraining": {"steps": 1000, "batch_size": 32, "learning_rate": 1e-4,
                    "warmup_fraction": 0.1, "weight_decay": 0.01, "eval_steps": 10,
                    **OPTIMIZER_DEFAULTS,
                    "task_args": {}, "init_checkpoint": None, "tokenizer_dir": None},
    "finetuning": {"steps": 1000, "batch_size": 32, "learning_rate": 5e-5,
                   "warmup_fraction": 0.1, "weight_decay": 0.01, "eval_steps": 10,
                   **OPTIMIZER_DEFAULTS, "task_args": {},
                   "sequence_length": 128, "text_features": ["sentence"], "num_classes": 2,
                   # keep: "last" or "best" (the checkpoint with the best validation
                   # `monitor`, a metric the task model logs: loss, accuracy, ...)
                   "keep": "last", "monitor": DEFAULT_MONITOR},
    "lm_finetuning": None,  # optional target-task LM fine-tuning stage (recipe_lm_finetuning)
    "knowledge_graph": None,  # optional knowledge-graph stages (recipe_knowledge.py)
    # control: from_scratch adds the transfer control (components/evaluator/transfer.py)
    "evaluation": {"threshold": None, "batch_size": 64, "max_batches": None,
                   "control": None, "require_transfer_gain": False},
    "serving": {"generation": {"max_length": 64, "sampler": "top_k", "k": 10,
                               "temperature": 1.0}},
    # precision: float32, or mixed_bfloat16 (bfloat16 compute, float32 variables and
    # losses; components/trainer/precision.py)
    "runtime": {"strategy": "auto", "tpu": None, "jit_compile": False, "precision": "float32",
                "steps_per_checkpoint": 200, "seed": 0,
                # eval_steps eval batches at each checkpoint (the validation curve), and a
                # progress line (step, loss, rate, ETA) at least every progress_seconds
                "validate_checkpoints": True, "progress_seconds": 30,
                # A serving SavedModel for every training stage, not only the stage whose
                # model is evaluated and pushed (the others feed a later stage only)
                "export_every_stage": False,
                # auto: in_memory for a stage whose input is below in_memory_below_mb,
                # multi_processing (direct_num_workers processes) above (beam_options.py)
                "beam": {"direct_running_mode": "auto", "direct_num_workers": 2,
                         "in_memory_below_mb": beam_options.DEFAULT_IN_MEMORY_BELOW_BYTES
                         // 2**20, "extra_args": []}},
}


class RecipeError(ValueError):
    """A recipe value is missing or wrong; the message names the field."""

    def __init__(self, field: str, message: str):
        super().__init__(f"recipe field {field!r}: {message}")
        self.field = field


def recipe_names() -> list[str]:
    folder = resources.files("lmfactory.recipes")
    return sorted(entry.name[: -len(RECIPE_SUFFIX)] for entry in folder.iterdir()
                  if entry.name.endswith(RECIPE_SUFFIX))


def recipe_path(name_or_path: str) -> str:
    if os.path.exists(name_or_path):
        return name_or_path
    path = resources.files("lmfactory.recipes") / f"{name_or_path}{RECIPE_SUFFIX}"
    if not path.is_file():
        raise FileNotFoundError(f"No recipe file or registered recipe named {name_or_path!r}; "
                                f"registered: {', '.join(recipe_names())}")
    return str(path)


def _merge(defaults: dict, values: dict) -> dict:
    merged = copy.deepcopy(defaults)
    for key, value in values.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict) and merged[key]:
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def parse_yaml(text, what: str, source: str = ""):
    """recipe_yaml.parse_yaml, its errors as `RecipeError` naming ``what``."""
    try:
        return _parse_yaml(text, what, source)
    except RecipeYamlError as error:
        raise RecipeError(error.field, error.message) from None


def apply_overrides(values: dict, assignments: list[str]) -> dict:
    """Applies ``a.b.c=value`` assignments (value parsed as YAML) to a raw recipe dict."""
    values = copy.deepcopy(values)
    for assignment in assignments or []:
        if "=" not in assignment:
            raise RecipeError(assignment, "an override must look like field.path=value")
        path, raw = assignment.split("=", 1)
        node = values
        keys = path.split(".")
        for key in keys[:-1]:
            node = node.setdefault(key, {})
            if not isinstance(node, dict):
                raise RecipeError(path, f"{key!r} is not a section")
        node[keys[-1]] = parse_yaml(raw, path)
    return values


def load_recipe(name_or_path: str, overrides: list[str] | None = None) -> dict:
    path = recipe_path(name_or_path)
    with open(path, encoding="utf-8") as f:
        raw = parse_yaml(f, "<file>", path) or {}
    if not isinstance(raw, dict):
        raise RecipeError("<file>", f"{path} must hold a mapping")
    raw.setdefault("name", os.path.splitext(os.path.basename(path))[0])
    raw = apply_overrides(raw, overrides)
    defaults = _merge(DEFAULTS, _task_preset_defaults(raw))
    check_known_keys(raw, known_keys(defaults))
    return validate(_merge(defaults, raw))


# A section whose keys are not a fixed set: ``data`` sources (checked by their format's
# reader), ``overrides`` (backbone arguments) and ``task_args`` (the task model's arguments).
OPEN = "open"
_OPEN_KEYS = ("data", "overrides", "task_args")
# Keys a recipe gives that have no default (required, or optional without one).
_KEYS_WITHOUT_DEFAULT = {"": ("name", "architecture", "data", "teacher"), "tokenizer": ("kind",),
                         "objective": ("name",), "finetuning": ("task",),
                         "evaluation": ("metric",), "serving": ("model_name",)}
_TEACHER_KEYS = ("architecture", "preset", "overrides", "objective", "pretraining",
                 "finetuning", "task_distillation")


def known_keys(defaults: dict) -> dict:
    """The recipe's key tree: ``defaults`` (with the task kind's own finetuning defaults)
    plus the keys without a default; `OPEN` marks a section of free keys, None a leaf."""
    from lmfactory.recipe_lm_finetuning import NOT_INHERITED, STAGE

    def tree(node):
        if not isinstance(node, dict):
            return None
        return {key: OPEN if key in _OPEN_KEYS else tree(value) for key, value in node.items()}

    schema = tree(defaults)
    for section, keys in _KEYS_WITHOUT_DEFAULT.items():
        target = schema if not section else schema[section]
        target.update({key: OPEN if key in _OPEN_KEYS else None for key in keys
                       if key not in target})
    schema[STAGE] = {key: value for key, value in schema["pretraining"].items()
                     if key not in NOT_INHERITED}
    schema["knowledge_graph"] = knowledge_graph_schema()
    schema["teacher"] = {key: schema.get(key) if key in ("pretraining", "finetuning") else
                         OPEN if key in _OPEN_KEYS else None for key in _TEACHER_KEYS}
    return schema


def check_known_keys(values: dict, schema: dict, prefix: str = "") -> None:
    """Refuses a key the recipe format does not have (a typo such as ``pretrainng`` would
    otherwise leave the defaults in force), naming the closest known key."""
    for key, value in values.items():
        field = f"{prefix}{key}"
        if key not in schema:
            close = difflib.get_close_matches(str(key), [str(k) for k in schema], n=1,
                                              cutoff=0.6)
            hint = f"; did you mean {prefix}{close[0]}?" if close else \
                f"; known keys here: {', '.join(sorted(map(str, schema)))}"
            raise RecipeError(field, f"unknown key{hint}")
        if isinstance(value, dict) and isinstance(schema[key], dict):
            check_known_keys(value, schema[key], f"{field}.")


def _task_preset_defaults(raw: dict) -> dict:
    """The defaults a named task source brings (``data.task: {glue: CoLA, dir: ...}``): the
    task kind, text features and number of classes of ``finetuning`` and the task's official
    ``evaluation.metric``; the recipe's own values win."""
    source = (raw.get("data") or {}).get("task") if isinstance(raw.get("data"), dict) else None
    if not isinstance(source, dict) or "glue" not in source:
        finetuning = raw.get("finetuning")
        task = finetuning.get("task") if isinstance(finetuning, dict) else None
        if task in task_kinds.recipe_tasks():
            return {"finetuning": dict(task_kinds.for_recipe(task).finetuning_defaults)}
        return {}
    from lmfactory.components.example_gen import glue

    try:
        return glue.finetuning_defaults(source["glue"])
    except ValueError as error:
        raise RecipeError("data.task.glue", str(error)) from error


class _Checker:
    def __init__(self, recipe: dict):
        self.recipe = recipe

    def fail(self, field: str, message: str):
        raise RecipeError(field, message)

    def source(self, field: str) -> None:
        """A data source (``data.corpus``, ``data.task``, ...): its format and files."""
        _check_source(self, field)

    def get(self, field: str, required: bool = True):
        node = self.recipe
        for key in field.split("."):
            if not isinstance(node, dict) or key not in node or node[key] is None:
                if required:
                    raise RecipeError(field, "is required")
                return None
            node = node[key]
        return node

    def choice(self, field, choices, required=True):
        value = self.get(field, required)
        if value is not None and value not in choices:
            raise RecipeError(field, f"must be one of {', '.join(choices)}; got {value!r}")
        return value

    def positive_int(self, field, required=True):
        value = self.get(field, required)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 1):
            raise RecipeError(field, f"must be a positive integer, got {value!r}")
        return value

    def fraction(self, field, low=0.0, high=1.0, required=True):
        value = self.get(field, required)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not low <= value <= high):
            raise RecipeError(field, f"must be a number in [{low}, {high}], got {value!r}")
        return value

    def boolean(self, field):
        value = self.get(field)
        if not isinstance(value, bool):
            raise RecipeError(field, f"must be true or false, got {value!r}")
        return value

    def folder_name(self, field):
        """A name that becomes one folder's name (`NAME_PATTERN`, at most
        `MAX_NAME_LENGTH` characters: never empty, ``.``, ``..`` or a path)."""
        value = self.get(field)
        if not isinstance(value, str) or len(value) > MAX_NAME_LENGTH \
                or not NAME_PATTERN.fullmatch(value):
            shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
            raise RecipeError(field, f"must be a folder name: 1-{MAX_NAME_LENGTH} letters, "
                                     f"digits, '.', '_' or '-', starting with a letter or "
                                     f"digit; got {shown}")
        return value

    def string_list(self, field):
        value = self.get(field)
        if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
            raise RecipeError(field, f"must be a non-empty list of names, got {value!r}")
        return value


def _check_source(check: _Checker, field: str) -> None:
    if "train_examples" in (check.get(field) or {}):  # a label budget (example_gen/sampling.py)
        if field != "data.task":
            raise RecipeError(f"{field}.train_examples", "a label budget goes in data.task")
        check.positive_int(f"{field}.train_examples")
    if "glue" in (check.get(field) or {}):
        _check_glue_source(check, field)
        return
    check.choice(f"{field}.format", FORMATS)
    source = check.get(field)
    if source["format"] == "tfds":
        check.get(f"{field}.name")
    elif "path" not in source and "splits" not in source:
        raise RecipeError(f"{field}.path", "give 'path' (with eval_fraction) or 'splits'")
    if "eval_fraction" in source:
        check.fraction(f"{field}.eval_fraction", 0.0, 0.9)


def _check_glue_source(check: _Checker, field: str) -> None:
    """A GLUE task named by ``glue`` (components/example_gen/glue.py) in the folder ``dir``:
    the task's train/dev files, columns and label come from the preset."""
    from lmfactory.components.example_gen import glue

    source = check.get(field)
    check.choice(f"{field}.glue", tuple(glue.TASKS))
    directory = source.get("dir")
    if not isinstance(directory, str) or not directory:
        raise RecipeError(f"{field}.dir", f"must be the folder holding the GLUE task's "
                                          f"train/dev files, got {directory!r}")
    unknown = sorted(set(source) - {"glue", "dir", "train_examples"})
    if unknown:
        raise RecipeError(field, f"a GLUE task source takes 'glue' and 'dir' only (and a "
                                 f"label budget, 'train_examples'), got {unknown}")
    task = glue.get(source["glue"])
    finetuning = check.recipe["finetuning"]
    if finetuning.get("task") != task.kind:
        raise RecipeError("finetuning.task", f"GLUE {task.name} is a {task.kind} task, got "
                                             f"{finetuning.get('task')!r}")
    features = finetuning.get("text_features")
    if not isinstance(features, list) or not set(features) <= set(task.text_features):
        raise RecipeError("finetuning.text_features", f"GLUE {task.name}'s text features are "
                                                      f"{list(task.text_features)}; got "
                                                      f"{features!r}")
    if finetuning.get("num_classes") != task.num_classes:
        raise RecipeError("finetuning.num_classes", f"GLUE {task.name} has "
                                                    f"{task.num_classes} output(s), got "
                                                    f"{finetuning.get('num_classes')!r}")


def _check_pretraining_data(check: _Checker, architecture: str) -> str:
    """The tokenizer, objective and corpus fields of a recipe that pretrains; returns the
    objective name."""
    from lmfactory import models

    check.choice("tokenizer.kind", (models.get(architecture).tokenizer_kind,))
    check.positive_int("tokenizer.vocab_size")
    check.positive_int("tokenizer.min_frequency")
    _check_vocabulary_sources(check)
    _check_vocabulary_size(check, architecture)
    objective = check.choice("objective.name", models.get(architecture).objectives)
    check.positive_int("objective.max_seq_length")
    check.fraction("objective.masked_lm_prob", 0.0, 1.0)
    check.positive_int("objective.max_predictions_per_seq")
    check.fraction("objective.short_seq_prob")
    check.positive_int("objective.dupe_factor")
    check.boolean("objective.whole_word_masking")
    check.boolean("objective.dynamic_masking")
    ngram = check.get("objective.ngram_masking")
    if isinstance(ngram, bool) or not isinstance(ngram, int) or ngram < 0:
        raise RecipeError("objective.ngram_masking", f"must be an integer >= 0 (the longest "
                                                     f"masked n-gram; 0 = off), got {ngram!r}")
    check.fraction("objective.mask_token_rate")
    check.fraction("objective.random_token_rate")
    if check.get("objective.mask_token_rate") + check.get("objective.random_token_rate") > 1:
        raise RecipeError("objective.random_token_rate", "mask_token_rate + random_token_rate "
                                                         "must not exceed 1")
    check.positive_int("objective.window")
    check.fraction("objective.subsample_threshold", 0.0, 0.999)
    _check_source(check, "data.corpus")
    return objective


VOCABULARY_SOURCES = ("corpus", "target_corpus")


def _check_vocabulary_sources(check: _Checker) -> None:
    """``tokenizer.learn_from``: ``corpus`` first, optionally ``target_corpus`` (a section
    the recipe has)."""
    sources = check.get("tokenizer.learn_from")
    if (not isinstance(sources, list) or not sources or sources[0] != "corpus"
            or len(set(sources)) != len(sources)
            or any(source not in VOCABULARY_SOURCES for source in sources)):
        check.fail("tokenizer.learn_from", f"must be [corpus] or [corpus, target_corpus], "
                                           f"got {sources!r}")
    for source in sources[1:]:
        check.source(f"data.{source}")


def _check_vocabulary_size(check: _Checker, architecture: str) -> None:
    """``tokenizer.vocab_size`` against what the tokenizer kind must hold (the
    architecture's special tokens plus the kind's own symbols, e.g. 256 bytes), as
    VocabularyGen checks it, so a size that cannot work fails before any stage runs."""
    from lmfactory import models
    from lmfactory.components.vocabulary.executor import VocabularyConfig

    try:
        VocabularyConfig(kind=models.get(architecture).tokenizer_kind,
                         vocab_size=check.get("tokenizer.vocab_size"),
                         min_frequency=check.get("tokenizer.min_frequency"),
                         special_tokens=models.get(architecture).special_tokens)
    except ValueError as error:
        raise RecipeError("tokenizer.vocab_size", f"{error} ({architecture})") from None


def _check_backbone_limits(check: _Checker, recipe: dict, architecture: str,
                           pretrains: bool) -> None:
    """What the preset with its ``overrides`` can take: known backbone arguments, sequence
    lengths within its positions (``max_sequence_length``), a width the heads divide."""
    from lmfactory import models

    unknown = sorted(set(recipe["overrides"]) - set(models.backbone_arguments(architecture)))
    if unknown:
        check.fail("overrides", f"{architecture} backbones take no {unknown}; they take "
                                f"{', '.join(models.backbone_arguments(architecture))}")
    config = {**models.presets(architecture)[recipe["preset"]], **recipe["overrides"]}
    hidden, heads = config.get("hidden_dim"), config.get("num_heads")
    if (isinstance(hidden, int) and isinstance(heads, int) and heads > 0
            and config.get("head_dim") is None and hidden % heads):
        check.fail("overrides", f"hidden_dim {hidden} is not divisible by num_heads {heads}")
    # Constraints of a backbone's own (e.g. widths in whole quaternions): its optional
    # classmethod ``check_arguments(config)`` raises ValueError with the reason.
    check_arguments = getattr(models.get(architecture).backbone_cls, "check_arguments", None)
    if check_arguments is not None:
        try:
            check_arguments(config)
        except ValueError as error:
            check.fail("overrides", f"{architecture} preset {recipe['preset']!r}: {error}")
    limit = config.get("max_sequence_length")
    if not isinstance(limit, int):
        return
    # finetuning.sequence_length packs a task's own data; continued LM training (data from
    # data.target_corpus) reads the objective's windows instead.
    fields = (["objective.max_seq_length"] if pretrains else []) + (
        ["finetuning.sequence_length"] if _task_kind(check).data_section == "task" else [])
    for field in fields:
        length = check.get(field, required=False)
        if isinstance(length, int) and not isinstance(length, bool) and length > limit:
            check.fail(field, f"{length} is longer than the {limit} positions of "
                              f"{architecture} preset {recipe['preset']!r} "
                              f"(max_sequence_length; set overrides.max_sequence_length to "
                              f"train longer positions)")


def _check_vocabulary_data(check: _Checker, architecture: str) -> None:
    """A recipe without pretraining (``pretraining: null``) still learns its vocabulary
    from ``data.corpus``; only a task with its own data (``data.task``) can follow."""
    from lmfactory import models

    check.choice("tokenizer.kind", (models.get(architecture).tokenizer_kind,))
    check.positive_int("tokenizer.vocab_size")
    check.positive_int("tokenizer.min_frequency")
    _check_vocabulary_sources(check)
    _check_vocabulary_size(check, architecture)
    _check_source(check, "data.corpus")
    if _task_kind(check).data_section != "task":
        raise RecipeError("pretraining", "pretraining: null needs a task with its own data "
                                         "(data.task), not language-model fine-tuning")


def _check_teacher(check: _Checker, recipe: dict, architecture: str, objective) -> None:
    """A ``teacher`` section (knowledge distillation: architecture, preset, overrides, the
    objective it is pretrained on, and its own ``pretraining`` settings, defaulting to the
    recipe's) exactly when the student's objective trains against a teacher."""
    from lmfactory import models

    needs_teacher = objective is not None and getattr(
        models.get(architecture).pretrainer(objective), "needs_teacher", False)
    teacher = recipe.get("teacher")
    if not needs_teacher:
        if teacher:
            raise RecipeError("teacher", f"{architecture}'s {objective} objective trains no "
                                         f"student: remove the teacher section")
        return
    if not isinstance(teacher, dict):
        raise RecipeError("teacher", f"{architecture} is trained by distillation: give a "
                                     f"teacher (architecture, preset, objective)")
    student_pretraining = {key: value for key, value in recipe["pretraining"].items()
                           if key not in ("task_args", "init_checkpoint", "tokenizer_dir")}
    # The student's task_args are its own task model's (distiller) arguments.
    student_finetuning = {key: value for key, value in recipe["finetuning"].items()
                          if key != "task_args"}
    recipe["teacher"] = teacher = _merge(
        {"preset": "tiny", "overrides": {}, "pretraining": student_pretraining,
         "finetuning": student_finetuning, "task_distillation": False}, teacher)
    name = check.choice("teacher.architecture", models.names())
    if teacher["preset"] not in models.presets(name):
        raise RecipeError("teacher.preset", f"must be one of {', '.join(models.presets(name))} "
                                            f"for {name}; got {teacher['preset']!r}")
    if not isinstance(teacher["overrides"], dict):
        raise RecipeError("teacher.overrides", "must be a mapping of backbone arguments")
    if models.get(name).tokenizer_kind != models.get(architecture).tokenizer_kind:
        raise RecipeError("teacher.architecture", f"{name} tokenizes with "
                                                  f"{models.get(name).tokenizer_kind}, the "
                                                  f"student with "
                                                  f"{models.get(architecture).tokenizer_kind}")
    check.choice("teacher.objective", models.get(name).objectives)
    if check.boolean("teacher.task_distillation"):
        if not models.get(architecture).has_head("classification_distillation"):
            raise RecipeError("teacher.task_distillation", f"{architecture} has no "
                                                           f"task-specific distillation")
        if recipe["finetuning"].get("task") != "classification":
            raise RecipeError("teacher.task_distillation", "needs a classification task")
    check.positive_int("teacher.pretraining.steps")
    check.positive_int("teacher.pretraining.batch_size")
    check.positive_int("teacher.pretraining.eval_steps")
    check.fraction("teacher.pretraining.learning_rate", *LEARNING_RATE_RANGE)


def _task_kind(check: _Checker):
    """The task kind (components/tasks) of ``finetuning.task``."""
    return task_kinds.for_recipe(check.choice("finetuning.task", task_kinds.recipe_tasks()))


def validate(recipe: dict) -> dict:
    from lmfactory import models

    check = _Checker(recipe)
    check.folder_name("name")
    architecture = check.choice("architecture", models.names())
    preset = check.get("preset")
    if preset not in models.presets(architecture):
        raise RecipeError("preset", f"must be one of {', '.join(models.presets(architecture))} "
                                    f"for {architecture}; got {preset!r}")
    if not isinstance(check.get("overrides"), dict):
        raise RecipeError("overrides", "must be a mapping of backbone arguments")
    init_checkpoint = check.get("pretraining.init_checkpoint", required=False)
    if recipe["pretraining"] is None:  # no pretraining: a fresh backbone, trained on the task
        _check_vocabulary_data(check, architecture)
        objective = None
    elif init_checkpoint is None:
        objective = _check_pretraining_data(check, architecture)
    elif not isinstance(init_checkpoint, str):
        raise RecipeError("pretraining.init_checkpoint", "must be the path of a checkpoint folder")
    elif _task_kind(check).data_section != "task":
        raise RecipeError("pretraining.init_checkpoint", "starting from a published checkpoint "
                                                         "is supported for encoder tasks, not "
                                                         "causal_lm fine-tuning")
    else:
        objective = None  # the checkpoint's tokenizer and weights replace corpus learning
    if init_checkpoint is None:  # an imported checkpoint brings its own sizes
        _check_backbone_limits(check, recipe, architecture, pretrains=objective is not None)
    _check_teacher(check, recipe, architecture, objective)
    for stage in ("pretraining", "finetuning") + check_lm_finetuning(check, recipe, objective):
        if stage == "pretraining" and recipe[stage] is None:
            continue
        check.positive_int(f"{stage}.steps")
        check.positive_int(f"{stage}.batch_size")
        check.positive_int(f"{stage}.eval_steps")
        check.fraction(f"{stage}.learning_rate", *LEARNING_RATE_RANGE)
        check.fraction(f"{stage}.warmup_fraction", 0.0, 0.99)
        check.fraction(f"{stage}.weight_decay", 0.0, 1.0)
        check.fraction(f"{stage}.adam_beta_1", 0.0, 0.999999)
        check.fraction(f"{stage}.adam_beta_2", 0.0, 0.999999)
        check.fraction(f"{stage}.adam_epsilon", 1e-12, 1.0)
        check.fraction(f"{stage}.clip_norm", 0.0, 1e9)
        check.choice(f"{stage}.learning_rate_decay", DECAYS)
        optimizer = check.choice(f"{stage}.optimizer", OPTIMIZERS)
        if optimizer == "sgd" and (recipe[stage]["weight_decay"] or recipe[stage]["clip_norm"]):
            raise RecipeError(f"{stage}.optimizer", "sgd is plain SGD: set weight_decay and "
                                                    "clip_norm to 0")
        if optimizer == "adagrad" and recipe[stage]["weight_decay"]:
            raise RecipeError(f"{stage}.optimizer", "adagrad has no weight decay: set "
                                                    "weight_decay to 0")
        check.fraction(f"{stage}.final_learning_rate_fraction", 0.0, 1.0)
        if not isinstance(recipe[stage].get("task_args", {}), dict):
            raise RecipeError(f"{stage}.task_args", "must be a mapping of the task model's "
                                                    "arguments")
    kind = _task_kind(check)
    kind.check_recipe(check, recipe, models.get(architecture))
    check_knowledge_graph(check, recipe, models.get(architecture))
    check.choice("evaluation.metric", kind.metrics)
    if check.get("evaluation.threshold", required=False) is not None:
        # a correlation (Matthews, Pearson, Spearman) may be blessed above a negative value
        check.fraction("evaluation.threshold", -1.0, 1e9)
    transfer.check_recipe(check, recipe)
    check.folder_name("serving.model_name")
    check.choice("runtime.strategy", STRATEGIES)
    check.boolean("runtime.jit_compile")
    check.choice("runtime.precision", PRECISIONS)
    check.positive_int("runtime.steps_per_checkpoint")
    check.fraction("runtime.progress_seconds", 0.001, 1e9)
    if check.choice("finetuning.keep", KEEP_CHOICES) == "best":
        if not check.boolean("runtime.validate_checkpoints"):
            raise RecipeError("finetuning.keep", "best needs runtime.validate_checkpoints: "
                                                 "true (the validation at each checkpoint)")
    check.boolean("runtime.validate_checkpoints")
    check.boolean("runtime.export_every_stage")
    if not isinstance(check.get("finetuning.monitor"), str):
        raise RecipeError("finetuning.monitor", "must be the name of a validation metric, "
                                                "e.g. loss or accuracy")
    check.choice("runtime.beam.direct_running_mode", RUNNING_MODES)
    check.positive_int("runtime.beam.direct_num_workers")
    check.fraction("runtime.beam.in_memory_below_mb", 0.0, 1e9)
    if not isinstance(check.get("runtime.beam.extra_args"), list):
        raise RecipeError("runtime.beam.extra_args", "must be a list of --flag=value strings")
    return recipe


def beam_pipeline_args(recipe: dict) -> list[str]:
    """The Beam arguments of every Beam stage (``runtime.beam``; ``auto`` adds the size
    policy of :mod:`lmfactory.components.beam_options`)."""
    beam = recipe["runtime"]["beam"]
    return beam_options.policy_args(beam["direct_running_mode"], beam["direct_num_workers"],
                                    beam["extra_args"],
                                    int(beam["in_memory_below_mb"] * 2**20))
