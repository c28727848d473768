"""Fine-tuning task kinds: one module per kind, each registering its `TaskKind` here.

A kind owns everything a task needs across the DAG, so the Trainer, the exporter, the
Evaluator, the pipeline builder and recipe validation ask the registry instead of branching
on task names:

* the recipe side: ``finetuning.task`` value, the data section its records come from
  (``data.task`` or ``data.target_corpus``) and their ingestion formats, its metrics (the
  first is its official one), the ``finetuning.task_args`` it understands, the architecture
  head it fine-tunes (`Architecture.head`), and ``check_recipe(check, recipe, arch)`` for
  the rest;
* ``task_record(finetuning, source)`` -> the task record (CONTRACTS §4) the Trainer gets;
* ``train(context)`` (run by the Trainer's ``run_fn`` with a `run_fn.StageContext`) -> the
  trained task model, backbone, preprocessor, metrics and the completed task record;
* ``export(task_model, preprocessor, vocab_dir, model_config, export_dir)`` -> the serving
  SavedModel that takes the task's raw inputs;
* ``evaluate(model_uri, file_pattern, task, config)`` -> the metrics of the exported model
  on ingested records (the Evaluator).

A kind's module is its home: its docstring's ``Parts:`` section (`registry.PARTS`) names
where the kind's record parsing, head, preprocessor, training step, serving export and
metrics live (``TaskKind.parts()``; tests/test_task_homes.py imports each), and its
kind-specific TFX-side modules sit beside it as ``<kind>_<what>.py`` (``*_serving.py``,
``multiple_choice_data.py``); components/trainer/ holds only what every kind shares.

Kinds: ``classification`` and ``regression`` (classification.py), ``language_model``
(language_model.py: pretraining, and the recipe task ``causal_lm``), ``tagging``,
``span_qa``, ``multiple_choice``, ``word_vectors`` (continued word-vector training, vectors
served; it also exports the Pretrainer's models of its objectives, `serving_kind`),
``relation_classification`` (relation_classification.py: marked head / tail mentions, ERNIE
§3.5), ``entity_typing`` (entity_typing.py: one marked mention, multi-label types, ERNIE
§3.5 / §4.1).
"""

from lmfactory.components.tasks.registry import (  # noqa: F401
    TaskKind, for_recipe, get, names, recipe_tasks, register, serving_kind, unregister)

# Each module registers its kind(s).
from lmfactory.components.tasks import classification  # noqa: E402,F401  isort:skip
from lmfactory.components.tasks import language_model  # noqa: E402,F401  isort:skip
from lmfactory.components.tasks import tagging  # noqa: E402,F401  isort:skip
from lmfactory.components.tasks import span_qa  # noqa: E402,F401  isort:skip
from lmfactory.components.tasks import multiple_choice  # noqa: E402,F401  isort:skip
from lmfactory.components.tasks import word_vectors  # noqa: E402,F401  isort:skip
from lmfactory.components.tasks import translation  # noqa: E402,F401  isort:skip
from lmfactory.components.tasks import text_to_text  # noqa: E402,F401  isort:skip
from lmfactory.components.tasks import relation_classification  # noqa: E402,F401  isort:skip
from lmfactory.components.tasks import entity_typing  # noqa: E402,F401  isort:skip

__all__ = ["TaskKind", "for_recipe", "get", "names", "recipe_tasks", "register",
           "serving_kind", "unregister"]
