"""The task models that wrap a backbone (keras-hub's Backbone / Task split): classifiers,
taggers, span and choice heads, language models, pre-trainers, distillers.

Such a model's config holds its wrapped models (the `backbone`, a distiller's `teacher`)
serialised whole, so that `keras.saving` rebuilds them before the task model itself, plus
the task's own constructor arguments. Two bases give every task model that config and its
registration for serialisation (``lmfactory>ClassName``):

* `Task`: a functional `keras.Model` over a dict of int32 inputs (`int_inputs`), a head on
  the backbone's outputs. `SequenceClassifier` is the [CLS] classifier of BERT §4.1
  (Figure 4a) and its descendants, whose subclasses only define their head;
  `MaskedLMPretrainer` the masked-LM pre-trainer of BERT §3.1. Heads ending in dropout and
  one dense layer create them with `Task.add_output_layers` and apply them with
  `Task.output_head` (a hidden layer before it: `dropout_dense`); `first_token_vector` is
  the sequence representation they read.
* `SubclassedTask`: a task model with its own `call` (pre-trainers and distillers whose
  training step runs more than one forward pass, e.g. ELECTRA's generator then
  discriminator).
"""

import keras

from lmfactory.models.backbone import model_inputs
from lmfactory.models.task_losses import (SparseCategoricalAccuracy, masked_lm_objective,
                                          sentence_objective, with_regularization)


def deserialize_models(config: dict, keys=("backbone",)) -> dict:
    """A copy of ``config`` in which the entries ``keys`` that are serialised Keras objects
    (dicts) are deserialised (models given as objects are kept)."""
    config = dict(config)
    for key in keys:
        if isinstance(config.get(key), dict):
            config[key] = keras.layers.deserialize(config[key])
    return config


class BackboneTask:
    """The config and registration shared by `Task` and `SubclassedTask` (not a base of task
    models themselves: use one of those two).

    The config is ``{"name", "trainable"}`` plus each attribute named in `serialized_models`
    (constructor arguments that are Keras models, serialised whole); a subclass with more
    constructor arguments adds them::

        def get_config(self):
            config = super().get_config()
            config.update({"num_classes": self.num_classes, "dropout": self.dropout})
            return config

    Every subclass is registered for serialisation as ``lmfactory>ClassName``, except a
    base that is never built on its own, which says so with ``register=False`` in its
    class statement (``class TinyBertDistillation(SubclassedTask, register=False)``).
    """

    # Constructor arguments (and attributes) holding Keras models.
    serialized_models = ("backbone",)
    # Whether the task's vocabulary logits are the backbone's token embedding called in
    # reverse (a tied output layer, computed by models/tied_output.py).
    ties_output_embedding = False

    def __init_subclass__(cls, register=True, **kwargs):
        super().__init_subclass__(**kwargs)
        if register:
            keras.saving.register_keras_serializable(package="lmfactory")(cls)

    def get_config(self):
        config = {"name": self.name, "trainable": self.trainable}
        for key in self.serialized_models:
            config[key] = keras.layers.serialize(getattr(self, key))
        return config

    @classmethod
    def from_config(cls, config):
        return cls(**deserialize_models(config, cls.serialized_models))


def int_inputs(names, shape=(None,)) -> dict:
    """One int32 `keras.Input` per name (token ids, masks, positions), [batch, *shape]."""
    return {name: keras.Input(shape=shape, dtype="int32", name=name) for name in names}


def first_token_vector(outputs, pooled=False):
    """A backbone's representation of a whole sequence: the final hidden vector of its first
    token (BERT §4.1: `[CLS]`; RoBERTa's `<s>`), [batch, hidden]. With ``pooled``, the
    backbone's ``pooled_output`` (BERT's pooler over that vector) where it has one."""
    if pooled and "pooled_output" in outputs:
        return outputs["pooled_output"]
    return outputs["sequence_output"][:, 0, :]


def dropout_dense(prefix, dropout, units, activation, kernel_initializer, dtype) -> tuple:
    """``(Dropout(dropout), Dense(units, activation))`` named ``{prefix}_dropout`` and
    ``{prefix}_dense``, with the dtype policy ``dtype``: the hidden layer that RoBERTa's and
    ELECTRA's classification heads put on the first token's vector before the output layer
    (dropout, then a dense layer as wide as the backbone; tanh, GELU).

    ``kernel_initializer`` is a function returning the Dense kernel's initialiser (e.g.
    `bert_kernel_initializer`), called after the Dropout is made: an unseeded layer or
    initialiser draws its seed when it is made, so the order is the weights'."""
    dropout_layer = keras.layers.Dropout(dropout, dtype=dtype, name=f"{prefix}_dropout")
    dense = keras.layers.Dense(units, activation=activation,
                               kernel_initializer=kernel_initializer(), dtype=dtype,
                               name=f"{prefix}_dense")
    return dropout_layer, dense


class Task(BackboneTask, keras.Model):
    """A functional model with a head on a backbone (``self.backbone``).

    A subclass creates its head's layers (with the backbone's dtype policy), wires
    ``backbone`` and head from `int_inputs` to its outputs and passes both to
    ``super().__init__(inputs=..., outputs=..., **kwargs)``; its config is the backbone
    serialised whole plus its own constructor arguments (`BackboneTask`).

    Keras makes a functional model's classes `Functional` subclasses (it rewrites the bases
    of every class above the model's), so a task model with its own `call` derives from
    `SubclassedTask` instead. `call` reads each input by name (`backbone.model_inputs`): a
    batch may carry entries the model does not take.
    """

    def call(self, inputs, training=None, mask=None):
        return super().call(model_inputs(self, inputs), training=training, mask=mask)

    def add_output_layers(self, units, dropout, kernel_initializer, dtype):
        """Creates the head's last two layers: ``self.output_dropout`` (rate ``dropout``;
        every BERT fine-tuning head has dropout before its output layer, Appendix A.3) and
        ``self.output_dense`` (``units`` outputs, no activation, named ``logits``), with
        the dtype policy ``dtype`` (the backbone's; None: the global one).
        ``kernel_initializer`` is a function returning the kernel's initialiser, called
        after the Dropout is made (see `dropout_dense`)."""
        self.output_dropout = keras.layers.Dropout(dropout, dtype=dtype,
                                                   name="output_dropout")
        self.output_dense = keras.layers.Dense(units, kernel_initializer=kernel_initializer(),
                                               dtype=dtype, name="logits")

    def output_head(self, features):
        """``output_dense(output_dropout(features))``: the layers of `add_output_layers`."""
        return self.output_dense(self.output_dropout(features))


class SubclassedTask(BackboneTask, keras.Model):
    """A task model with its own `call` on a backbone (``self.backbone``, and the other
    models of `serialized_models`): it calls ``super().__init__(**kwargs)`` first, then
    creates (and builds) its layers; its config is those models serialised whole plus its
    own constructor arguments (`BackboneTask`)."""


class SequenceClassifier(Task):
    """Classification of a whole sequence (or sequence pair) from the backbone's
    representation of its first token (BERT §4.1, Figure 4a: the final hidden vector of
    `[CLS]`, fed to a new classification layer; RoBERTa's `<s>`).

    A subclass creates the layers of its head, then calls this constructor, which runs
    ``backbone`` on the `task_inputs` and its `classify` on the backbone's outputs::

        def __init__(self, backbone, num_classes, dropout=0.1, **kwargs):
            self.add_output_layers(num_classes, dropout, bert_kernel_initializer,
                                   dtype=backbone.dtype_policy)
            super().__init__(backbone, num_classes, dropout, **kwargs)

        def classify(self, outputs):
            return self.output_head(first_token_vector(outputs, pooled=True))

    Inputs (dict, int32 [batch, seq_len]): `task_inputs`.
    Output: logits [batch, num_classes] (train with
        `SparseCategoricalCrossentropy(from_logits=True)`).
    Config: the backbone, `num_classes`, `dropout`.
    """

    # The backbone inputs the classifier takes.
    task_inputs = ("token_ids", "padding_mask")

    def __init__(self, backbone, num_classes, dropout, **kwargs):
        self.backbone = backbone
        inputs = int_inputs(self.task_inputs)
        logits = self.classify(backbone(inputs))
        super().__init__(inputs=inputs, outputs=logits, **kwargs)
        self.num_classes = num_classes
        self.dropout = dropout

    def classify(self, outputs):
        """The head: logits [batch, num_classes] from the backbone's output dict."""
        raise NotImplementedError(f"{type(self).__name__} defines no classification head")

    def get_config(self):
        config = super().get_config()
        config.update({"num_classes": self.num_classes, "dropout": self.dropout})
        return config


class MaskedLMPretrainer(Task):
    """A backbone pre-trained with the masked language model (BERT §3.1 Task #1) and,
    where the paper has one, a two-way classifier on the pooled `[CLS]` vector (BERT's next
    sentence prediction, §3.1 Task #2; ALBERT's sentence-order prediction, §3.2).

    A subclass creates its heads (keras-nlp `MaskedLMHead`s tied to the token embedding,
    a Dense(2)), then calls this constructor with them. The model's inputs are
    `backbone_inputs` plus `mask_positions` [batch, num_predictions]; its outputs are
    ``{"mlm": [batch, num_predictions, vocabulary_size]}`` plus, with a sentence head,
    ``{sentence_task: [batch, 2]}``. `compute_loss` is the mean masked-LM negative
    log-likelihood over real predictions, weighted by the prediction weights,
    ``sum(w * nll) / (sum(w) + 1e-5)``, plus the sentence task's mean negative
    log-likelihood (BERT Appendix A.2), over the global batch under a `tf.distribute`
    strategy (`models/task_losses.py`); so the model compiles with an optimizer and no
    `loss`. Metrics: `mlm_loss`, `<task>_loss`, `mlm_accuracy` (weighted),
    `<task>_accuracy`.
    """

    # Its vocabulary logits are the backbone's token embedding called in reverse, through
    # models/tied_output.py (checked by tests/conformance/test_tied_output.py).
    ties_output_embedding = True

    # The backbone's inputs (the model also takes `mask_positions`).
    backbone_inputs = ("token_ids", "padding_mask", "segment_ids")
    # Output key and metric prefix of the sentence head ("nsp", "sop"), None without one.
    sentence_task = None

    def __init__(self, backbone, masked_lm_head, sentence_head=None, **kwargs):
        self.backbone = backbone
        inputs = int_inputs(self.backbone_inputs + ("mask_positions",))
        encoded = backbone({name: inputs[name] for name in self.backbone_inputs})
        outputs = {"mlm": masked_lm_head(encoded["sequence_output"],
                                         mask_positions=inputs["mask_positions"])}
        if self.sentence_task is not None:
            outputs[self.sentence_task] = sentence_head(encoded["pooled_output"])
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)

        # === Metrics ===
        self.mlm_loss_tracker = keras.metrics.Mean(name="mlm_loss")
        if self.sentence_task is not None:
            setattr(self, f"{self.sentence_task}_loss_tracker",
                    keras.metrics.Mean(name=f"{self.sentence_task}_loss"))
        self.mlm_accuracy = SparseCategoricalAccuracy(name="mlm_accuracy")
        if self.sentence_task is not None:
            setattr(self, f"{self.sentence_task}_accuracy",
                    SparseCategoricalAccuracy(
                        name=f"{self.sentence_task}_accuracy"))

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        task = self.sentence_task
        if task is None:
            loss = masked_lm_objective(y["mlm"] if isinstance(y, dict) else y,
                                       y_pred["mlm"] if isinstance(y_pred, dict) else y_pred,
                                       sample_weight, self.mlm_loss_tracker,
                                       self.mlm_accuracy)
        else:
            loss = masked_lm_objective(y["mlm"], y_pred["mlm"], sample_weight,
                                       self.mlm_loss_tracker, self.mlm_accuracy)
            loss = loss + sentence_objective(y[task], y_pred[task],
                                             getattr(self, f"{task}_loss_tracker"),
                                             getattr(self, f"{task}_accuracy"))
        return with_regularization(self, loss)


__all__ = ["BackboneTask", "MaskedLMPretrainer", "SequenceClassifier", "SubclassedTask",
           "Task", "deserialize_models", "dropout_dense", "first_token_vector", "int_inputs"]
