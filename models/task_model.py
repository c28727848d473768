"""Config serialisation of the task models that wrap a backbone (keras-hub's Backbone / Task
split): classifiers, pre-trainers, distillers.

Such a model's config holds its wrapped models (the `backbone`, a distiller's `teacher`)
serialised whole, so that `keras.saving` rebuilds them before the task model itself, plus
the task's own constructor arguments."""

import keras


def deserialize_models(config: dict, keys=("backbone",)) -> dict:
    """A copy of ``config`` in which the entries ``keys`` that are serialised Keras objects
    (dicts) are deserialised (models given as objects are kept)."""
    config = dict(config)
    for key in keys:
        if isinstance(config.get(key), dict):
            config[key] = keras.layers.deserialize(config[key])
    return config


class BackboneTask:
    """Mixin giving a backbone-wrapping `keras.Model` its `get_config` / `from_config`.

    Put it before `keras.Model` in the bases (``class BertClassifier(BackboneTask,
    keras.Model)``); it is a plain class, so Keras can turn the model into a functional
    subclass or not as its constructor decides. The config is ``{"name", "trainable"}``
    plus each attribute named in `serialized_models` (constructor arguments that are Keras
    models, serialised whole); a subclass with more constructor arguments adds them::

        def get_config(self):
            config = super().get_config()
            config.update({"num_classes": self.num_classes, "dropout": self.dropout})
            return config
    """

    # Constructor arguments (and attributes) holding Keras models.
    serialized_models = ("backbone",)

    def get_config(self):
        config = {"name": self.name, "trainable": self.trainable}
        for key in self.serialized_models:
            config[key] = keras.layers.serialize(getattr(self, key))
        return config

    @classmethod
    def from_config(cls, config):
        return cls(**deserialize_models(config, cls.serialized_models))


__all__ = ["BackboneTask", "deserialize_models"]
