"""The training checks of the conformance harness (harness.py, check 6): each pretraining
objective's task model and the classification head lower their loss in a few Adam steps on
one synthetic batch; teachers for the task models that need one are built from other
registered architectures."""

from __future__ import annotations

import os

import keras
import numpy as np

from lmfactory import models

from .tiny import (BATCH, LEARNING_RATE, NUM_CLASSES, NUM_PREDICTIONS, RUN_EAGERLY, SEED,
                   SEQ, TRAIN_STEPS, build_tiny, characters_per_token, config_value,
                   extra_input_maker,
                   head_input_names, make_inputs)


def pretraining_batch(objective, vocabulary_size, seed=0, tmp_dir=None):
    """One synthetic ``(x, y, sample_weight)`` batch of ``objective``: random records in the
    objective's own record format written to a file and read back through its own reader
    (``features.make_dataset``), so any registered objective is covered (ids int32,
    padding_mask bool, weights float32)."""
    import tempfile

    from synthetic_records import read_batches, write_pretraining_records

    from lmfactory.components.pretraining_data import features

    config = features.resolve_config({"objective": objective, "max_seq_length": SEQ,
                                      "max_predictions_per_seq": NUM_PREDICTIONS})
    config.update(vocabulary_size=vocabulary_size, tokenizer_kind="test",
                  special_token_ids={"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4},
                  end_of_text_id=3)
    with tempfile.TemporaryDirectory(dir=tmp_dir) as folder:
        path = os.path.join(folder, f"{objective}.gz")
        write_pretraining_records(config, path, vocabulary_size, count=BATCH, seed=seed)
        (batch,) = read_batches(config, path, BATCH, 1)
    return batch


def computes_own_loss(model) -> bool:
    """Whether ``model`` overrides Keras's ``compute_loss`` (then it is compiled with an
    optimizer only, as the pipeline does)."""
    return type(model).compute_loss is not keras.Model.compute_loss


def _loss(model, x, y, sample_weight):
    y_pred = model(x, training=False)
    return float(model.compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight,
                                    training=False))


def training_steps(model) -> int:
    """`TRAIN_STEPS`, or more for a model with BatchNormalization: the loss is measured in
    inference mode, which normalises with the moving statistics, and those approach the one
    training batch's only geometrically (momentum m leaves m^steps of the initial mean 0 /
    variance 1). Such a model trains until less than 5% of the initial statistics remain
    (29 steps at PyTorch's momentum 0.1, Keras 0.9), so that the loss measures the training."""
    momenta = [layer.momentum for layer in model._flatten_layers()  # noqa: SLF001
               if isinstance(layer, keras.layers.BatchNormalization)]
    if not momenta:
        return TRAIN_STEPS
    return max(TRAIN_STEPS, int(np.ceil(np.log(0.05) / np.log(max(momenta)))))


def check_loss_decreases(model, x, y, sample_weight=None, what="task model"):
    """Compiles ``model`` with Adam (a loss only where it does not compute its own) and
    checks that `training_steps` steps on the one fixed batch lower its loss."""
    if computes_own_loss(model):
        model.compile(optimizer=keras.optimizers.Adam(LEARNING_RATE), run_eagerly=RUN_EAGERLY)
    else:
        model.compile(optimizer=keras.optimizers.Adam(LEARNING_RATE),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      run_eagerly=RUN_EAGERLY)
    before = _loss(model, x, y, sample_weight)
    import tensorflow as tf  # the harness's tf.data input (the JAX check feeds arrays)

    batch = (x, y) if sample_weight is None else (x, y, sample_weight)
    steps = training_steps(model)
    dataset = tf.data.Dataset.from_tensors(batch).repeat(steps)
    model.fit(dataset, epochs=1, verbose=0)
    after = _loss(model, x, y, sample_weight)
    assert np.isfinite(before) and np.isfinite(after), (what, before, after)
    assert after < before, f"{what}: loss {before:.4f} -> {after:.4f} after {steps} steps"
    return before, after


def teacher_candidates(name):
    """Other registered architectures with ``name``'s tokenizer kind, in name order."""
    kind = models.get(name).tokenizer_kind
    return [other for other in models.names()
            if other != name and models.get(other).tokenizer_kind == kind]


def build_with_teacher(name, make_student, make_teacher):
    """``make_student(teacher)`` with the first teacher ``make_teacher(candidate)`` that
    the student accepts, trying each `teacher_candidates` architecture (a candidate it
    rejects with TypeError / ValueError is skipped; if all are rejected, the errors are
    raised together)."""
    errors = []
    for candidate in teacher_candidates(name):
        teacher = make_teacher(candidate)
        if teacher is None:
            continue
        try:
            return make_student(teacher), candidate
        except (TypeError, ValueError) as error:
            errors.append(f"{candidate}: {error}")
    raise AssertionError(f"{name}: no registered architecture with tokenizer kind "
                         f"{models.get(name).tokenizer_kind!r} gives a teacher it accepts: "
                         f"{errors or 'no candidate'}")


def _teacher_pretrainer(candidate):
    """The task model of ``candidate``'s first objective that needs no teacher itself."""
    arch = models.get(candidate)
    for cls in arch.pretrainers.values():
        if not getattr(cls, "needs_teacher", False):
            return cls(build_tiny(candidate, seed=SEED + 1))
    return None


def _teacher_classifier(candidate):
    arch = models.get(candidate)
    if not arch.has_head("classification"):
        return None
    head = arch.head("classification")
    if getattr(head, "needs_teacher", False):
        return None
    return head(build_tiny(candidate, seed=SEED + 1), num_classes=NUM_CLASSES)


def schedule_args(cls) -> dict:
    """``total_steps`` for a task model whose loss follows the training's progress, as the
    pipeline passes it (components/tasks/language_model.py `_schedule_args`)."""
    import inspect

    init = cls.__init__ if isinstance(cls, type) else cls
    if "total_steps" in inspect.signature(init).parameters:
        return {"total_steps": TRAIN_STEPS}
    return {}


def build_pretrainer(name, objective, backbone):
    """``cls(backbone)`` of the objective, with a teacher from another architecture when
    the class needs one (after its ``initialize_student``, as the pipeline does)."""
    cls = models.get(name).pretrainer(objective)
    if not getattr(cls, "needs_teacher", False):
        return cls(backbone, **schedule_args(cls))

    def make_student(teacher):
        if hasattr(cls, "initialize_student"):
            cls.initialize_student(backbone, teacher.backbone)
        return cls(backbone, teacher=teacher, **schedule_args(cls))

    model, _ = build_with_teacher(name, make_student, _teacher_pretrainer)
    return model


def check_pretraining_objective(name, objective):
    """A few steps on one synthetic batch in ``objective``'s format lower the loss of the
    architecture's task model for it (on a fresh tiny backbone)."""
    backbone = build_tiny(name)
    model = build_pretrainer(name, objective, backbone)
    x, y, sample_weight = pretraining_batch(objective,
                                            config_value(backbone, "vocabulary_size"))
    return check_loss_decreases(model, x, y, sample_weight, what=f"{name} {objective}")


def check_classification_training(name):
    """A few steps on one synthetic batch with labels [B] lower the classification head's
    loss (on a fresh tiny backbone); nothing to do without a classification head."""
    arch = models.get(name)
    if not arch.has_head("classification"):
        return None
    backbone = build_tiny(name)
    classifier = arch.head("classification")(backbone, num_classes=NUM_CLASSES)
    x = make_inputs(head_input_names(classifier, backbone),
                    config_value(backbone, "vocabulary_size"),
                    characters_per_token=characters_per_token(backbone),
                    extra=extra_input_maker(backbone))
    labels = np.array([0, 2], dtype="int32")
    return check_loss_decreases(classifier, x, labels, what=f"{name} classification")


def check_pretraining(name):
    """`check_pretraining_objective` for every objective the architecture trains, then
    `check_classification_training`."""
    results = {objective: check_pretraining_objective(name, objective)
               for objective in models.get(name).objectives}
    results["classification"] = check_classification_training(name)
    return results
