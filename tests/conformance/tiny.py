"""Tiny sizes and synthetic inputs of the conformance harness (harness.py): the constants,
the tiny configuration derived from an architecture's smallest preset, and the int32 inputs
of every family, read from the backbone itself (its input names and config)."""

from __future__ import annotations

import keras
import numpy as np

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
    "seq2seq_lm": {},
}
# Character ids of character-aware backbones (ELMo's UTF-8 byte ids + 1; 0 on padding).
CHARACTER_IDS = 257
DEFAULT_CHARACTERS_PER_TOKEN = 50
ENCODER_DECODER_INPUTS = ("encoder_token_ids", "encoder_padding_mask", "decoder_token_ids",
                          "decoder_padding_mask")


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


def make_inputs(names, vocabulary_size, seed=0, lengths=LENGTHS, seq=SEQ, leading=(),
                characters_per_token=DEFAULT_CHARACTERS_PER_TOKEN, extra=None):
    """Synthetic int32 inputs named ``names``: random ``token_ids`` (0 on padding),
    ``padding_mask`` with ``lengths`` real tokens per row, ``segment_ids`` (a second segment
    from the middle of the row, 0 on padding), ``span_mask`` (the real tokens),
    ``character_ids`` [..., T, characters_per_token] (random ids in [1, CHARACTER_IDS), 0 on
    padded tokens), and the ``encoder_`` / ``decoder_`` token ids and padding masks of an
    encoder-decoder (both streams ``seq`` long with ``lengths``; the decoder's from another
    seed). ``leading`` adds axes after the batch (e.g. the choices of multiple choice).
    ``extra`` (`extra_input_maker`) makes the inputs a backbone adds beyond these (e.g. an
    entity stream aligned to the tokens)."""
    rng = np.random.default_rng(seed)
    mask = padding_mask(lengths, seq)
    shape = (len(lengths), *leading, seq)
    mask = np.broadcast_to(mask.reshape(len(lengths), *([1] * len(leading)), seq), shape)
    values = {}
    for name in names:
        if name.startswith(("encoder_", "decoder_")):
            stream, base = name.split("_", 1)
            stream_seed = seed if stream == "encoder" else seed + 1
            values[name] = make_inputs([base], vocabulary_size, stream_seed, lengths, seq,
                                       leading)[base]
        elif name == "token_ids":
            values[name] = (rng.integers(1, vocabulary_size, shape) * mask).astype("int32")
        elif name == "padding_mask":
            values[name] = mask.astype("int32").copy()
        elif name == "segment_ids":
            values[name] = ((np.arange(seq) >= seq // 2).astype("int32") * mask).astype("int32")
        elif name == "span_mask":
            values[name] = mask.astype("int32").copy()
        elif name == "character_ids":
            characters = rng.integers(1, CHARACTER_IDS, (*shape, characters_per_token))
            values[name] = (characters * mask[..., None]).astype("int32")
        elif extra is not None and (made := extra(name, mask, rng)) is not None:
            values[name] = np.asarray(made).astype("int32")
        else:
            raise ValueError(f"The conformance harness does not know how to make the input "
                             f"{name!r}; known: token_ids, padding_mask, segment_ids, "
                             f"span_mask, character_ids and the encoder_/decoder_ token ids "
                             f"and padding masks (extend tests/conformance/tiny.py "
                             f"make_inputs, or give the backbone class a "
                             f"`conformance_inputs` hook)")
    return values


def characters_per_token(model) -> int:
    """C of a character-aware model's ``character_ids`` [B, T, C] input."""
    try:
        spec = model.input.get("character_ids") if isinstance(model.input, dict) else None
    except (AttributeError, ValueError):
        spec = None
    if spec is not None and spec.shape[-1] is not None:
        return int(spec.shape[-1])
    config = model.get_config() if hasattr(model, "get_config") else {}
    return int(config.get("max_characters_per_token", DEFAULT_CHARACTERS_PER_TOKEN))


def extra_input_maker(backbone):
    """The maker of the inputs a backbone adds beyond the harness's own, or None.

    A backbone class with more inputs (e.g. ERNIE's entities aligned to its tokens) gives
    itself a ``conformance_inputs(name, real_mask, rng, config)`` static method returning
    an int array of ``real_mask``'s shape for each of its own input names (None for other
    names); ``real_mask`` is 1 at real tokens, ``config`` the backbone's config."""
    hook = getattr(type(backbone), "conformance_inputs", None)
    if hook is None:
        return None
    config = backbone.get_config()
    return lambda name, mask, rng: hook(name, mask, rng, config)


def backbone_inputs(backbone, seed=0, lengths=LENGTHS, seq=SEQ):
    return make_inputs(input_names(backbone), config_value(backbone, "vocabulary_size"),
                       seed=seed, lengths=lengths, seq=seq,
                       characters_per_token=characters_per_token(backbone),
                       extra=extra_input_maker(backbone))


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
