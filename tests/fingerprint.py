"""A fingerprint of every shipped recipe's task models: weights, outputs and losses at a
fixed seed, so a refactor can show that it changed no model.

For each recipe in ``recipes/``: the backbone the recipe builds (architecture, preset and
overrides, a small vocabulary), the pretraining task model of its objective (with its
teacher for a distillation) trained two steps on synthetic records read back through the
objective's reader, and the fine-tuning task model of its task kind (a classifier, a
regression head, a tagger, a span extractor, a multiple-choice head, a task distiller, the
multi-label entity typer or relation classifier over the marked text, the ``seq2seq_lm`` of
translation and text-to-text, or the continued language model) built as the kind's own
``train`` builds it (components/tasks/), called on synthetic inputs and, where its labels
are simple, trained one step. Recorded: a hash of every weight (path, shape, bytes), hashes
and sums of the outputs, and the losses.

    python tests/fingerprint.py --out /tmp/before.json
    python tests/fingerprint.py --out /tmp/after.json --compare /tmp/before.json

Only the few lines marked ``# registry API`` name the registry's interface; a refactor of
that interface edits those lines and nothing else.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from synthetic_records import read_batches, write_pretraining_records  # noqa: E402

VOCAB = 300
BYTE_VOCAB = 260
MAX_T = 32
BATCH = 2
SPECIAL_IDS = {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4, "end_of_text": 3}


# --------------------------------------------------------------------------- registry API


def _pretrainer_cls(architecture: str, objective: str):
    from lmfactory import models
    return models.get(architecture).pretrainer(objective)  # registry API


def _classifier_cls(architecture: str):
    from lmfactory import models
    return models.get(architecture).head("classification")  # registry API


def _classifier_distiller_cls(architecture: str):
    from lmfactory import models
    return models.get(architecture).head("classification_distillation")  # registry API


def _seq2seq_lm(architecture: str, backbone):
    from lmfactory import models
    return models.get(architecture).head("seq2seq_lm")(backbone)  # registry API


def _tagger(backbone, num_labels, task_args):
    from lmfactory import models
    arch = models.registry.find_by_backbone(backbone)  # registry API
    return arch.head("tagging")(backbone, num_labels=num_labels, **task_args)  # registry API


def _span_extractor(backbone):
    from lmfactory import models
    return models.get("bert").head("span_qa")(backbone)  # registry API


def _multiple_choice(architecture, backbone, num_choices, task_args):
    from lmfactory import models
    head = models.get(architecture).head("multiple_choice")  # registry API
    if hasattr(head, "head_task_args"):  # a head whose recipe task_args are partly its data's
        task_args = head.head_task_args(task_args)
    return head(backbone, num_choices=num_choices, **task_args)


def _marker_args(task: str) -> tuple:
    """The ``task_args`` of a marked-text kind that go to its preprocessor, not its head."""
    from lmfactory.components.tasks import entity_typing, relation_classification
    return {"entity_typing": (entity_typing.MARKER_ARG,),  # registry API
            "relation_classification": relation_classification.MARKER_ARGS,  # registry API
            }[task]


def _computes_own_loss(model) -> bool:
    return type(model).compute_loss is not keras.Model.compute_loss


def _optimizer(config):
    from lmfactory.components.trainer.config import TrainerConfig
    from lmfactory.components.trainer.run_fn import _optimizer as stage_optimizer
    return stage_optimizer(TrainerConfig.from_dict(config), 10)


def _trainer_config(recipe, stage):
    from lmfactory.pipelines.pipeline import trainer_config
    return trainer_config(recipe, stage)


def _read_pretraining_batches(data_config, path):
    return read_batches(data_config, path, BATCH, 2)


def _resolve_objective_config(config):
    from lmfactory.components.pretraining_data import features
    return features.resolve_config(config)


# --------------------------------------------------------------------------- hashing


def _sha(array) -> str:
    array = np.ascontiguousarray(np.asarray(array))
    return hashlib.sha256(array.tobytes() + str(array.dtype).encode()
                          + str(array.shape).encode()).hexdigest()[:16]


def weights_fingerprint(model) -> dict:
    rows = [[weight.path, list(weight.shape), _sha(keras.ops.convert_to_numpy(weight))]
            for weight in model.weights]
    return {"count": len(rows), "sha": hashlib.sha256(json.dumps(rows).encode()).hexdigest()[:16],
            "weights": rows}


def outputs_fingerprint(outputs) -> dict:
    flat = tf.nest.flatten(outputs)
    paths = [str(i) for i in range(len(flat))]
    if isinstance(outputs, dict):
        paths = sorted(outputs)
        flat = [outputs[key] for key in paths]
    result = {}
    for path, value in zip(paths, flat):
        value = np.asarray(keras.ops.convert_to_numpy(value))
        entry = {"shape": list(value.shape), "sha": _sha(value)}
        if value.dtype.kind == "f":
            entry["sum"] = float(np.sum(value.astype(np.float64)))
        result[path] = entry
    return result


# --------------------------------------------------------------------------- synthetic data


def synthetic_inputs(model, vocab: int, seed: int = 3, length: int = 16) -> dict:
    """Inputs for every named input of a functional model (token ids, masks, segments,
    positions), built from the input names and shapes."""
    rng = np.random.default_rng(seed)
    inputs = {}
    for name, tensor in model.input.items():
        shape = [BATCH] + [length if dim is None else int(dim) for dim in tensor.shape[1:]]
        if name.endswith("padding_mask"):
            lengths = np.array([shape[-1], max(2, shape[-1] - 5)])
            value = (np.arange(shape[-1]) < lengths.reshape([-1] + [1] * (len(shape) - 1)))
            value = np.broadcast_to(value, shape).astype(tensor.dtype)
        elif name.endswith("segment_ids"):
            value = np.broadcast_to((np.arange(shape[-1]) >= shape[-1] // 2), shape
                                    ).astype(tensor.dtype)
        elif name.endswith("positions"):
            value = rng.integers(1, length - 1, shape).astype(tensor.dtype)
        elif name == "character_ids":  # UTF-8 byte ids + 1
            value = rng.integers(1, 257, shape).astype(tensor.dtype)
        else:
            value = rng.integers(5, vocab, shape).astype(tensor.dtype)
        inputs[name] = value
    return inputs


# --------------------------------------------------------------------------- stages


def _seed(value: int = 0):
    keras.utils.set_random_seed(value)


def _build_backbone(recipe: dict, vocab: int, model: dict | None = None):
    from lmfactory import models
    model = model or recipe
    overrides = dict(model.get("overrides") or {})
    return models.build(model["architecture"], model["preset"], vocabulary_size=vocab,
                        **overrides)


def _data_config(recipe: dict, objective: str, vocab: int, kind: str) -> dict:
    settings = recipe["objective"]
    config = {key: settings[key] for key in (
        "masked_lm_prob", "max_predictions_per_seq", "dynamic_masking", "mask_token_rate",
        "random_token_rate") if key in settings}
    config.update(objective=objective, max_seq_length=min(MAX_T, settings["max_seq_length"]))
    config["max_predictions_per_seq"] = min(5, config.get("max_predictions_per_seq", 5))
    config = _resolve_objective_config(config)
    config.update(vocabulary_size=vocab, special_token_ids=SPECIAL_IDS, tokenizer_kind=kind,
                  end_of_text_id=3)
    return config


def _floats(value):
    return [float(v) for v in value] if isinstance(value, (list, tuple)) else float(value)


def _train_steps(model, batches) -> list:
    losses = []
    for x, y, weights in batches:
        losses.append(_floats(model.train_on_batch(x, y, sample_weight=weights)))
    return losses


def _teacher_model(recipe: dict, vocab: int):
    from lmfactory import models
    teacher = recipe["teacher"]
    _seed(11)
    backbone = models.build(teacher["architecture"], teacher["preset"], vocabulary_size=vocab,
                            **(teacher.get("overrides") or {}))
    return _pretrainer_cls(teacher["architecture"], teacher["objective"])(backbone)


def pretraining_fingerprint(recipe: dict, workdir: str, vocab: int, kind: str):
    """The pretraining task model (or None for a recipe starting from a checkpoint or
    trained from scratch on its task, ``pretraining: null``)."""
    if not recipe["pretraining"] or recipe["pretraining"].get("init_checkpoint"):
        return None, None
    objective = recipe["objective"]["name"]
    data_config = _data_config(recipe, objective, vocab, kind)
    path = os.path.join(workdir, f"{recipe['name']}-pretraining.gz")
    write_pretraining_records(data_config, path, vocab)
    batches = _read_pretraining_batches(data_config, path)
    task_cls = _pretrainer_cls(recipe["architecture"], objective)
    task_args = dict(recipe["pretraining"].get("task_args") or {})
    teacher = _teacher_model(recipe, vocab) if recipe.get("teacher") else None
    _seed(0)
    backbone = _build_backbone(recipe, vocab)
    if teacher is not None:
        if hasattr(task_cls, "initialize_student"):
            task_cls.initialize_student(backbone, teacher.backbone)
        model = task_cls(backbone, teacher=teacher, **task_args)
    else:
        import inspect
        if "total_steps" in inspect.signature(task_cls.__init__).parameters:
            task_args = {"total_steps": 10, **task_args}
        model = task_cls(backbone, **task_args)
    model.compile(optimizer=_optimizer(_trainer_config(recipe, "pretraining")))
    x = batches[0][0]
    before = outputs_fingerprint(model(x, training=False))
    batch_fp = outputs_fingerprint({f"{i}/{part}/{key}": value
                                    for i, batch in enumerate(batches)
                                    for part, values in zip("xyw", batch)
                                    for key, value in (values.items() if isinstance(values, dict)
                                                       else [("", values)])})
    losses = _train_steps(model, batches)
    return {"task_model": type(model).__name__, "batches": batch_fp, "outputs": before,
            "losses": losses, "weights_after": weights_fingerprint(model)}, (model, teacher)


def _finetuning_backbone(recipe: dict, vocab: int, pretrained):
    if pretrained is not None:
        model, _ = pretrained
        return model.backbone
    from lmfactory import models
    if not recipe["pretraining"]:  # trained from scratch on its task
        _seed(0)
        return _build_backbone(recipe, vocab)
    from lmfactory.components.checkpoint_import.executor import resolve_checkpoint_path
    path = resolve_checkpoint_path(recipe["pretraining"]["init_checkpoint"])
    return models.load_checkpoint(recipe["architecture"], path)


def finetuning_fingerprint(recipe: dict, vocab: int, pretrained, workdir: str, kind: str):
    finetuning = recipe["finetuning"]
    task = finetuning["task"]
    task_args = dict(finetuning.get("task_args") or {})
    _seed(1)
    backbone = _finetuning_backbone(recipe, vocab, pretrained)
    vocab = int(backbone.get_config()["vocabulary_size"])
    config = _trainer_config(recipe, "finetuning")
    labels = weights = None
    if task in ("causal_lm", "word_vectors"):  # continued training on the objective
        objective = recipe["objective"]["name"]
        data_config = _data_config(recipe, objective, vocab, kind)
        path = os.path.join(workdir, f"{recipe['name']}-target.gz")
        write_pretraining_records(data_config, path, vocab)
        batches = _read_pretraining_batches(data_config, path)
        model = _pretrainer_cls(recipe["architecture"], objective)(backbone, **task_args)
        model.compile(optimizer=_optimizer(config))
        before = outputs_fingerprint(model(batches[0][0], training=False))
        return {"task_model": type(model).__name__, "outputs": before,
                "losses": _train_steps(model, batches),
                "weights_after": weights_fingerprint(model)}
    if recipe.get("teacher", {}).get("task_distillation"):
        _, teacher_pretrainer = pretrained
        teacher = _classifier_cls(recipe["teacher"]["architecture"])(
            teacher_pretrainer.backbone, num_classes=finetuning["num_classes"])
        model = _classifier_distiller_cls(recipe["architecture"])(
            backbone, teacher=teacher, num_classes=finetuning["num_classes"], **task_args)
        labels = np.array([0, 1])
    elif task in ("classification", "regression"):
        outputs = 1 if task == "regression" else finetuning["num_classes"]
        model = _classifier_cls(recipe["architecture"])(backbone, num_classes=outputs,
                                                        **task_args)
        labels = np.array([0.3, 2.5], "float32") if task == "regression" else np.array([0, 1])
    elif task in ("entity_typing", "relation_classification"):
        # The classification head over the marked text; entity typing: one sigmoid per type
        # (binary cross-entropy of the multi-hot types), relation classification: softmax.
        head_args = {k: v for k, v in task_args.items() if k not in _marker_args(task)}
        model = _classifier_cls(recipe["architecture"])(backbone, num_classes=3, **head_args)
        labels = (np.array([[1, 0, 1], [0, 1, 0]], "float32") if task == "entity_typing"
                  else np.array([0, 2]))
    elif task in ("translation", "text_to_text"):  # teacher forcing on the decoder ids
        model = _seq2seq_lm(recipe["architecture"], backbone)
    elif task == "tagging":
        model = _tagger(backbone, 5, task_args)
    elif task == "span_qa":
        model = _span_extractor(backbone)
    elif task == "multiple_choice":
        model = _multiple_choice(recipe["architecture"], backbone, 5, task_args)
    else:
        raise ValueError(f"fingerprint: unknown task {task!r}")
    if task == "regression":
        model.compile(optimizer=_optimizer(config), loss=keras.losses.MeanSquaredError())
    elif task == "entity_typing":
        model.compile(optimizer=_optimizer(config),
                      loss=keras.losses.BinaryCrossentropy(from_logits=True))
    elif _computes_own_loss(model) or labels is None:
        model.compile(optimizer=_optimizer(config))
    else:
        model.compile(optimizer=_optimizer(config),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = synthetic_inputs(getattr(model, "classifier", model), vocab)
    if hasattr(model, "synthetic_inputs"):  # inputs of its own (KagNet's graphs)
        x.update(model.synthetic_inputs(BATCH))
    if task in ("translation", "text_to_text"):  # targets: the decoder ids shifted left
        labels = np.roll(x["decoder_token_ids"], -1, axis=1)
        weights = x["decoder_padding_mask"].astype("float32")
    result = {"task_model": type(model).__name__,
              "outputs": outputs_fingerprint(model(x, training=False))}
    if labels is not None:
        result["losses"] = [_floats(model.train_on_batch(x, labels, sample_weight=weights))]
    result["weights_after"] = weights_fingerprint(model)
    return result


def recipe_fingerprint(name: str, workdir: str) -> dict:
    from lmfactory import recipe as recipe_lib
    from lmfactory import models
    recipe = recipe_lib.load_recipe(name)
    kind = models.get(recipe["architecture"]).tokenizer_kind
    vocab = BYTE_VOCAB if kind == "byte" else VOCAB
    pretraining, pretrained = pretraining_fingerprint(recipe, workdir, vocab, kind)
    finetuning = finetuning_fingerprint(recipe, vocab, pretrained, workdir, kind)
    keras.backend.clear_session()
    return {"pretraining": pretraining, "finetuning": finetuning}


def compare(before: dict, after: dict) -> list[str]:
    """Differences as lines naming recipe, stage and what differs (empty: identical)."""
    problems = []
    for name in sorted(set(before) | set(after)):
        if name not in before or name not in after:
            problems.append(f"{name}: only in {'after' if name in after else 'before'}")
            continue
        for stage in ("pretraining", "finetuning"):
            a, b = before[name][stage], after[name][stage]
            if a == b:
                continue
            if (a is None) != (b is None):
                problems.append(f"{name}/{stage}: present in one run only")
                continue
            for key in sorted(set(a) | set(b)):
                if a.get(key) != b.get(key):
                    detail = ""
                    if key == "weights_after":
                        wa = {row[0]: row for row in a[key]["weights"]}
                        wb = {row[0]: row for row in b[key]["weights"]}
                        changed = [p for p in wa if p in wb and wa[p] != wb[p]]
                        detail = (f" (count {a[key]['count']} -> {b[key]['count']}; only before "
                                  f"{sorted(set(wa) - set(wb))[:3]}; only after "
                                  f"{sorted(set(wb) - set(wa))[:3]}; changed {changed[:3]})")
                    elif key in ("losses", "task_model"):
                        detail = f" ({a.get(key)} -> {b.get(key)})"
                    problems.append(f"{name}/{stage}: {key} differs{detail}")
    return problems


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--compare", help="an earlier fingerprint JSON to compare with")
    parser.add_argument("--recipes", nargs="*", help="default: every shipped recipe")
    args = parser.parse_args(argv)
    tf.config.experimental.enable_op_determinism()
    from lmfactory import recipe as recipe_lib
    names = args.recipes or recipe_lib.recipe_names()
    results = {}
    with tempfile.TemporaryDirectory() as workdir:
        for name in names:
            results[name] = recipe_fingerprint(name, workdir)
            print(f"{name}: pretraining losses "
                  f"{(results[name]['pretraining'] or {}).get('losses')}, finetuning "
                  f"{results[name]['finetuning'].get('losses')}", flush=True)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1, sort_keys=True)
    if args.compare:
        with open(args.compare) as f:
            before = json.load(f)
        problems = compare({k: v for k, v in before.items() if k in results}, results)
        for line in problems:
            print("DIFF", line)
        print(f"{len(results)} recipes compared: "
              f"{'identical' if not problems else f'{len(problems)} differences'}")
        return 1 if problems else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
