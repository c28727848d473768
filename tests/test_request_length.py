"""Serving at the request's length (models/request_length.py): every encoder signature runs
its model on the inputs cut after the batch's longest row, and answers what the same
signature answers at the full packed length (at most 1e-5, strings equal). The
per-architecture parity of the backbones is tests/conformance's ``test_request_length``;
here each encoder task kind's signature (with LMFACTORY_FULL_OP_AUDIT=1, with every head
class and packing it can have), on the kind's own warm-up requests."""

import functools
import os

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  (the SavedModels' tokenizer ops)

from lmfactory import models
from lmfactory.components.pusher import loader_check, warmup
from lmfactory.components.trainer import export as export_lib
from lmfactory.models import request_length, saved_model

import serving_models

PACKED = 32  # the tiny backbones' positions; short requests fill at most half of it
ENCODER_KINDS = ("classification", "tagging", "span_qa", "multiple_choice",
                 "relation_classification", "entity_typing")


def test_longest_length_rounds_up_within_the_packed_length():
    mask = tf.constant([[1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0],
                        [1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0]])
    assert int(request_length.longest_length(mask, 8)) == 8
    assert int(request_length.longest_length(mask, 4)) == 8
    assert int(request_length.longest_length(tf.ones([2, 12], tf.int32), 8)) == 12
    assert int(request_length.longest_length(tf.zeros([0, 12], tf.int32), 8)) == 8
    inputs = {"token_ids": tf.ones([2, 12], tf.int32), "padding_mask": mask,
              "character_ids": tf.ones([2, 12, 5], tf.int32), "labels": tf.ones([2], tf.int32)}
    cut = request_length.cut_inputs(inputs, 8)
    assert {name: value.shape.as_list() for name, value in cut.items()} == {
        "token_ids": [2, 8], "padding_mask": [2, 8], "character_ids": [2, 8, 5], "labels": [2]}


# The texts of a shortened request: a relation's or an entity's mentions must occur in it.
SHORT_TEXT, SHORT_TEXT_WITH_MENTIONS = "the", "the ."
SHORT_MENTIONS = {"head": "the", "tail": ".", "mention": "the"}


def _shortened(request):
    """The warm-up request with every text replaced by a word or two (the tiny vocabularies
    spell some of the kinds' words in four pieces): packed, each row then holds at most 8 of
    the pairs' 16 positions, so the cut signature really runs shorter inputs."""
    mentions = set(SHORT_MENTIONS) & set(request.inputs)
    inputs = {}
    for name, proto in request.inputs.items():
        value = tf.make_ndarray(proto)
        if value.dtype.kind in "OS":
            text = SHORT_MENTIONS.get(name) or (SHORT_TEXT_WITH_MENTIONS if mentions
                                                 else SHORT_TEXT)
            value = np.full(value.shape, text.encode("utf-8"), dtype=object)
        inputs[name] = value
    return warmup.predict_request(request.model_spec.signature_name, inputs)


def _call(signature, tensors: dict) -> dict:
    """A traced signature called on a request's tensors, outputs as numpy."""
    if not hasattr(signature, "structured_input_signature"):  # a tf.function with its specs
        signature = signature.get_concrete_function()
    args, kwargs = signature.structured_input_signature
    outputs = (signature(*[tensors[spec.name] for spec in args]) if args
               else signature(**{name: tensors[name] for name in kwargs}))
    return {key: value.numpy() for key, value in outputs.items()}


@functools.lru_cache(maxsize=None)
def cases(kind: str) -> tuple:
    """The architectures whose ``kind`` signature is checked: the first serving it; with
    LMFACTORY_FULL_OP_AUDIT=1, enough that every head class and every packing of the kind
    (tests/serving_models.py's `_pieces`; the backbones are the conformance harness's) runs
    cut at least once (about 9 minutes). Architectures served at their packed length are
    left out."""
    if os.environ.get("LMFACTORY_FULL_OP_AUDIT") != "1":
        return (serving_models.example_case(kind),)
    chosen, covered = [], set()
    for name, case_kind in serving_models.serving_cases():
        if case_kind != kind or models.get(name).serving_length_multiple is None:
            continue
        pieces = {piece for piece in serving_models._pieces(name, kind)
                  if piece[0] != "backbone"}
        if not pieces <= covered and not serving_models.refusal(name, kind):
            chosen.append(name)
            covered |= pieces
    return tuple(chosen)


@pytest.mark.parametrize("kind", ENCODER_KINDS)
def test_signatures_at_the_request_length_answer_as_at_the_full_length(kind, tmp_path,
                                                                     monkeypatch):
    """Each chosen pair's signature traced twice from one task model packed to 32: as
    exported, and with the cut length forced to the packed one; both run the kind's warm-up
    requests with short texts (rows of at most 16 positions: the cut halves the length)."""
    assert cases(kind), kind
    for architecture in cases(kind):
        _check_pair(architecture, kind, tmp_path / architecture, monkeypatch)


def _check_pair(architecture, kind, folder, monkeypatch):
    requests = [_shortened(request) for request in
                warmup.read_warmup_requests(serving_models.warmed(architecture, kind))]
    assert requests
    monkeypatch.setattr(serving_models, "SEQUENCE_LENGTH", PACKED)
    model, preprocessor, task = serving_models._task_model.__wrapped__(architecture, kind, "")
    assert request_length.serving_multiple(model) == 8, architecture
    assert task["sequence_length"] >= 2 * 8, (architecture, task["sequence_length"])
    model_config = {"architecture": architecture, "task": dict(task),
                    "generation": {"max_length": 6}}
    traced = {}
    monkeypatch.setattr(saved_model, "save",  # the signatures, kept in memory
                        lambda module, export_dir, signatures: traced.update(
                            {os.path.basename(export_dir): (module, signatures)}))
    vocabulary = serving_models.vocabulary(architecture)
    export_lib.export_serving_model(model, vocabulary, model_config, str(folder / "cut"),
                                    preprocessor=preprocessor)
    monkeypatch.setattr(request_length, "longest_length",
                        lambda mask, multiple: tf.shape(mask)[-1])
    export_lib.export_serving_model(model, vocabulary, model_config, str(folder / "full"),
                                    preprocessor=preprocessor)
    monkeypatch.undo()
    for request in requests:
        name = request.model_spec.signature_name
        tensors = warmup.request_tensors(request)
        answered = _call(traced["cut"][1][name], tensors)
        expected = _call(traced["full"][1][name], tensors)
        assert set(answered) == set(expected)
        for key, value in expected.items():
            where = f"{architecture}/{kind}: {key}"
            assert answered[key].shape == value.shape, where
            if value.dtype.kind in "OSU":
                np.testing.assert_array_equal(answered[key], value, err_msg=where)
            else:
                np.testing.assert_allclose(answered[key], value, rtol=0,
                                           atol=loader_check.ATOL, err_msg=where)
