"""MirroredStrategy over 2 logical CPU devices gives the same loss and update as one device
(tests/mirrored_check.py, in a process of its own: tests/forked_tasks.py)."""

import json
import sys
from pathlib import Path

import pytest

import forked_tasks

from lmfactory.components.trainer.strategy import make_strategy


def test_mirrored_two_devices_matches_one_device(tmp_path):
    script = Path(__file__).with_name("mirrored_check.py")
    status, output = forked_tasks.run([sys.executable, str(script)], tmp_path / "mirrored.log",
                                      timeout=600)
    assert status == 0, output[-3000:]
    figures = json.loads([line for line in output.splitlines() if line.startswith("{")][-1])
    print(figures)
    assert figures["replicas"] == 2
    assert figures["mirrored_loss"] == pytest.approx(figures["single_loss"], rel=1e-5)
    assert figures["max_weight_change"] > 1e-4  # the step did update the weights
    assert figures["max_weight_difference"] < 1e-5


def test_strategy_factory_rejects_unknown_kinds_and_defaults_on_one_cpu():
    with pytest.raises(ValueError, match="strategy must be one of"):
        make_strategy("quantum")
    assert make_strategy("auto").num_replicas_in_sync == 1


def test_tf_config_with_bad_json_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", "{not json")
    with pytest.raises(ValueError, match="TF_CONFIG"):
        make_strategy("auto")
