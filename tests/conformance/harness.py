"""The conformance harness: the checks every registered architecture must pass.

In the spirit of keras-hub's ``run_backbone_test``: each check is a plain function of an
architecture's registry name (and a scratch folder where it writes files), so the
parametrised tests (``test_conformance.py``, one case per ``models.names()`` entry) and the
acceptance test of a temporary architecture registered at test time
(``test_toy_architecture.py``) run exactly the same code. Nothing here names a shipped
architecture: everything is read from its `Architecture` record (family, presets,
objectives, heads, tokenizer kind) and from the backbone itself (``backbone.input`` keys,
``get_config()``).

Sizes: `tiny_overrides` derives a tiny configuration from the architecture's smallest
preset (vocabulary 100, at most 2 layers, width 16 with 2 heads, feed-forward 32, 32
positions), overriding only the constructor arguments the preset itself sets and
``models.backbone_arguments`` accepts. A backbone class may add a class attribute
``conformance_overrides`` (a dict, or a function of the derived overrides returning a dict)
when a derived size breaks one of its own invariants; no shipped architecture needs it.

Checks (`run_all_checks` runs them all; ``test_conformance.py`` runs each as its own test):

* ``forward``: builds; ``sequence_output`` [B, T, hidden] float (``pooled_output``
  [B, hidden] where present); a shorter sequence works too.
* ``padding``: outputs at real positions ignore the ids (and segment ids) of padded
  positions, right or left padded; encoders see later tokens.
* ``causal``: decoders: changing token t leaves positions < t unchanged (and changes t).
* ``config``: ``from_config(get_config())`` gives the same config and, with the weights
  copied, identical outputs; the config is JSON.
* ``checkpoint``: ``models.save_checkpoint`` / ``models.load_checkpoint`` and a ``.keras``
  save / ``keras.saving.load_model`` give identical outputs.
* ``pretraining``: each pretraining objective's task model, on a synthetic batch in the
  objective's ``make_dataset`` format, has a lower loss after a few Adam steps (a teacher,
  when the task model needs one, is built from another registered architecture with the
  same tokenizer kind); the classification head likewise on labels [B].
* ``export``: the backbone in a `tf.Module` with a ``tf.function`` serving signature,
  ``tf.saved_model.save``d and reloaded, gives the Keras outputs (1e-5).
* ``generation``: decoders with a ``causal_lm`` head: greedy ``generate_ids`` of a 2-token
  prompt to length 6 is deterministic and starts with the prompt.
* ``heads``: every task kind the architecture has a head for builds on the tiny backbone
  and gives outputs of the documented leading shape.
"""

from __future__ import annotations

import json
import os

import keras
import numpy as np
import tensorflow as tf

from lmfactory import models

BATCH = 2
SEQ = 12
LENGTHS = (12, 7)  # real tokens per row: one full row, one right-padded
NUM_PREDICTIONS = 3  # masked-LM predictions per row
NUM_CLASSES = 3
NUM_LABELS = 5
NUM_CHOICES = 2
TRAIN_STEPS = 5
LEARNING_RATE = 1e-2
# The training checks run the train steps eagerly: the same `train_step` / `compute_loss`
# code and the same losses as in a `tf.function` (checked when this was written), at a
# third of the time, since tracing a train function costs more than five tiny steps. The
# graph and XLA paths of training are the trainer's tests' business; the export check
# traces every backbone in a `tf.function`.
RUN_EAGERLY = True
EXPORT_ATOL = 1e-5
INVARIANCE_ATOL = 1e-5

# The tiny sizes. Keys are constructor arguments; only those the smallest preset sets are
# overridden. Sizes below the preset's own are taken, never larger ones.
TINY_VOCABULARY = 100
TINY_LAYERS = 2
TINY_HIDDEN = 16
TINY_HEADS = 2
TINY_INTERMEDIATE = 32
TINY_EMBEDDING = 8  # where the preset's embedding size differs from its width
TINY_POSITIONS = 32
TINY_WINDOW = 4  # local attention bands / windows: smaller than SEQ so they matter
SEED = 1234

# Kind -> the arguments the harness gives the head (registry.Architecture.heads).
HEAD_ARGUMENTS = {
    "classification": {"num_classes": NUM_CLASSES},
    "classification_distillation": {"num_classes": NUM_CLASSES},
    "tagging": {"num_labels": NUM_LABELS},
    "span_qa": {},
    "multiple_choice": {"num_choices": NUM_CHOICES},
    "causal_lm": {},
}


# --------------------------------------------------------------------------- sizes


def _preset_size(config: dict) -> float:
    """A rough parameter count of a preset, to find the smallest one."""
    hidden = config.get("hidden_dim") or config.get("embedding_dim") or 1
    intermediate = config.get("intermediate_dim") or 4 * hidden
    layers = config.get("num_layers") or 1
    vocabulary = config.get("vocabulary_size") or 1
    return layers * hidden * (4 * hidden + 2 * intermediate) + vocabulary * hidden


def smallest_preset(name: str) -> str:
    presets = models.get(name).presets
    return min(presets, key=lambda preset: _preset_size(presets[preset]))


def tiny_overrides(name: str) -> dict:
    """Constructor overrides that make architecture ``name``'s smallest preset tiny.

    Derived from the preset's own keys: the vocabulary, layers, width, heads, feed-forward
    size, embedding size (kept equal to the width where the preset has them equal), head size
    (kept None where the preset leaves it to width / heads), positions, and local attention
    bands or windows. Every other argument (dropout, activation, sharing, segments, ...)
    keeps the preset's value.
    """
    arch = models.get(name)
    preset = dict(arch.presets[smallest_preset(name)])
    allowed = set(models.backbone_arguments(name))
    hidden = min(TINY_HIDDEN, preset.get("hidden_dim", TINY_HIDDEN))
    heads = min(TINY_HEADS, preset.get("num_heads", TINY_HEADS))
    while hidden % heads:
        heads -= 1
    overrides = {}

    def shrink(key, value):
        if key in preset and key in allowed and isinstance(preset[key], int) \
                and not isinstance(preset[key], bool):
            overrides[key] = min(value, preset[key])

    shrink("vocabulary_size", TINY_VOCABULARY)
    shrink("num_layers", TINY_LAYERS)
    shrink("hidden_dim", hidden)
    shrink("num_heads", heads)
    shrink("intermediate_dim", TINY_INTERMEDIATE)
    shrink("max_sequence_length", TINY_POSITIONS)
    if "embedding_dim" in preset and "embedding_dim" in allowed:
        same_as_hidden = preset["embedding_dim"] == preset.get("hidden_dim")
        overrides["embedding_dim"] = hidden if same_as_hidden else min(
            TINY_EMBEDDING, preset["embedding_dim"])
    if "head_dim" in preset and "head_dim" in allowed and preset["head_dim"] is not None:
        overrides["head_dim"] = hidden // heads
    for key, value in preset.items():
        if key in allowed and key not in overrides and isinstance(value, int) \
                and not isinstance(value, bool) and ("band" in key or "window" in key):
            overrides[key] = min(TINY_WINDOW, value)
    hook = getattr(arch.backbone_cls, "conformance_overrides", None)
    if callable(hook):
        overrides.update(hook(dict(overrides)))
    elif hook:
        overrides.update(hook)
    unknown = sorted(set(overrides) - allowed)
    if unknown:
        raise ValueError(f"{name}: conformance overrides {unknown} are not constructor "
                         f"arguments of {arch.backbone_cls.__name__}")
    return overrides


def build_tiny(name: str, seed: int = SEED):
    """A freshly initialised tiny backbone of architecture ``name``."""
    keras.utils.set_random_seed(seed)
    return models.build(name, smallest_preset(name), **tiny_overrides(name))


def config_value(backbone, key, default=None):
    return backbone.get_config().get(key, default)


# --------------------------------------------------------------------------- inputs


def input_names(model) -> list:
    """The input names of a functional Keras model (a backbone or a head)."""
    inputs = model.input
    if not isinstance(inputs, dict):
        raise TypeError(f"{type(model).__name__} must take a dict of named inputs (keras-hub "
                        f"names: token_ids, padding_mask, segment_ids), got {inputs!r}")
    return list(inputs)


def head_input_names(model, backbone) -> list:
    """A functional head's input names; a subclassed one (never called yet, no ``input``)
    takes its backbone's."""
    try:
        inputs = model.input
    except (AttributeError, ValueError):
        inputs = None
    return list(inputs) if isinstance(inputs, dict) else input_names(backbone)


def padding_mask(lengths=LENGTHS, seq=SEQ) -> np.ndarray:
    return (np.arange(seq)[None, :] < np.asarray(lengths)[:, None]).astype("int32")


def make_inputs(names, vocabulary_size, seed=0, lengths=LENGTHS, seq=SEQ, leading=()):
    """Synthetic int32 inputs named ``names``: random ``token_ids`` (0 on padding),
    ``padding_mask`` with ``lengths`` real tokens per row, ``segment_ids`` (a second segment
    from the middle of the row, 0 on padding), ``span_mask`` (the real tokens).
    ``leading`` adds axes after the batch (e.g. the choices of multiple choice)."""
    rng = np.random.default_rng(seed)
    mask = padding_mask(lengths, seq)
    shape = (len(lengths), *leading, seq)
    mask = np.broadcast_to(mask.reshape(len(lengths), *([1] * len(leading)), seq), shape)
    values = {}
    for name in names:
        if name == "token_ids":
            values[name] = (rng.integers(1, vocabulary_size, shape) * mask).astype("int32")
        elif name == "padding_mask":
            values[name] = mask.astype("int32").copy()
        elif name == "segment_ids":
            values[name] = ((np.arange(seq) >= seq // 2).astype("int32") * mask).astype("int32")
        elif name == "span_mask":
            values[name] = mask.astype("int32").copy()
        else:
            raise ValueError(f"The conformance harness does not know how to make the input "
                             f"{name!r}; known: token_ids, padding_mask, segment_ids, "
                             f"span_mask (extend tests/conformance/harness.py make_inputs)")
    return values


def backbone_inputs(backbone, seed=0, lengths=LENGTHS, seq=SEQ):
    return make_inputs(input_names(backbone), config_value(backbone, "vocabulary_size"),
                       seed=seed, lengths=lengths, seq=seq)


def to_numpy(outputs):
    if isinstance(outputs, dict):
        return {key: to_numpy(value) for key, value in outputs.items()}
    return np.asarray(outputs)


def assert_outputs_close(a, b, atol=0.0, what="outputs"):
    a, b = to_numpy(a), to_numpy(b)
    if isinstance(a, dict):
        assert set(a) == set(b), f"{what}: keys {sorted(a)} != {sorted(b)}"
        for key in a:
            assert_outputs_close(a[key], b[key], atol, f"{what}[{key!r}]")
    else:
        assert a.shape == b.shape, f"{what}: shapes {a.shape} != {b.shape}"
        np.testing.assert_allclose(a, b, rtol=0, atol=atol, err_msg=what)


def _family(name):
    return models.get(name).family


def _require_transformer_family(name):
    family = _family(name)
    if family not in ("encoder", "decoder"):
        raise NotImplementedError(
            f"{name}: the conformance harness checks encoder and decoder backbones "
            f"(keras-hub inputs, `sequence_output`); family {family!r} needs its own checks "
            f"in tests/conformance/harness.py")


# --------------------------------------------------------------------------- 1. forward


def check_forward(name, backbone=None):
    """The backbone builds and maps the keras-hub inputs to float outputs of the right
    shapes: ``sequence_output`` [B, T, hidden], ``pooled_output`` [B, hidden] if any."""
    _require_transformer_family(name)
    backbone = backbone if backbone is not None else build_tiny(name)
    names = input_names(backbone)
    assert "token_ids" in names, f"{name}: backbone inputs {names} lack token_ids"
    for spec in backbone.input.values():
        assert spec.dtype == "int32", f"{name}: input {spec.name} is {spec.dtype}, not int32"
    hidden = config_value(backbone, "hidden_dim")
    for seq in (SEQ, 5):
        outputs = backbone(backbone_inputs(backbone, seq=seq, lengths=(seq, seq - 2)))
        assert isinstance(outputs, dict), f"{name}: outputs are {type(outputs)}, not a dict"
        assert "sequence_output" in outputs, f"{name}: outputs {sorted(outputs)}"
        sequence = outputs["sequence_output"]
        width = hidden if hidden is not None else sequence.shape[-1]
        assert tuple(sequence.shape) == (BATCH, seq, width), (name, tuple(sequence.shape))
        assert "float" in str(sequence.dtype), (name, sequence.dtype)
        assert np.all(np.isfinite(np.asarray(sequence))), f"{name}: non-finite outputs"
        if "pooled_output" in outputs:
            pooled = outputs["pooled_output"]
            assert tuple(pooled.shape) == (BATCH, width), (name, tuple(pooled.shape))
            assert "float" in str(pooled.dtype), (name, pooled.dtype)
    return backbone


# --------------------------------------------------------------------------- 2. padding


def check_padding_invariance(name, backbone=None):
    """Changing the ids (and segment ids) of padded positions leaves the outputs at real
    positions unchanged, with the padding on the right and on the left of the rows (and
    the pooled output, with right padding). Not vacuous: a real token's id does change the outputs, and in an
    encoder a later token changes the first position's output (it is bidirectional)."""
    _require_transformer_family(name)
    backbone = backbone if backbone is not None else build_tiny(name)
    names = input_names(backbone)
    assert "padding_mask" in names, f"{name}: backbone has no padding_mask input"
    vocabulary = config_value(backbone, "vocabulary_size")
    for side in ("right", "left"):
        inputs = backbone_inputs(backbone)
        if side == "left":
            inputs = {key: value[:, ::-1].copy() for key, value in inputs.items()}
        changed = {key: value.copy() for key, value in inputs.items()}
        padded = inputs["padding_mask"] == 0
        assert padded.any()
        changed["token_ids"][padded] = vocabulary - 1
        if "segment_ids" in changed:
            changed["segment_ids"][padded] = 1
        a = to_numpy(backbone(inputs, training=False))
        b = to_numpy(backbone(changed, training=False))
        real = ~padded
        np.testing.assert_allclose(
            a["sequence_output"][real], b["sequence_output"][real], rtol=0,
            atol=INVARIANCE_ATOL,
            err_msg=f"{name}: padding changed real positions ({side} padding)")
        # A pooler reads position 0 ([CLS]), which left padding makes a padded position.
        if "pooled_output" in a and side == "right":
            np.testing.assert_allclose(
                a["pooled_output"], b["pooled_output"], rtol=0, atol=INVARIANCE_ATOL,
                err_msg=f"{name}: padding changed pooled_output ({side} padding)")
    # Row 0 has no padding: change its last token.
    inputs = backbone_inputs(backbone)
    changed = {key: value.copy() for key, value in inputs.items()}
    changed["token_ids"][0, -1] = (changed["token_ids"][0, -1] + 1) % vocabulary
    a = to_numpy(backbone(inputs, training=False))["sequence_output"]
    c = to_numpy(backbone(changed, training=False))["sequence_output"]
    assert not np.allclose(a[0, -1], c[0, -1], atol=1e-6), (
        f"{name}: outputs do not depend on the token ids")
    if _family(name) == "encoder":
        assert not np.allclose(a[0, 0], c[0, 0], atol=1e-6), (
            f"{name}: an encoder's first position does not see a later token")


# --------------------------------------------------------------------------- 3. causal


def check_causal_mask(name, backbone=None, position=6):
    """Decoders: changing the token at ``position`` leaves every earlier position's output
    unchanged, and changes its own (the check is not vacuous)."""
    if _family(name) != "decoder":
        return
    backbone = backbone if backbone is not None else build_tiny(name)
    inputs = backbone_inputs(backbone, lengths=(SEQ, SEQ))
    changed = {key: value.copy() for key, value in inputs.items()}
    vocabulary = config_value(backbone, "vocabulary_size")
    changed["token_ids"][:, position] = (changed["token_ids"][:, position] + 1) % vocabulary
    a = to_numpy(backbone(inputs, training=False))["sequence_output"]
    b = to_numpy(backbone(changed, training=False))["sequence_output"]
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


# --------------------------------------------------------------------------- 6. training


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


def check_loss_decreases(model, x, y, sample_weight=None, what="task model"):
    """Compiles ``model`` with Adam (a loss only where it does not compute its own) and
    checks that `TRAIN_STEPS` steps on the one fixed batch lower its loss."""
    if computes_own_loss(model):
        model.compile(optimizer=keras.optimizers.Adam(LEARNING_RATE), run_eagerly=RUN_EAGERLY)
    else:
        model.compile(optimizer=keras.optimizers.Adam(LEARNING_RATE),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      run_eagerly=RUN_EAGERLY)
    before = _loss(model, x, y, sample_weight)
    batch = (x, y) if sample_weight is None else (x, y, sample_weight)
    dataset = tf.data.Dataset.from_tensors(batch).repeat(TRAIN_STEPS)
    model.fit(dataset, epochs=1, verbose=0)
    after = _loss(model, x, y, sample_weight)
    assert np.isfinite(before) and np.isfinite(after), (what, before, after)
    assert after < before, f"{what}: loss {before:.4f} -> {after:.4f} after {TRAIN_STEPS} steps"
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
                    config_value(backbone, "vocabulary_size"))
    labels = np.array([0, 2], dtype="int32")
    return check_loss_decreases(classifier, x, labels, what=f"{name} classification")


def check_pretraining(name):
    """`check_pretraining_objective` for every objective the architecture trains, then
    `check_classification_training`."""
    results = {objective: check_pretraining_objective(name, objective)
               for objective in models.get(name).objectives}
    results["classification"] = check_classification_training(name)
    return results


# --------------------------------------------------------------------------- 7. export


def serving_module(backbone):
    """The backbone in a `tf.Module` with a ``serve`` `tf.function` over int32
    [batch, seq] inputs named as the backbone's."""
    signature = {key: tf.TensorSpec([None, None], tf.int32, name=key)
                 for key in input_names(backbone)}
    module = tf.Module()
    module.backbone = backbone

    @tf.function(input_signature=[signature])
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
    tf.saved_model.save(module, path, signatures={"serving_default": module.serve})
    reloaded = tf.saved_model.load(path)
    tensors = {key: tf.constant(value) for key, value in inputs.items()}
    served = to_numpy(reloaded.serve(tensors))
    assert set(served) == set(expected), (name, sorted(served), sorted(expected))
    assert_outputs_close(expected, served, atol=EXPORT_ATOL, what=f"{name} SavedModel")
    by_signature = to_numpy(reloaded.signatures["serving_default"](**tensors))
    assert_outputs_close(expected, by_signature, atol=EXPORT_ATOL,
                         what=f"{name} serving_default")


def check_generation(name, backbone=None):
    """Decoders with a ``causal_lm`` head: greedy `generate_ids` of a 2-token prompt to
    length 6 is deterministic and keeps the prompt."""
    arch = models.get(name)
    if arch.family != "decoder" or not arch.has_head("causal_lm"):
        return
    backbone = backbone if backbone is not None else build_tiny(name)
    head = arch.head("causal_lm")
    lm = head(backbone, **schedule_args(head))
    vocabulary = config_value(backbone, "vocabulary_size")
    prompt = np.array([[5, 7], [9 % vocabulary, 11 % vocabulary]], dtype="int32")
    first = to_numpy(lm.generate_ids(prompt, max_length=6, sampler="greedy"))
    second = to_numpy(lm.generate_ids(prompt, max_length=6, sampler="greedy"))
    assert first["token_ids"].shape == (BATCH, 6), first["token_ids"].shape
    np.testing.assert_array_equal(first["token_ids"], second["token_ids"])
    np.testing.assert_array_equal(first["token_ids"][:, :2], prompt)
    assert first["token_ids"].min() >= 0 and first["token_ids"].max() < vocabulary


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
    is the kind's: classification [B, K] logits; causal_lm [B, T, V]; tagging [B, T, L];
    span_qa start / end logits [B, T]; multiple_choice [B, C];
    classification_distillation the student's logits [B, K] (and a ``classifier``)."""
    backbone = backbone if backbone is not None else build_tiny(name)
    model = build_head(name, kind, backbone)
    vocabulary = config_value(backbone, "vocabulary_size")
    what = f"{name} {kind} head"
    leading = (NUM_CHOICES,) if kind == "multiple_choice" else ()
    names = head_input_names(model, backbone)
    inputs = make_inputs(names, vocabulary, leading=leading)
    outputs = model(inputs, training=False)
    if kind in ("classification", "classification_distillation"):
        logits = _logits(outputs, what)
        assert tuple(logits.shape) == (BATCH, NUM_CLASSES), (what, tuple(logits.shape))
        if kind == "classification_distillation":
            assert hasattr(model, "classifier"), f"{what}: no `classifier` to export"
    elif kind == "causal_lm":
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
    "check_forward", "check_generation", "check_head", "check_heads", "check_padding_invariance",
    "check_pretraining", "check_pretraining_objective", "make_inputs", "run_all_checks",
    "run_backbone_checks", "run_task_checks", "smallest_preset", "tiny_overrides",
]
