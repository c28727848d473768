"""A trained causal LM from pipeline folders: `resolve_model_artifact` (a Model artifact, a
local run folder or a pushed model) and `load_causal_lm` (the model, its tokenizer and its
end-of-text id), as ``lmfactory few-shot`` loads it."""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import os

from lmfactory.components.evaluator.few_shot.tasks import FewShotError

# Where a local run keeps its trained models, most wanted first: the fine-tuned model (what
# gets pushed), then the pre-trained one, then any other trainer's.
_TRAINERS = ("FineTuner", "Pretrainer")


def _artifact_id(path: str) -> int:
    name = os.path.basename(path.rstrip("/"))
    return int(name) if name.isdigit() else -1


def _is_causal_lm(model_dir: str) -> bool:
    from lmfactory.components.trainer.model_artifact import read_model_config

    return trains_causal_lm(read_model_config(model_dir).get("task") or {})


def trains_causal_lm(task: dict) -> bool:
    """Whether a task record is a language model trained on a causal objective."""
    from lmfactory.components.pretraining_data import objectives

    objective = task.get("objective")
    return bool(objective) and objectives.get(objective).causal


def _file_digest(path: str) -> str:
    import tensorflow as tf

    with tf.io.gfile.GFile(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def resolve_model_artifact(path: str) -> str:
    """The Model artifact folder (the one holding ``keras/``) that ``path`` names.

    ``path`` may be the Model artifact itself (``.../Pretrainer/model/<id>``) or its
    ``Format-Serving`` folder; a local run folder (``runs/<recipe>``, or its ``pipeline``
    root), where the newest causal-LM model of the FineTuner, else the Pretrainer, else any
    trainer is taken; or a pushed model (``runs/<recipe>/serving/<name>/<version>``), whose
    source is the run's Model artifact with the same SavedModel.
    """
    from lmfactory.components.trainer.model_artifact import MODEL_CONFIG, keras_dir_of

    path = os.path.abspath(path.rstrip("/"))
    if os.path.exists(os.path.join(keras_dir_of(path), MODEL_CONFIG)):
        return os.path.dirname(keras_dir_of(path))
    if not os.path.isdir(path):
        raise FileNotFoundError(f"No model at {path!r}")

    def artifacts(root: str) -> list[str]:
        found = glob.glob(os.path.join(root, "*", "model", "*", "keras", MODEL_CONFIG))
        return [os.path.dirname(os.path.dirname(p)) for p in found]

    pushed = os.path.join(path, "saved_model.pb")
    if os.path.exists(pushed):
        # <run>/serving/<model name>/<version>: compare with the run's exported models.
        run = os.path.dirname(os.path.dirname(os.path.dirname(path)))
        digest = _file_digest(pushed)
        for candidate in artifacts(os.path.join(run, "pipeline")):
            exported = os.path.join(candidate, "Format-Serving", "saved_model.pb")
            if os.path.exists(exported) and _file_digest(exported) == digest:
                return candidate
        raise FileNotFoundError(
            f"{path!r} is a pushed SavedModel, which holds no Keras model or vocabulary, and "
            f"no Model artifact under {os.path.join(run, 'pipeline')!r} exported it; pass the "
            f"Model artifact (runs/<recipe>/pipeline/<Trainer>/model/<id>) instead")
    candidates = artifacts(path) + artifacts(os.path.join(path, "pipeline"))
    candidates = [c for c in candidates if _is_causal_lm(c)]
    if not candidates:
        raise FileNotFoundError(
            f"No causal-LM Model artifact in {path!r}: expected a Model artifact folder "
            f"(with keras/{MODEL_CONFIG}), a run folder (runs/<recipe>) or a pushed model")

    def preference(candidate: str):
        trainer = os.path.basename(os.path.dirname(os.path.dirname(candidate)))
        rank = _TRAINERS.index(trainer) if trainer in _TRAINERS else len(_TRAINERS)
        return (rank, -_artifact_id(candidate))

    return min(candidates, key=preference)


@dataclasses.dataclass
class LoadedModel:
    task_model: object
    tokenizer: object
    model_config: dict
    artifact: str
    start_token_id: int | None
    end_token_id: int | None
    trained_length: int | None   # the sequence length the model was trained on


def load_causal_lm(path: str) -> LoadedModel:
    """The trained causal LM of a Model artifact (see `resolve_model_artifact`), its
    tokenizer, and its end-of-text id (used as the start of every sequence)."""
    from lmfactory.components.trainer.model_artifact import (
        load_task_model, read_model_config, vocabulary_dir_of)
    from lmfactory.models.tokenizers import load_tokenizer, read_tokenizer_config

    artifact = resolve_model_artifact(path)
    model_config = read_model_config(artifact)
    task = model_config.get("task") or {}
    if not trains_causal_lm(task):
        raise FewShotError(
            f"{artifact} holds a {task.get('kind', 'unknown')} model "
            f"({task.get('objective') or task.get('name') or 'no objective'}); few-shot "
            f"evaluation scores completions with a causal language model")
    vocab_dir = vocabulary_dir_of(artifact)
    tokenizer = load_tokenizer(vocab_dir)
    end_of_text = read_tokenizer_config(vocab_dir).get("special_tokens", {}).get("end_of_text")
    end_id = None
    if end_of_text is not None:
        end_id = int(tokenizer.token_to_id(end_of_text))
    return LoadedModel(load_task_model(artifact), tokenizer, model_config, artifact,
                       start_token_id=end_id, end_token_id=end_id,
                       trained_length=task.get("sequence_length"))
