"""The conformance harness: the checks every registered architecture must pass.

In the spirit of keras-hub's ``run_backbone_test``: each check is a plain function of an
architecture's registry name (and a scratch folder where it writes files), so the
parametrised tests (``test_conformance.py``, one case per ``models.names()`` entry) and the
acceptance test of a temporary architecture registered at test time
(``test_toy_architecture.py``) run exactly the same code. Nothing here names a shipped
architecture: everything is read from its `Architecture` record (family, presets,
objectives, heads, tokenizer kind) and from the backbone itself (``backbone.input`` keys,
``get_config()``).

Modules: ``tiny.py`` holds the sizes and synthetic inputs, ``training.py`` the training
checks (6); this module the other checks and the runners, and re-exports both.

Sizes: `tiny_overrides` derives a tiny configuration from the architecture's smallest
preset (vocabulary 100, at most 2 layers, width 16 with 2 heads, feed-forward 32, 32
positions), overriding only the constructor arguments the preset itself sets and
``models.backbone_arguments`` accepts. A backbone class may add a class attribute
``conformance_overrides`` (a dict, or a function of the derived overrides returning a dict)
when a derived size breaks one of its own invariants, or when a checked property holds
exactly only in some configuration (the hook's docstring gives the reason).

Checks (`run_all_checks` runs them all; ``test_conformance.py`` runs each as its own test):

Families (`models.registry.FAMILIES`) differ in their inputs and outputs, which
`input_names` / `make_inputs` / `output_streams` read from the backbone itself:
encoder, decoder, recurrent and embedding backbones map keras-hub's ``token_ids`` /
``padding_mask`` / ``segment_ids`` (plus ``character_ids`` [B, T, C] for a character-aware
one such as ELMo, C = config ``max_characters_per_token``) to ``sequence_output``; an
encoder_decoder maps ``encoder_token_ids`` / ``encoder_padding_mask`` /
``decoder_token_ids`` / ``decoder_padding_mask`` to ``encoder_sequence_output`` and
``decoder_sequence_output``. An embedding backbone may take no ``padding_mask`` (a
word's vector does not depend on its neighbours).

* ``forward``: builds; each output stream [B, T, width] float (width = config ``hidden_dim``
  for ``sequence_output`` / ``decoder_sequence_output`` where the config has it;
  ``pooled_output`` [B, hidden] where present); a shorter sequence works too; inputs it
  does not take (``segment_ids``, a key that sorts first) change nothing.
* ``padding``: outputs at real positions ignore the ids (and segment ids) of padded
  positions, right or left padded, on each input stream of an encoder-decoder; a real token
  changes the outputs; bidirectional models (encoders, a non-causal recurrent model) see
  later tokens; an embedding model without a padding mask is per-token (a token changes
  its own position's output only).
* ``causal``: causal architectures (``Architecture.causal``: decoders, a left-to-right
  recurrent LM) and every encoder-decoder's decoder: changing token t leaves positions < t
  unchanged (and changes t).
* ``config``: ``from_config(get_config())`` gives the same config and, with the weights
  copied, identical outputs; the config is JSON.
* ``checkpoint``: ``models.save_checkpoint`` / ``models.load_checkpoint`` and a ``.keras``
  save / ``keras.saving.load_model`` give identical outputs.
* ``pretraining``: each pretraining objective's task model, on a synthetic batch in the
  objective's ``make_dataset`` format, has a lower loss after a few Adam steps (a teacher,
  when the task model needs one, is built from another registered architecture with the
  same tokenizer kind); the classification head likewise on labels [B].
* ``export``: the backbone in a `tf.Module` with a ``tf.function`` serving signature,
  saved with ``models/saved_model.save``, gives the Keras outputs (1e-5) both through
  ``tf.saved_model.load`` and run in a Session from the MetaGraph, as TF Serving loads it.
* ``generation``: every architecture with a ``causal_lm`` head (a ``seq2seq_lm`` head for an
  encoder-decoder, with the source in ``state_context``): greedy ``generate_ids`` of a
  2-token prompt (1-token for seq2seq) to length 6 is deterministic, starts with the prompt
  and equals the naive loop that re-runs the whole prefix through the head and takes the
  argmax (cached decoding == uncached, token for token).
* ``heads``: every task kind the architecture has a head for builds on the tiny backbone
  and gives outputs of the documented leading shape, unchanged by inputs it does not take.
"""

from __future__ import annotations

import json
import os

import keras
import numpy as np
import tensorflow as tf

from lmfactory import models
from lmfactory.models import saved_model

from .tiny import (  # noqa: F401 (re-exported: the harness's interface)
    BATCH, CHARACTER_IDS, DEFAULT_CHARACTERS_PER_TOKEN, ENCODER_DECODER_INPUTS, EXPORT_ATOL,
    HEAD_ARGUMENTS, INVARIANCE_ATOL, LEARNING_RATE, LENGTHS, NUM_CHOICES, NUM_CLASSES,
    NUM_LABELS, NUM_PREDICTIONS, RUN_EAGERLY, SEED, SEQ, TINY_EMBEDDING, TINY_HEADS,
    TINY_HIDDEN, TINY_INTERMEDIATE, TINY_LAYERS, TINY_POSITIONS, TINY_VOCABULARY,
    TINY_WINDOW, TRAIN_STEPS, assert_outputs_close, backbone_inputs,
    build_tiny, characters_per_token, config_value, extra_input_maker, head_input_names,
    input_names,
    make_inputs, padding_mask, smallest_preset, tiny_overrides, to_numpy,
)
from .training import (  # noqa: F401 (re-exported)
    pretraining_batch, computes_own_loss, check_loss_decreases, teacher_candidates,
    build_with_teacher, _teacher_classifier, schedule_args,
    build_pretrainer, check_pretraining_objective, check_classification_training,
    check_pretraining,
)


def _family(name):
    return models.get(name).family


def output_streams(backbone) -> dict:
    """Output name -> the input stream it runs over: ``{"sequence_output": ""}`` for a
    single-stream backbone, ``{"encoder_sequence_output": "encoder_", "decoder_sequence_output":
    "decoder_"}`` for an encoder-decoder (input prefixes)."""
    names = input_names(backbone)
    if set(ENCODER_DECODER_INPUTS) <= set(names):
        return {"encoder_sequence_output": "encoder_", "decoder_sequence_output": "decoder_"}
    if "token_ids" not in names:
        raise AssertionError(f"{type(backbone).__name__}: inputs {names} have neither "
                             f"token_ids nor the encoder-decoder inputs "
                             f"{list(ENCODER_DECODER_INPUTS)}")
    return {"sequence_output": ""}


def _check_family_inputs(name, backbone):
    family, names = _family(name), input_names(backbone)
    if family == "encoder_decoder":
        missing = sorted(set(ENCODER_DECODER_INPUTS) - set(names))
        assert not missing, f"{name}: an encoder-decoder backbone lacks inputs {missing}"
    else:
        assert "token_ids" in names, f"{name}: backbone inputs {names} lack token_ids"
        if family != "embedding":
            assert "padding_mask" in names, f"{name}: backbone has no padding_mask input"


# --------------------------------------------------------------------------- 1. forward


def check_forward(name, backbone=None):
    """The backbone builds and maps its family's inputs to float outputs of the right
    shapes: each output stream [B, T, width] (width = config ``hidden_dim`` for the last
    stream where the config has it), ``pooled_output`` [B, hidden] if any."""
    backbone = backbone if backbone is not None else build_tiny(name)
    _check_family_inputs(name, backbone)
    for spec in backbone.input.values():
        assert spec.dtype == "int32", f"{name}: input {spec.name} is {spec.dtype}, not int32"
    # A backbone whose sequence_output is wider than its config's hidden_dim (e.g. several
    # residual streams concatenated) says so with a `sequence_output_dim` attribute.
    hidden = getattr(backbone, "sequence_output_dim", None) or config_value(backbone,
                                                                             "hidden_dim")
    streams = output_streams(backbone)
    for seq in (SEQ, 5):
        inputs = backbone_inputs(backbone, seq=seq, lengths=(seq, seq - 2))
        outputs = backbone(inputs, training=False)
        assert isinstance(outputs, dict), f"{name}: outputs are {type(outputs)}, not a dict"
        for key in streams:
            assert key in outputs, f"{name}: outputs {sorted(outputs)} lack {key}"
            sequence = outputs[key]
            width = hidden if hidden is not None and key != "encoder_sequence_output" \
                else sequence.shape[-1]
            assert tuple(sequence.shape) == (BATCH, seq, width), (name, key,
                                                                  tuple(sequence.shape))
            assert "float" in str(sequence.dtype), (name, key, sequence.dtype)
            assert np.all(np.isfinite(np.asarray(sequence))), f"{name}: non-finite {key}"
        if "pooled_output" in outputs:
            pooled = outputs["pooled_output"]
            width = hidden if hidden is not None else pooled.shape[-1]
            assert tuple(pooled.shape) == (BATCH, width), (name, tuple(pooled.shape))
            assert "float" in str(pooled.dtype), (name, pooled.dtype)
    check_extra_inputs_ignored(backbone, inputs, outputs, f"{name} backbone")
    return backbone


# --------------------------------------------------------------------------- 2. padding


def _stream_inputs(inputs, prefix):
    return {key: value for key, value in inputs.items() if key.startswith(prefix)} \
        if prefix else inputs


def _flip(inputs, prefix):
    """``inputs`` with the rows of stream ``prefix`` reversed along the sequence axis (left
    padding instead of right)."""
    flipped = dict(inputs)
    for key, value in _stream_inputs(inputs, prefix).items():
        flipped[key] = np.flip(value, axis=1).copy()
    return flipped


def _check_pad_ids_ignored(name, backbone, prefix, side):
    """Changing the ids of stream ``prefix``'s padded positions leaves every output stream's
    real positions (and a right-padded pooled output) unchanged."""
    vocabulary = config_value(backbone, "vocabulary_size")
    inputs = backbone_inputs(backbone)
    if side == "left":
        inputs = _flip(inputs, prefix)
    changed = {key: value.copy() for key, value in inputs.items()}
    padded = inputs[prefix + "padding_mask"] == 0
    assert padded.any()
    changed[prefix + "token_ids"][padded] = vocabulary - 1
    if prefix + "segment_ids" in changed:
        changed[prefix + "segment_ids"][padded] = 1
    if "character_ids" in changed and not prefix:
        changed["character_ids"][padded] = CHARACTER_IDS - 1
    a = to_numpy(backbone(inputs, training=False))
    b = to_numpy(backbone(changed, training=False))
    for key, stream in output_streams(backbone).items():
        real = inputs[stream + "padding_mask"] != 0
        np.testing.assert_allclose(
            a[key][real], b[key][real], rtol=0, atol=INVARIANCE_ATOL,
            err_msg=f"{name}: padding of {prefix or 'the'} input changed real positions of "
                    f"{key} ({side} padding)")
    # A pooler reads position 0 ([CLS]), which left padding makes a padded position.
    if "pooled_output" in a and side == "right":
        np.testing.assert_allclose(
            a["pooled_output"], b["pooled_output"], rtol=0, atol=INVARIANCE_ATOL,
            err_msg=f"{name}: padding changed pooled_output ({side} padding)")


def _changed_token(inputs, key, row, position, vocabulary):
    changed = {name: value.copy() for name, value in inputs.items()}
    changed[key][row, position] = changed[key][row, position] % (vocabulary - 1) + 1
    if "character_ids" in changed and key == "token_ids":
        changed["character_ids"][row, position] = \
            changed["character_ids"][row, position] % (CHARACTER_IDS - 1) + 1
    return changed


def _check_per_token(name, backbone):
    """An embedding backbone without a padding mask: a token changes its own position's
    output and no other."""
    vocabulary = config_value(backbone, "vocabulary_size")
    inputs = backbone_inputs(backbone, lengths=(SEQ, SEQ))
    changed = _changed_token(inputs, "token_ids", 0, 3, vocabulary)
    a = to_numpy(backbone(inputs, training=False))["sequence_output"]
    b = to_numpy(backbone(changed, training=False))["sequence_output"]
    others = np.ones(SEQ, bool)
    others[3] = False
    np.testing.assert_allclose(a[:, others], b[:, others], rtol=0, atol=INVARIANCE_ATOL,
                               err_msg=f"{name}: a token changed another position's output")
    np.testing.assert_allclose(a[1], b[1], rtol=0, atol=INVARIANCE_ATOL,
                               err_msg=f"{name}: a token changed another row's output")
    assert not np.allclose(a[0, 3], b[0, 3], atol=1e-6), (
        f"{name}: outputs do not depend on the token ids")


def check_padding_invariance(name, backbone=None):
    """Changing the ids (and segment ids, character ids) of padded positions leaves the
    outputs at real positions unchanged, with the padding on the right and on the left of
    the rows (and the pooled output, with right padding), on each input stream. Not
    vacuous: a real token's id changes the outputs (an encoder-decoder's source token, its
    decoder outputs too), and a bidirectional model's first position sees a later token."""
    backbone = backbone if backbone is not None else build_tiny(name)
    _check_family_inputs(name, backbone)
    arch = models.get(name)
    names = input_names(backbone)
    if arch.family == "embedding" and "padding_mask" not in names:
        _check_per_token(name, backbone)
        return
    prefixes = ("encoder_", "decoder_") if arch.family == "encoder_decoder" else ("",)
    for prefix in prefixes:
        for side in ("right", "left"):
            _check_pad_ids_ignored(name, backbone, prefix, side)
    # Row 0 has no padding: change its last token(s).
    vocabulary = config_value(backbone, "vocabulary_size")
    inputs = backbone_inputs(backbone)
    a = to_numpy(backbone(inputs, training=False))
    for prefix in prefixes:
        changed = _changed_token(inputs, prefix + "token_ids", 0, SEQ - 1, vocabulary)
        c = to_numpy(backbone(changed, training=False))
        key = "decoder_sequence_output" if prefix else "sequence_output"
        if prefix == "encoder_":
            assert not np.allclose(a[key][0, -1], c[key][0, -1], atol=1e-6), (
                f"{name}: the decoder outputs do not depend on the source tokens")
            continue
        assert not np.allclose(a[key][0, -1], c[key][0, -1], atol=1e-6), (
            f"{name}: outputs do not depend on the token ids")
        if arch.family in ("encoder", "recurrent") and not arch.causal:
            assert not np.allclose(a[key][0, 0], c[key][0, 0], atol=1e-6), (
                f"{name}: a bidirectional model's first position does not see a later token")


def check_request_length(name, backbone=None):
    """Serving at the request's length (models/request_length.py): the backbone called on
    inputs cut after the batch's longest row, at the architecture's
    ``serving_length_multiple``, gives the full-length call's outputs at every real position
    and the same pooled output (at most ``INVARIANCE_ATOL``). An architecture registering
    None is always served at its packed length (its own tests show why)."""
    from lmfactory.models.request_length import (call_on_longest, longest_length,
                                                 serving_multiple)

    backbone = backbone if backbone is not None else build_tiny(name)
    if "padding_mask" not in input_names(backbone):  # encoder-decoders: generators only
        assert _family(name) in ("encoder_decoder", "embedding"), name
        return
    multiple = models.get(name).serving_length_multiple
    if multiple is None:  # served at the packed length; its own tests say why
        assert serving_multiple(backbone) is None
        return
    seq = 3 * multiple
    inputs = backbone_inputs(backbone, lengths=(5, 3), seq=seq)
    full = to_numpy(backbone(inputs, training=False))
    tensors = {key: tf.constant(value) for key, value in inputs.items()}
    length = int(longest_length(tensors["padding_mask"], multiple))
    assert length < seq, (name, length)
    real = inputs["padding_mask"][:, :length] != 0
    cut = to_numpy(call_on_longest(backbone, tensors, multiple))
    differences = {}
    for key, expected in full.items():
        answered = cut[key]
        # a per-position output (its sequence axis: 1, or 2 for ELMo's [B, layers, T, H])
        axes = [axis for axis in range(1, expected.ndim)
                if expected.shape[axis] == seq and answered.shape[axis] == length]
        if axes:
            expected = np.moveaxis(np.take(expected, range(length), axis=axes[0]),
                                   axes[0], 1)[real]
            answered = np.moveaxis(answered, axes[0], 1)[real]
        assert expected.shape == answered.shape, f"{name}: {key} is {answered.shape} when cut"
        differences[key] = float(np.max(np.abs(expected - answered)))
    assert max(differences.values()) <= INVARIANCE_ATOL, (
        f"{name}: outputs at the request's length differ from the full length's: "
        f"{differences}")


# --------------------------------------------------------------------------- 3. causal


def is_causal(name) -> bool:
    """Whether the causal check applies: causal architectures and encoder-decoders (their
    decoder)."""
    arch = models.get(name)
    return bool(arch.causal) or arch.family == "encoder_decoder"


def check_causal_mask(name, backbone=None, position=6):
    """Causal architectures (and every encoder-decoder's decoder): changing the token at
    ``position`` leaves every earlier position's output unchanged, and changes its own (the
    check is not vacuous)."""
    if not is_causal(name):
        return
    backbone = backbone if backbone is not None else build_tiny(name)
    prefix = "decoder_" if _family(name) == "encoder_decoder" else ""
    key = prefix + "sequence_output"
    inputs = backbone_inputs(backbone, lengths=(SEQ, SEQ))
    vocabulary = config_value(backbone, "vocabulary_size")
    changed = inputs
    for row in range(BATCH):
        changed = _changed_token(changed, prefix + "token_ids", row, position, vocabulary)
    a = to_numpy(backbone(inputs, training=False))[key]
    b = to_numpy(backbone(changed, training=False))[key]
    np.testing.assert_allclose(a[:, :position], b[:, :position], rtol=0,
                               atol=INVARIANCE_ATOL,
                               err_msg=f"{name}: a later token changed earlier outputs")
    assert not np.allclose(a[:, position], b[:, position], atol=1e-6), (
        f"{name}: changing token {position} did not change its own output")


# --------------------------------------------------------------------------- 4. config


def check_config_round_trip(name, backbone=None):
    """``backbone_cls.from_config(get_config())`` rebuilds the same config; with the
    weights copied it computes identical outputs."""
    backbone = backbone if backbone is not None else build_tiny(name)
    arch = models.get(name)
    config = backbone.get_config()
    json.loads(json.dumps(config))  # plain JSON, as save_checkpoint writes it
    clone = arch.backbone_cls.from_config(config)
    assert clone.get_config() == config, f"{name}: config changed in the round trip"
    clone.set_weights(backbone.get_weights())
    inputs = backbone_inputs(backbone)
    assert_outputs_close(backbone(inputs, training=False), clone(inputs, training=False),
                         what=f"{name} from_config")


# --------------------------------------------------------------------------- 5. save/load


def check_checkpoint_round_trip(name, tmp_path, backbone=None):
    """`models.save_checkpoint` / `models.load_checkpoint`, and a ``.keras`` file through
    ``keras.saving``, restore a backbone with identical outputs."""
    backbone = backbone if backbone is not None else build_tiny(name)
    arch = models.get(name)
    inputs = backbone_inputs(backbone)
    expected = backbone(inputs, training=False)

    folder = os.path.join(os.fspath(tmp_path), f"{name}_checkpoint")
    models.save_checkpoint(backbone, folder, preset=smallest_preset(name))
    assert models.checkpoint_format(folder) == "lmfactory"
    loaded = models.load_checkpoint(name, folder)
    assert type(loaded) is arch.backbone_cls
    assert loaded.get_config() == backbone.get_config()
    assert_outputs_close(expected, loaded(inputs, training=False),
                         what=f"{name} load_checkpoint")

    path = os.path.join(os.fspath(tmp_path), f"{name}_backbone.keras")
    backbone.save(path)
    restored = keras.saving.load_model(path)
    assert type(restored) is arch.backbone_cls
    assert_outputs_close(expected, restored(inputs, training=False),
                         what=f"{name} keras.saving")


# --------------------------------------------------------------------------- 7. export


def serving_module(backbone):
    """The backbone in a `tf.Module` with a ``serve`` `tf.function` over int32 inputs named
    as the backbone's, of their ranks ([batch, seq], or [batch, seq, characters])."""
    signature = {key: tf.TensorSpec([None] * len(spec.shape), tf.int32, name=key)
                 for key, spec in backbone.input.items()}
    module = tf.Module()
    module.backbone = backbone

    @tf.function(input_signature=[signature], autograph=False)  # as the serving exports
    def serve(inputs):
        return dict(backbone(inputs, training=False))

    module.serve = serve
    return module


def check_export(name, tmp_path, backbone=None):
    """A SavedModel of the serving module, reloaded, computes the Keras outputs."""
    backbone = backbone if backbone is not None else build_tiny(name)
    inputs = backbone_inputs(backbone)
    expected = to_numpy(backbone(inputs, training=False))
    path = os.path.join(os.fspath(tmp_path), f"{name}_saved_model")
    module = serving_module(backbone)
    saved_model.save(module, path, {"serving_default": module.serve})
    reloaded = tf.saved_model.load(path)
    tensors = {key: tf.constant(value) for key, value in inputs.items()}
    served = to_numpy(reloaded.signatures["serving_default"](**tensors))
    assert set(served) == set(expected), (name, sorted(served), sorted(expected))
    assert_outputs_close(expected, served, atol=EXPORT_ATOL, what=f"{name} serving_default")
    in_session = run_in_session(path, "serving_default", inputs)
    assert_outputs_close(expected, in_session, atol=EXPORT_ATOL,
                         what=f"{name} serving_default in a Session (TF Serving's loader path)")


def run_in_session(path, signature_name, inputs):
    """Runs a signature as TF Serving does: the MetaGraph imported into a fresh graph, the
    variables restored by the saver's restore op, the SignatureDef run by tensor names."""
    graph = tf.Graph()
    with tf.compat.v1.Session(graph=graph) as session:
        meta_graph = tf.compat.v1.saved_model.loader.load(session, ["serve"], path)
        signature = meta_graph.signature_def[signature_name]
        feeds = {signature.inputs[key].name: value for key, value in inputs.items()}
        names = sorted(signature.outputs)
        values = session.run([signature.outputs[key].name for key in names], feeds)
    return dict(zip(names, values))


def generation_kind(name):
    """The head that generates: ``seq2seq_lm`` for an encoder-decoder, else ``causal_lm``;
    None when the architecture has no such head."""
    arch = models.get(name)
    kind = "seq2seq_lm" if arch.family == "encoder_decoder" else "causal_lm"
    return kind if arch.has_head(kind) else None


def _naive_greedy(lm, prompt, max_length, source):
    """Greedy decoding without a decoding state: each step re-runs the whole prefix through
    the head and appends the argmax of the last position's logits."""
    token_ids = np.asarray(prompt)
    prefix = "decoder_" if source else ""
    while token_ids.shape[1] < max_length:
        inputs = {prefix + "token_ids": token_ids,
                  prefix + "padding_mask": np.ones_like(token_ids)}
        inputs.update(source)
        logits = np.asarray(_logits(lm(inputs, training=False), "naive decoding"))
        following = logits[:, -1].argmax(axis=-1).astype("int32")
        token_ids = np.concatenate([token_ids, following[:, None]], axis=1)
    return token_ids


def check_generation(name, backbone=None, max_length=6):
    """Architectures with a ``causal_lm`` head (``seq2seq_lm`` for an encoder-decoder, the
    source given as ``state_context``): greedy `generate_ids` of a 2-token prompt (a
    1-token decoder prompt) to ``max_length`` is deterministic, keeps the prompt and equals
    the naive loop that re-runs the whole prefix each step (cached == uncached)."""
    kind = generation_kind(name)
    if kind is None:
        return
    backbone = backbone if backbone is not None else build_tiny(name)
    head = models.get(name).head(kind)
    lm = head(backbone, **schedule_args(head))
    vocabulary = config_value(backbone, "vocabulary_size")
    source, context = {}, None
    if kind == "seq2seq_lm":
        prompt = np.array([[5], [9 % vocabulary]], dtype="int32")
        source = make_inputs(["encoder_token_ids", "encoder_padding_mask"], vocabulary)
        context = {key: tf.constant(value) for key, value in source.items()}
    else:
        prompt = np.array([[5, 7], [9 % vocabulary, 11 % vocabulary]], dtype="int32")
    first = to_numpy(lm.generate_ids(prompt, max_length=max_length, sampler="greedy",
                                     state_context=context))
    second = to_numpy(lm.generate_ids(prompt, max_length=max_length, sampler="greedy",
                                      state_context=context))
    assert first["token_ids"].shape == (BATCH, max_length), first["token_ids"].shape
    np.testing.assert_array_equal(first["token_ids"], second["token_ids"])
    np.testing.assert_array_equal(first["token_ids"][:, :prompt.shape[1]], prompt)
    assert first["token_ids"].min() >= 0 and first["token_ids"].max() < vocabulary
    np.testing.assert_array_equal(
        first["token_ids"], _naive_greedy(lm, prompt, max_length, source),
        err_msg=f"{name}: cached greedy decoding differs from re-running the prefix")


# --------------------------------------------------------------------------- 8. heads


def _logits(outputs, what):
    if isinstance(outputs, dict):
        assert "logits" in outputs, f"{what}: outputs {sorted(outputs)} lack 'logits'"
        return outputs["logits"]
    return outputs


def build_head(name, kind, backbone):
    """``head(backbone, **arguments)`` of ``kind``; a head that needs a teacher gets one
    built from another registered architecture (its classification head)."""
    arch = models.get(name)
    if kind not in HEAD_ARGUMENTS:
        raise NotImplementedError(
            f"{name}: the conformance harness does not know task kind {kind!r} (known: "
            f"{sorted(HEAD_ARGUMENTS)}); add its arguments and output shapes to "
            f"tests/conformance/harness.py")
    head = arch.head(kind)
    arguments = {**HEAD_ARGUMENTS[kind], **schedule_args(head)}
    if kind == "classification_distillation" or getattr(head, "needs_teacher", False):
        model, _ = build_with_teacher(
            name, lambda teacher: head(backbone, teacher=teacher, **arguments),
            _teacher_classifier)
        return model
    return head(backbone, **arguments)


def check_head(name, kind, backbone=None):
    """The ``kind`` head builds on the tiny backbone and gives outputs whose leading shape
    is the kind's: classification [B, K] logits; causal_lm and seq2seq_lm (over the decoder
    positions) [B, T, V]; tagging [B, T, L];
    span_qa start / end logits [B, T]; multiple_choice [B, C];
    classification_distillation the student's logits [B, K] (and a ``classifier``)."""
    backbone = backbone if backbone is not None else build_tiny(name)
    model = build_head(name, kind, backbone)
    vocabulary = config_value(backbone, "vocabulary_size")
    what = f"{name} {kind} head"
    leading = (NUM_CHOICES,) if kind == "multiple_choice" else ()
    names = head_input_names(model, backbone)
    # A head with inputs of its own (KagNet's graph) makes them: `synthetic_inputs(batch)`.
    own = model.synthetic_inputs(BATCH) if hasattr(model, "synthetic_inputs") else {}
    inputs = make_inputs([name for name in names if name not in own], vocabulary,
                         leading=leading, characters_per_token=characters_per_token(backbone),
                         extra=extra_input_maker(backbone))
    inputs.update(own)
    outputs = model(inputs, training=False)
    if kind in ("classification", "classification_distillation"):
        logits = _logits(outputs, what)
        assert tuple(logits.shape) == (BATCH, NUM_CLASSES), (what, tuple(logits.shape))
        if kind == "classification_distillation":
            assert hasattr(model, "classifier"), f"{what}: no `classifier` to export"
    elif kind in ("causal_lm", "seq2seq_lm"):
        logits = _logits(outputs, what)
        assert tuple(logits.shape) == (BATCH, SEQ, vocabulary), (what, tuple(logits.shape))
    elif kind == "tagging":
        logits = _logits(outputs, what)
        assert tuple(logits.shape)[:2] == (BATCH, SEQ), (what, tuple(logits.shape))
        assert tuple(logits.shape)[-1] == NUM_LABELS, (what, tuple(logits.shape))
    elif kind == "span_qa":
        assert isinstance(outputs, dict), f"{what}: outputs are not a dict"
        for key in ("start_logits", "end_logits"):
            assert tuple(outputs[key].shape) == (BATCH, SEQ), (what, key,
                                                               tuple(outputs[key].shape))
    elif kind == "multiple_choice":
        logits = _logits(outputs, what)
        assert tuple(logits.shape) == (BATCH, NUM_CHOICES), (what, tuple(logits.shape))
    for value in (outputs.values() if isinstance(outputs, dict) else [outputs]):
        if "float" in str(value.dtype):
            assert np.all(np.isfinite(np.asarray(value))), f"{what}: non-finite outputs"
    check_extra_inputs_ignored(model, inputs, outputs, what)


def check_extra_inputs_ignored(model, inputs, outputs, what):
    """A batch may carry entries the model does not take: every `mlm` record and every
    sentence-pair batch has ``segment_ids`` (CONTRACTS §3), and a TFX transform may add
    features. Keras flattens a dict of inputs in sorted-key order, so a functional model
    given an extra key that sorts before its own would read each tensor at the wrong input.
    Called with ``segment_ids`` (when it lacks them) and a key that sorts first, the model
    gives the same outputs."""
    token_like = next((inputs[name] for name in sorted(inputs) if name.endswith("token_ids")),
                      None)
    if token_like is None:
        return
    with_extra = dict(inputs)
    with_extra["a_feature_the_model_ignores"] = np.full_like(np.asarray(token_like), 7)
    with_extra.setdefault("segment_ids", np.ones_like(np.asarray(token_like)))
    assert_outputs_close(model(with_extra, training=False), outputs, atol=1e-6,
                         what=f"{what} given inputs it does not take")


def check_heads(name, backbone=None):
    """`check_head` for every task kind the architecture has a head for."""
    backbone = backbone if backbone is not None else build_tiny(name)
    for kind in models.get(name).task_kinds:
        check_head(name, kind, backbone)


# --------------------------------------------------------------------------- runners


def run_backbone_checks(name, tmp_path, backbone=None):
    """Checks 1-5 and 7 on one tiny backbone (it is not modified)."""
    backbone = backbone if backbone is not None else build_tiny(name)
    check_forward(name, backbone)
    check_padding_invariance(name, backbone)
    check_causal_mask(name, backbone)
    check_config_round_trip(name, backbone)
    check_checkpoint_round_trip(name, tmp_path, backbone)
    check_export(name, tmp_path, backbone)
    return backbone


def run_task_checks(name, backbone=None):
    """Checks 6 (training, on fresh backbones), 7 (generation) and 8 (heads)."""
    backbone = backbone if backbone is not None else build_tiny(name)
    check_heads(name, backbone)
    check_generation(name, backbone)
    check_pretraining(name)


def run_all_checks(name, tmp_path):
    """Every conformance check on architecture ``name`` (the harness's one entry point)."""
    backbone = run_backbone_checks(name, tmp_path)
    run_task_checks(name, backbone)


__all__ = [
    "build_tiny", "check_causal_mask", "check_checkpoint_round_trip",
    "check_classification_training", "check_config_round_trip", "check_export",
    "check_forward", "check_generation", "check_head", "check_heads",
    "check_padding_invariance", "generation_kind", "is_causal",
    "check_pretraining", "check_pretraining_objective", "make_inputs", "run_all_checks",
    "run_backbone_checks", "run_task_checks", "smallest_preset", "tiny_overrides",
]
