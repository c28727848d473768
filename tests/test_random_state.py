"""The dropout seed states saved with a training backup are put back into the same model built
in another process history: Keras numbers auto-named seed generators per process, so a
re-run whose earlier DAG stages are cached builds the model under other names."""

import keras
import numpy as np

from lmfactory.components.trainer.random_state import (RandomStateBackup,
                                                       random_state_variables)


def _model():
    inputs = keras.Input((4,))
    hidden = keras.layers.Dropout(0.5)(keras.layers.Dense(8)(inputs))
    return keras.Model(inputs, keras.layers.Dropout(0.5)(keras.layers.Dense(2)(hidden)))


def test_seed_states_are_restored_into_a_model_named_differently(tmp_path):
    keras.utils.set_random_seed(3)
    saved = _model()
    backup = RandomStateBackup(str(tmp_path))
    backup.set_model(saved)
    for _ in range(5):  # advance the dropout streams as training steps do
        saved(np.ones((2, 4), "float32"), training=True)
    backup.on_epoch_end(0)  # the state after checkpoint interval 1
    expected = [np.asarray(v.numpy()) for v in random_state_variables(saved)]

    [keras.random.SeedGenerator(i) for i in range(4)]  # other stages ran in this process
    restored = _model()
    assert [v.path for v in random_state_variables(restored)] != \
        [v.path for v in random_state_variables(saved)]
    resumed = RandomStateBackup(str(tmp_path))
    resumed.set_model(restored)
    resumed.on_train_begin()
    resumed.on_epoch_begin(1)  # BackupAndRestore resumed after interval 1
    for variable, value in zip(random_state_variables(restored), expected):
        np.testing.assert_array_equal(variable.numpy(), value)
