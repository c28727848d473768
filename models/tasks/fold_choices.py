"""Moves the choice axis of multiple-choice inputs into the batch axis and back."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="lmfactory")
class FoldChoices(keras.layers.Layer):
    """``[B, C, ...] -> [B*C, ...]`` (fold) or ``[B*C, ...] -> [B, C, ...]`` (unfold).

    BERT §4.4 runs every (context, choice) sequence through the encoder on its own and only
    compares the choices' scores afterwards; folding the C choices of each question into
    the batch lets any backbone (which takes [batch, seq_len]) encode them, and unfolding
    gathers the scores of one question again. Example b's choice c is row ``b * C + c``.
    Keras's ``Reshape`` keeps the batch axis fixed, so it cannot do this.

    Inputs: a tensor, or a dict of tensors (each folded the same way).

    Args:
        num_choices: C.
        unfold: False = fold, True = unfold.
    """

    def __init__(self, num_choices: int, unfold: bool = False, **kwargs):
        super().__init__(**kwargs)
        if not isinstance(num_choices, int) or isinstance(num_choices, bool) or num_choices < 1:
            raise ValueError(f"num_choices must be a positive int, got {num_choices!r}")
        self.num_choices = num_choices
        self.unfold = bool(unfold)

    def _reshape(self, x):
        shape = ops.shape(x)
        if self.unfold:
            return ops.reshape(x, (-1, self.num_choices) + tuple(shape[1:]))
        return ops.reshape(x, (-1,) + tuple(shape[2:]))

    def call(self, inputs):
        return keras.tree.map_structure(self._reshape, inputs)

    def _output_shape(self, shape):
        shape = tuple(shape)
        if self.unfold:
            batch = None if shape[0] is None else shape[0] // self.num_choices
            return (batch, self.num_choices) + shape[1:]
        batch = None if shape[0] is None or shape[1] is None else shape[0] * shape[1]
        return (batch,) + shape[2:]

    def compute_output_spec(self, inputs):
        return keras.tree.map_structure(
            lambda x: keras.KerasTensor(self._output_shape(x.shape), dtype=x.dtype), inputs)

    def get_config(self):
        config = super().get_config()
        config.update({"num_choices": self.num_choices, "unfold": self.unfold})
        return config
