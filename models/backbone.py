"""The base class of every network in `models/*/*_backbone.py`: a pre-trained Transformer
without its task head (keras-hub's Backbone / Task split).

A backbone is a functional `keras.Model` built in its constructor: the constructor creates
the layers (attributes under the names the converters and saved files use), wires the
functional graph from `keras.Input`s to a dict of outputs, and hands both to
`Backbone.__init__`. What is the same for every backbone lives here:

* the config: a backbone's config is its constructor's arguments, as the constructor leaves
  them (e.g. GPT-3's ``head_dim=None`` resolved to hidden_dim // num_heads), plus the
  Keras `name`, `trainable` and `dtype` (the policy's name); `from_config` calls the
  constructor with it. Each argument is kept as the attribute of the same name;
* the dtype policy: the layers are created with ``dtype``; the model itself takes the same
  policy once its functional graph exists;
* serialisation: every subclass is registered as ``lmfactory>ClassName``, the name saved
  `.keras` files carry;
* its inputs: `call` takes a dict holding at least the backbone's inputs and reads each by
  name (`model_inputs`), so a batch may carry more (a pair's ``segment_ids``, a label).

Per-layer states. Backbones whose intermediate states are read elsewhere (feature-based
use, BERT §5.3; distillation, DistilBERT §2 / TinyBERT §3.1; CharLM's auxiliary losses)
define ``call_with_states(inputs, training=False)``: the forward pass through the very
layers of the functional graph, returning a dict with the outputs of `call`
(`sequence_output`, and `pooled_output` where the backbone has a pooler), `hidden_states`
(L + 1 tensors [B, T, H]: the embedding output, then each block's output) and, for the
encoders, `attention_scores` (L tensors [B, heads, T, T]). The block loops are
`encoder_utils.encoder_states` and `decoder_utils.decoder_states`. A backbone without the
method has no such use; callers test for it (``getattr(backbone, "call_with_states")``),
so the base class deliberately does not define it.
"""

import inspect

import keras
from keras import ops

# Constructor parameters that are not part of the recorded arguments: `dtype` is saved as
# the policy's name, the rest are Keras' own (`name`, `trainable` in **kwargs).
_NOT_ARGUMENTS = ("self", "dtype")


def model_inputs(model, inputs):
    """The entries of the dict ``inputs`` that the functional ``model`` takes.

    A Keras functional model matches a dict of inputs to its own inputs by flattening both
    in sorted-key order, so an extra entry (the all-zero ``segment_ids`` that the ``mlm``
    pretraining records and the sentence-pair packer carry, CONTRACTS §3; a BERT batch's
    ``segment_ids`` given to a model without them; any feature a transform adds) would
    shift the tensors onto the wrong inputs: such entries are dropped. A ``segment_ids``
    input the batch lacks is all zeros (a single-segment batch); any other missing input
    is an error. A non-dict ``inputs`` is returned as is."""
    if not isinstance(inputs, dict):
        return inputs
    missing = sorted(set(model.input) - set(inputs) - {"segment_ids"})
    if missing:
        raise ValueError(f"{type(model).__name__} needs inputs {sorted(model.input)}; "
                         f"missing {missing} (got {sorted(inputs)})")
    return {name: inputs[name] if name in inputs else ops.zeros_like(inputs["token_ids"])
            for name in model.input}


class Backbone(keras.Model):
    """A functional `keras.Model` whose config is its constructor's arguments.

    A subclass builds its layers and graph, then ends its constructor with::

        super().__init__(inputs=inputs, outputs=outputs, dtype=dtype,
                         arguments=locals(), **kwargs)

    ``arguments`` maps names to values (the constructor's ``locals()``: only the names of
    its own parameters are kept, with the values the constructor has settled on); each is
    stored as an attribute and `get_config` returns them in the constructor's order between
    ``name`` / ``trainable`` and ``dtype``.

    Args:
        inputs, outputs: the functional graph (dicts of tensors).
        arguments: the constructor's arguments, see above.
        dtype: the Keras dtype policy the layers were built with, or None (the global one).
        **kwargs: `keras.Model` arguments (`name`, `trainable`).
    """

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        keras.saving.register_keras_serializable(package="lmfactory")(cls)

    def __init__(self, *, inputs, outputs, arguments, dtype=None, **kwargs):
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        if dtype is not None:
            self.dtype_policy = keras.dtype_policies.get(dtype)
        for key in self.argument_names():
            setattr(self, key, arguments[key])

    def call(self, inputs, training=None, mask=None):
        return super().call(model_inputs(self, inputs), training=training, mask=mask)

    @classmethod
    def argument_names(cls) -> tuple:
        """The names of the constructor's arguments that make up the config, in order."""
        parameters = inspect.signature(cls.__init__).parameters.values()
        return tuple(parameter.name for parameter in parameters
                     if parameter.name not in _NOT_ARGUMENTS
                     and parameter.kind not in (parameter.VAR_POSITIONAL,
                                                parameter.VAR_KEYWORD))

    def get_config(self):
        config = {"name": self.name, "trainable": self.trainable}
        config.update({key: getattr(self, key) for key in self.argument_names()})
        config["dtype"] = self.dtype_policy.name
        return config

    @classmethod
    def from_config(cls, config):
        return cls(**config)


def check_head_split(hidden_dim, num_heads) -> None:
    """Multi-head attention splits the hidden size evenly over the heads (Vaswani et al.
    2017 §3.2.2: d_k = d_model / h); raises unless ``num_heads`` divides ``hidden_dim``."""
    if hidden_dim % num_heads:
        raise ValueError(f"hidden_dim ({hidden_dim}) must be divisible by num_heads "
                         f"({num_heads})")


__all__ = ["Backbone", "check_head_split", "model_inputs"]
