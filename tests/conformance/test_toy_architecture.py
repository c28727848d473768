"""Acceptance test of the registry + harness design: an architecture added as a new model
folder, registered at test time, is run through the conformance harness with no edit
anywhere else.

The test writes a temporary model folder (a package: a tiny Keras backbone made of a
keras-nlp token-and-position embedding and TransformerEncoder blocks, its presets, a
masked-LM pretrainer for the existing objective ``mlm``, a classification head, and an
``__init__`` that registers the `Architecture`) into ``tmp_path``, imports it, runs
`harness.run_all_checks` on it (the same functions the parametrised tests call for the
shipped architectures), and unregisters it. A second folder, whose backbone forgets its
padding mask, shows that the harness catches a broken architecture.
"""

import importlib
import sys
import textwrap
import uuid

import pytest

from lmfactory import models
from lmfactory.models import registry

from . import harness

PRESETS = '''
"""Toy sizes as `ToyBackbone` constructor kwargs."""

TOY_PRESETS = {
    "small": {"vocabulary_size": 1000, "num_layers": 2, "num_heads": 4, "hidden_dim": 64,
              "intermediate_dim": 128, "dropout": 0.1, "max_sequence_length": 128},
    "base": {"vocabulary_size": 30000, "num_layers": 6, "num_heads": 8, "hidden_dim": 256,
             "intermediate_dim": 1024, "dropout": 0.1, "max_sequence_length": 512},
}
'''

BACKBONE = '''
"""A toy encoder: token + position embeddings and keras-nlp TransformerEncoder blocks."""

import keras
import keras_nlp
from keras import ops

from lmfactory.models.backbone import model_inputs

PACKAGE = __name__.split(".")[0]
USE_PADDING_MASK = {use_padding_mask}


@keras.saving.register_keras_serializable(package=PACKAGE)
class ToyBackbone(keras.Model):
    """Inputs: int32 `token_ids`, `padding_mask` [B, T]. Outputs: `sequence_output`
    [B, T, hidden_dim]."""

    def __init__(self, vocabulary_size, num_layers, num_heads, hidden_dim, intermediate_dim,
                 dropout=0.0, max_sequence_length=128, dtype=None, **kwargs):
        if hidden_dim % num_heads:
            raise ValueError(f"hidden_dim ({{hidden_dim}}) must be divisible by num_heads "
                             f"({{num_heads}})")
        self.embeddings = keras_nlp.layers.TokenAndPositionEmbedding(
            vocabulary_size=vocabulary_size, sequence_length=max_sequence_length,
            embedding_dim=hidden_dim, dtype=dtype, name="embeddings")
        self.token_embedding = self.embeddings.token_embedding
        self.transformer_layers = [
            keras_nlp.layers.TransformerEncoder(
                intermediate_dim=intermediate_dim, num_heads=num_heads, dropout=dropout,
                dtype=dtype, name=f"transformer_layer_{{i}}")
            for i in range(num_layers)]
        token_ids = keras.Input(shape=(None,), dtype="int32", name="token_ids")
        padding_mask = keras.Input(shape=(None,), dtype="int32", name="padding_mask")
        x = self.embeddings(token_ids)
        for block in self.transformer_layers:
            x = block(x, padding_mask=padding_mask if USE_PADDING_MASK else None)
        if not USE_PADDING_MASK:  # the broken variant: takes the mask, attends to padding
            x = x + 0.0 * ops.expand_dims(ops.cast(padding_mask, x.dtype), -1)
        super().__init__(inputs={{"token_ids": token_ids, "padding_mask": padding_mask}},
                         outputs={{"sequence_output": x}}, **kwargs)
        self.vocabulary_size = vocabulary_size
        self.num_layers = num_layers
        self.num_heads = num_heads
        self.hidden_dim = hidden_dim
        self.intermediate_dim = intermediate_dim
        self.dropout = dropout
        self.max_sequence_length = max_sequence_length

    def call(self, inputs, training=None, mask=None):
        # Each input by name: a batch may hold entries the model does not take.
        return super().call(model_inputs(self, inputs), training=training, mask=mask)

    def get_config(self):
        return {{"name": self.name, "trainable": self.trainable,
                "vocabulary_size": self.vocabulary_size, "num_layers": self.num_layers,
                "num_heads": self.num_heads, "hidden_dim": self.hidden_dim,
                "intermediate_dim": self.intermediate_dim, "dropout": self.dropout,
                "max_sequence_length": self.max_sequence_length,
                "dtype": self.dtype_policy.name}}

    @classmethod
    def from_config(cls, config):
        return cls(**config)
'''

TASKS = '''
"""The toy's masked-LM pretrainer (objective `mlm`) and classification head."""

import keras
import keras_nlp
from keras import ops

from lmfactory.models.backbone import model_inputs

PACKAGE = __name__.split(".")[0]


@keras.saving.register_keras_serializable(package=PACKAGE)
class ToyMaskedLM(keras.Model):
    """Masked-LM logits at `mask_positions`, output projection tied to the token embedding.
    Loss: the weighted mean negative log-likelihood of y["mlm"] (sample_weight["mlm"])."""

    def __init__(self, backbone, **kwargs):
        super().__init__(**kwargs)
        self.backbone = backbone
        self.masked_lm_head = keras_nlp.layers.MaskedLMHead(
            token_embedding=backbone.token_embedding, intermediate_activation="gelu",
            name="masked_lm_head")

    def call(self, inputs, training=None):
        sequence = self.backbone(
            {"token_ids": inputs["token_ids"],
             "padding_mask": ops.cast(inputs["padding_mask"], "int32")},
            training=training)["sequence_output"]
        return {"mlm": self.masked_lm_head(sequence, mask_positions=inputs["mask_positions"])}

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        if y_pred is None:
            y_pred = self(x, training=training)
        weights = ops.cast(sample_weight["mlm"], "float32")
        nll = keras.losses.sparse_categorical_crossentropy(y["mlm"], y_pred["mlm"],
                                                           from_logits=True)
        return ops.sum(nll * weights) / ops.maximum(ops.sum(weights), 1.0)

    def get_config(self):
        return {"name": self.name, "trainable": self.trainable,
                "backbone": keras.layers.serialize(self.backbone)}

    @classmethod
    def from_config(cls, config):
        config = dict(config, backbone=keras.layers.deserialize(config["backbone"]))
        return cls(**config)


@keras.saving.register_keras_serializable(package=PACKAGE)
class ToyClassifier(keras.Model):
    """Logits [B, num_classes] from the first position's state."""

    def __init__(self, backbone, num_classes, **kwargs):
        inputs = {name: keras.Input(shape=(None,), dtype="int32", name=name)
                  for name in ("token_ids", "padding_mask")}
        sequence = backbone(inputs)["sequence_output"]
        dense = keras.layers.Dense(num_classes, name="logits")
        super().__init__(inputs=inputs, outputs=dense(sequence[:, 0, :]), **kwargs)
        self.backbone = backbone
        self.num_classes = num_classes

    def call(self, inputs, training=None, mask=None):
        return super().call(model_inputs(self, inputs), training=training, mask=mask)

    def get_config(self):
        return {"name": self.name, "trainable": self.trainable,
                "backbone": keras.layers.serialize(self.backbone),
                "num_classes": self.num_classes}

    @classmethod
    def from_config(cls, config):
        config = dict(config, backbone=keras.layers.deserialize(config["backbone"]))
        return cls(**config)
'''

INIT = '''
"""A toy architecture: importing this package registers it."""

from lmfactory.models import registry

from {package}.toy_backbone import ToyBackbone
from {package}.toy_presets import TOY_PRESETS
from {package}.toy_tasks import ToyClassifier, ToyMaskedLM

ARCHITECTURE = registry.register(
    registry.Architecture(
        name="{package}",
        family="encoder",
        backbone_cls=ToyBackbone,
        presets=TOY_PRESETS,
        tokenizer_kind="wordpiece",
        pretrainers={{"mlm": ToyMaskedLM}},
        heads={{"classification": ToyClassifier}},
        special_tokens={{"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]",
                        "mask": "[MASK]"}},
        paper="a toy for the conformance harness's acceptance test",
    )
)
'''


def write_model_folder(root, package, use_padding_mask=True):
    """Writes the toy model folder ``root/package`` (an importable package)."""
    folder = root / package
    folder.mkdir(parents=True)
    files = {
        "__init__.py": INIT.format(package=package),
        "toy_presets.py": PRESETS,
        "toy_backbone.py": BACKBONE.format(use_padding_mask=use_padding_mask),
        "toy_tasks.py": TASKS,
    }
    for filename, text in files.items():
        (folder / filename).write_text(textwrap.dedent(text).lstrip())
    return folder


@pytest.fixture
def model_folder(tmp_path):
    """Writes, imports and registers a toy model folder; unregisters and forgets it after
    the test. Call the returned function with ``use_padding_mask``; it returns the
    architecture's name."""
    root = tmp_path / "model_folders"
    root.mkdir()
    sys.path.insert(0, str(root))
    packages = []

    def add(use_padding_mask=True):
        package = f"lmfactory_toy_{uuid.uuid4().hex[:10]}"
        write_model_folder(root, package, use_padding_mask)
        packages.append(package)
        importlib.invalidate_caches()
        module = importlib.import_module(package)
        return module.ARCHITECTURE.name

    yield add
    for package in packages:
        registry.unregister(package)
        assert package not in models.names()
        for module in [m for m in sys.modules if m == package or m.startswith(package + ".")]:
            del sys.modules[module]
    sys.path.remove(str(root))


def test_toy_architecture_passes_the_harness(model_folder, tmp_path):
    name = model_folder()
    assert name in models.names()
    arch = models.get(name)
    # The family's default heads come with the registration.
    assert arch.task_kinds == ("classification", "tagging", "span_qa", "multiple_choice")
    assert harness.smallest_preset(name) == "small"
    assert harness.tiny_overrides(name) == {
        "vocabulary_size": 100, "num_layers": 2, "num_heads": 2, "hidden_dim": 16,
        "intermediate_dim": 32, "max_sequence_length": 32}
    work = tmp_path / "work"
    work.mkdir()
    harness.run_all_checks(name, work)


def test_harness_catches_a_backbone_that_ignores_padding(model_folder):
    name = model_folder(use_padding_mask=False)
    harness.check_forward(name)  # it builds and has the right shapes...
    with pytest.raises(AssertionError, match="changed real positions"):
        harness.check_padding_invariance(name)  # ...but attends to padding
