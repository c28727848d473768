"""Saving a serving ``tf.Module`` so that TF Serving's C++ loader can run it.

TF Serving (and ``saved_model_cli run``, and the C API's ``TF_LoadSessionFromSavedModel``)
does not rebuild the object graph the way Python's ``tf.saved_model.load`` does: it imports
the MetaGraph, runs the saver's restore op on the variables checkpoint and then runs a
SignatureDef by its tensor names. With Keras 3 on TensorFlow, a Keras variable is a wrapper
around a ``tf.Variable``; when it is saved as part of the object graph, Keras' export hook
maps it to a *new* graph variable initialised from the copy of the wrapped one. The restore
op then fills the new variable while the signatures read the copy, which nothing
initialises: the model server answers ``Could not find variable ... does not exist``.
Python's loader restores by object, so it never shows the problem.

`save` therefore writes a root that holds the signatures and, as its only state, the wrapped
``tf.Variable`` of every Keras variable the module reaches, the module's other variables, its
lookup tables and other resources, and its assets (vocabulary files). The Keras objects are
not part of the saved object graph, so each value is saved once, under one name, and the
restore op fills exactly the variables the signatures read. This is also what
``keras.export.ExportArchive`` does; the serving modules here keep their own classes because
they hold preprocessing, decoding loops and several signatures.
"""

from __future__ import annotations

import os

import keras

from lmfactory.models.backend import tf


def _concrete(function):
    """The concrete function of a signature (a tf.function with an input signature, or one
    already concrete)."""
    if isinstance(function, tf.types.experimental.ConcreteFunction):
        return function
    return function.get_concrete_function()


def _servable_state(module: tf.Module, functions: list) -> dict:
    """The state the signatures need, as lists of TensorFlow trackables: ``variables``
    (the ``tf.Variable`` s the functions read, and those of every Keras variable or plain
    variable ``module`` reaches: a layer may keep a sublayer where only Keras tracks it),
    ``resources`` (lookup tables, tokenizer models) and ``assets`` (vocabulary files)."""
    state = {"variables": [], "resources": [], "assets": []}
    seen = set()

    def add(kind, trackable):
        if id(trackable) not in seen:
            seen.add(id(trackable))
            state[kind].append(trackable)

    for function in functions:
        for variable in function.graph.variables:
            add("variables", variable.value if isinstance(variable, keras.Variable)
                else variable)
    for trackable in tf.train.TrackableView(module).descendants():
        if isinstance(trackable, keras.Variable):
            trackable = trackable.value
        if isinstance(trackable, tf.Variable):
            add("variables", trackable)
        elif isinstance(trackable, tf.saved_model.experimental.TrackableResource):
            add("resources", trackable)
        elif isinstance(trackable, tf.saved_model.Asset):
            add("assets", trackable)
    return state


def servable_root(module: tf.Module, functions: list = ()) -> tf.Module:
    """A fresh module holding the TensorFlow state of ``module`` that the concrete
    ``functions`` need (`_servable_state`)."""
    root = tf.Module(name=f"{module.name}_servable")
    for kind, trackables in _servable_state(module, list(functions)).items():
        setattr(root, f"servable_{kind}", trackables)
    return root


def save(module: tf.Module, export_dir: str, signatures: dict) -> None:
    """Writes ``signatures`` (name -> concrete function, or tf.function with an input
    signature, of ``module``) as a SavedModel that both TF Serving's loader and
    ``tf.saved_model.load`` run (see the module docstring). The signatures stay at hand for
    `take_saved_signatures` until the next save."""
    signatures = {name: _concrete(function) for name, function in signatures.items()}
    tf.saved_model.save(servable_root(module, list(signatures.values())), export_dir,
                        signatures=signatures)
    _LAST_SAVED.clear()
    _LAST_SAVED[_key(export_dir)] = signatures


# The signatures of the last `save` in this process, by export folder: one entry, so that a
# model nobody asks about is not kept alive for long.
_LAST_SAVED: dict = {}


def _key(export_dir: str) -> str:
    return export_dir if "://" in export_dir else os.path.abspath(export_dir)


class _KeywordSignature:
    """A saved concrete function called as a loaded SavedModel's signature is: inputs by
    their SignatureDef names (its input specs' names), outputs as a dict."""

    def __init__(self, function, names: list):
        self._function, self._names = function, names
        specs = function.structured_input_signature[0]
        self.structured_input_signature = ((), dict(zip(names, specs)))

    def __call__(self, **inputs):
        outputs = self._function(*[inputs[name] for name in self._names])
        if not isinstance(outputs, dict):
            raise ValueError(f"signature returns {type(outputs).__name__}, not a dict")
        return outputs


class SavedSignatures:
    """Stands for ``tf.saved_model.load(export_dir)`` where only ``signatures`` is read."""

    def __init__(self, signatures: dict):
        self.signatures = signatures


def take_saved_signatures(export_dir: str):
    """The signatures `save` just wrote to ``export_dir``, as a `SavedSignatures` (the
    traced functions themselves: no reload of the SavedModel), and forgets them; None when
    the last save was elsewhere or a signature's inputs are not flat named tensors (then
    load the SavedModel)."""
    signatures = _LAST_SAVED.pop(_key(export_dir), None)
    if signatures is None:
        return None
    wrapped = {}
    for name, function in signatures.items():
        positional, keywords = function.structured_input_signature
        names = [getattr(spec, "name", None) for spec in positional]
        if keywords or not all(isinstance(spec, tf.TensorSpec) for spec in positional) \
                or not all(names) or len(set(names)) != len(names):
            return None
        wrapped[name] = _KeywordSignature(function, names)
    return SavedSignatures(wrapped)


__all__ = ["SavedSignatures", "save", "servable_root", "take_saved_signatures"]
