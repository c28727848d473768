"""The tied output layer (models/tied_output.py) of every registered pretraining objective.

The cases are collected from the registry (`models.names()` and each architecture's
objectives), as in test_conformance.py. Each task model runs on a tiny backbone and the
objective's synthetic batch while every reverse call of a keras-nlp `ReversibleEmbedding`
(the projection onto the vocabulary through the token embedding) is recorded. A task model
whose class says ``ties_output_embedding = True`` must make such calls, each folded
([1, B * T, H] or [N, H]: no [B, H, V] table gradient), each equal to the product with the
embedding table; its outputs, loss and gradients must equal those of the unfolded
computation (the same model with each folded call run as keras-nlp's [B, T, H] call). A
task model that does not say so must make no such call. The fine-tuning heads that say so
(e.g. an auxiliary language-modelling loss) get the same checks on their outputs.
"""

import functools

import keras_nlp
import numpy as np
import pytest
import tensorflow as tf
from keras import ops

from lmfactory import models

from . import harness

OBJECTIVES = [(name, objective) for name in models.names()
              for objective in models.get(name).objectives]
ReversibleEmbedding = keras_nlp.layers.ReversibleEmbedding


@functools.lru_cache(maxsize=None)
def synthetic_batch(objective, vocabulary_size):
    """The objective's synthetic batch (harness.pretraining_batch), made once per objective
    and vocabulary size (tests only read it)."""
    return harness.pretraining_batch(objective, vocabulary_size)


def record_reverse_calls(monkeypatch, unfold_batch=None):
    """Patches `ReversibleEmbedding.call` to record each reverse call as (layer, inputs,
    logits). With ``unfold_batch`` = B, a folded call ([1, N, H] or [N, H]) is computed
    unfolded, as [B, N / B, H] (keras-nlp's own call on the unfolded hidden states), and
    folded back."""
    records = []
    original = ReversibleEmbedding.call

    def call(self, inputs, reverse=False):
        if not reverse:
            return original(self, inputs)
        folded = len(inputs.shape) == 2 or (len(inputs.shape) == 3 and inputs.shape[0] == 1)
        rows = inputs.shape[-2]
        if unfold_batch and folded and rows is not None and rows % unfold_batch == 0:
            unfolded = ops.reshape(inputs, (unfold_batch, -1, inputs.shape[-1]))
            logits = ops.reshape(original(self, unfolded, reverse=True),
                                 tuple(inputs.shape[:-1]) + (self.input_dim,))
        else:
            logits = original(self, inputs, reverse=True)
        records.append((self, inputs, logits))
        return logits

    monkeypatch.setattr(ReversibleEmbedding, "call", call)
    return records


def forward_and_gradients(model, x, y, sample_weight):
    """(outputs, loss, gradients of the loss w.r.t. the trainable variables), inference
    mode (no dropout), dense gradients (None where a variable does not reach the loss)."""
    with tf.GradientTape() as tape:
        outputs = model(x, training=False)
        loss = model.compute_loss(x=x, y=y, y_pred=outputs, sample_weight=sample_weight,
                                  training=False)
    gradients = tape.gradient(loss, model.trainable_variables)
    gradients = [None if g is None else tf.convert_to_tensor(g).numpy() for g in gradients]
    return tf.nest.map_structure(np.asarray, outputs), float(loss), gradients


def projection_table(layer):
    """The [H, V] matrix a reverse call multiplies by: the transposed token table, or the
    layer's own reverse matrix when it is untied."""
    if layer.tie_weights:
        return ops.convert_to_numpy(layer.embeddings).T
    return ops.convert_to_numpy(layer.reverse_embeddings)


def check_folded_and_unfolded_agree(what, model, run, monkeypatch):
    """``run(model)`` -> (outputs, loss, gradients) with every reverse call recorded: each
    is folded and equals the product with its table, and outputs, loss and gradients equal
    those of the unfolded computation."""
    # The state of random ops (e.g. a sampler's seed), restored for the reference.
    state = [ops.convert_to_numpy(variable) for variable in model.variables]
    with monkeypatch.context() as patch:
        records = record_reverse_calls(patch)
        outputs, loss, gradients = run(model)
    assert records, f"{what} sets ties_output_embedding but never projects onto it"
    for layer, inputs, logits in records:
        assert len(inputs.shape) == 2 or inputs.shape[0] == 1, (
            f"{what}: {layer.name} projects unfolded hidden states {tuple(inputs.shape)} "
            f"(use models/tied_output.py)")
        expected = np.matmul(ops.convert_to_numpy(inputs).astype("float64"),
                             projection_table(layer).astype("float64"))
        np.testing.assert_allclose(ops.convert_to_numpy(logits), expected, rtol=1e-5,
                                   atol=1e-5, err_msg=f"{what}: logits != h W_e^T")

    for variable, value in zip(model.variables, state):
        variable.assign(value)
    with monkeypatch.context() as patch:
        record_reverse_calls(patch, unfold_batch=harness.BATCH)
        reference_outputs, reference_loss, reference_gradients = run(model)
    tf.nest.map_structure(
        lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5,
                                                err_msg=f"{what}: outputs"),
        outputs, reference_outputs)
    np.testing.assert_allclose(loss, reference_loss, rtol=1e-5, err_msg=f"{what}: loss")
    assert any(g is not None for g in gradients), f"{what}: no gradient"
    for variable, g, reference in zip(model.trainable_variables, gradients,
                                      reference_gradients):
        assert (g is None) == (reference is None), (what, variable.path)
        if g is not None:
            np.testing.assert_allclose(g, reference, rtol=1e-5, atol=1e-6,
                                       err_msg=f"{what}: gradient of {variable.path}")


@pytest.mark.parametrize("name,objective", OBJECTIVES)
def test_pretraining_tied_output_is_folded(name, objective, monkeypatch):
    """Every objective's task model: the declaration holds, and a tied output layer is
    folded, equal to the table product and to the unfolded computation."""
    backbone = harness.build_tiny(name)
    model = harness.build_pretrainer(name, objective, backbone)
    x, y, sample_weight = synthetic_batch(
        objective, harness.config_value(backbone, "vocabulary_size"))
    what = f"{name} {objective} ({type(model).__name__})"
    if not model.ties_output_embedding:
        with monkeypatch.context() as patch:
            records = record_reverse_calls(patch)
            model(x, training=False)
        assert not records, (f"{what} projects onto its token embedding but its class "
                             f"does not set ties_output_embedding = True")
        return
    check_folded_and_unfolded_agree(
        what, model, lambda m: forward_and_gradients(m, x, y, sample_weight), monkeypatch)


def _fine_tuning_heads():
    """(name, kind) of the fine-tuning heads that declare a tied output layer and are not
    one of the architecture's pretraining task models (those are tested above); one
    architecture per head class (the first in name order)."""
    cases, seen = [], set()
    for name in models.names():
        arch = models.get(name)
        pretrainers = set(arch.pretrainers.values())
        for kind in arch.task_kinds:
            head = arch.head(kind)
            if getattr(head, "ties_output_embedding", False) and head not in pretrainers \
                    and head not in seen:
                seen.add(head)
                cases.append((name, kind))
    return cases


def _head_inputs(model, backbone):
    return harness.make_inputs(harness.head_input_names(model, backbone),
                               harness.config_value(backbone, "vocabulary_size"),
                               characters_per_token=harness.characters_per_token(backbone),
                               extra=harness.extra_input_maker(backbone))


def _float_outputs_sum(outputs):
    values = [ops.cast(value, "float32") for value in tf.nest.flatten(outputs)
              if "float" in str(value.dtype)]
    return tf.add_n([tf.reduce_sum(value * value) for value in values]) / 1e3


@pytest.mark.parametrize("name,kind", _fine_tuning_heads())
def test_fine_tuning_head_tied_output_is_folded(name, kind, monkeypatch):
    """A fine-tuning head with a tied output layer (e.g. an auxiliary language-modelling
    loss, or a sequence-to-sequence LM): folded, equal to the table product, and outputs
    and gradients (of a function of all its outputs) equal to the unfolded computation."""
    backbone = harness.build_tiny(name)
    model = harness.build_head(name, kind, backbone)
    inputs = _head_inputs(model, backbone)

    def run(m):
        with tf.GradientTape() as tape:
            outputs = m(inputs, training=False)
            loss = _float_outputs_sum(outputs)
        gradients = tape.gradient(loss, m.trainable_variables)
        gradients = [None if g is None else tf.convert_to_tensor(g).numpy()
                     for g in gradients]
        return tf.nest.map_structure(np.asarray, outputs), float(loss), gradients

    check_folded_and_unfolded_agree(f"{name} {kind} head ({type(model).__name__})", model,
                                    run, monkeypatch)
