"""Two real local workers train together with MultiWorkerMirroredStrategy.

The workers are two processes on loopback ports with TF_CONFIG, running the project's own
training path (tests/multi_worker_check.py: strategy.make_strategy picks the strategy from
TF_CONFIG, fit_loop.fit_checkpointed trains). Checked:

* the same per-step loss, validation metrics and final weights as one worker on the same
  global batch of 8 (float tolerance);
* only the chief writes to the backup folder: the other worker keeps its checkpoints in a
  temporary folder of its own, removed when its training ends;
* kill a worker mid-training (then the chief, which waits on it), start both again: the
  training continues from the chief's last checkpoint to exactly the steps asked, and ends
  where the uninterrupted one-worker run ends.

No timing is asserted; the timeouts are generous for a loaded machine.
"""

import json
import os
import signal
import socket
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import forked_tasks

SCRIPT = Path(__file__).with_name("multi_worker_check.py")
STEPS, EVERY, PAUSE_AT = 30, 10, 25
TIMEOUT = 150  # seconds for one run of both workers (start-up of two TensorFlows included)


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def _start(spec: dict, tf_config: dict | None, tmpdir: Path, log: Path
           ) -> forked_tasks.Forked:
    """A worker process (forked with TensorFlow imported: tests/forked_tasks.py)."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    tmpdir.mkdir(parents=True, exist_ok=True)
    env.update({"TMPDIR": str(tmpdir), "CUDA_VISIBLE_DEVICES": "-1"})
    if tf_config:
        env["TF_CONFIG"] = json.dumps(tf_config)
    return forked_tasks.Forked([sys.executable, str(SCRIPT), json.dumps(spec)], log, env=env)


def _workers(tmp: Path, run: str, spec: dict) -> list[forked_tasks.Forked]:
    ports = _free_ports(2)
    cluster = {"worker": [f"127.0.0.1:{port}" for port in ports]}
    return [_start({**spec, "out": str(tmp / f"{run}-{index}.json")},
                   {"cluster": cluster, "task": {"type": "worker", "index": index}},
                   tmp / f"tmp-{index}", tmp / f"{run}-{index}.log") for index in range(2)]


def _wait(processes, logs, timeout=TIMEOUT):
    deadline = time.time() + timeout
    for process, log in zip(processes, logs):
        try:
            status = process.wait(timeout=max(1, deadline - time.time()))
        except TimeoutError:
            for p in processes:
                p.kill()
            pytest.fail(f"worker timed out:\n{log.read_text()[-3000:]}")
        assert status == 0, log.read_text()[-3000:]


def _temporary_folders(tmp: Path, index: int) -> list[Path]:
    return sorted((tmp / f"tmp-{index}").glob("lmfactory-worker-*"))


def test_two_workers_match_one_and_resume_after_a_killed_worker(tmp_path):
    backup = tmp_path / "backup"
    spec = {"backup": str(backup), "steps": STEPS, "every": EVERY}
    single = _start({**spec, "backup": str(tmp_path / "single-backup"),
                     "out": str(tmp_path / "single.json")}, None, tmp_path / "tmp-single",
                    tmp_path / "single.log")

    # Two workers; worker 1 stops before step 25 (the chief checkpointed step 20) and waits.
    ready = tmp_path / "ready"
    first = _workers(tmp_path, "first", {**spec, "pause_at": PAUSE_AT, "ready": str(ready)})
    metadata = backup / "training_metadata.json"
    deadline = time.time() + TIMEOUT
    while time.time() < deadline and not (ready.exists() and metadata.exists()):
        assert all(p.poll() is None for p in first), \
            (tmp_path / "first-0.log").read_text()[-3000:]
        time.sleep(0.2)
    assert ready.exists(), (tmp_path / "first-1.log").read_text()[-3000:]
    assert json.loads(metadata.read_text())["epoch"] == 2
    # The chief's checkpoint is in the backup folder, the worker's in its temporary folder.
    assert (backup / "latest.weights.h5").exists()
    (killed_folder,) = _temporary_folders(tmp_path, 1)
    assert (killed_folder / "latest.weights.h5").exists()
    assert json.loads((killed_folder / "training_metadata.json").read_text())["epoch"] == 2
    assert not _temporary_folders(tmp_path, 0)  # the chief has none
    os.kill(first[1].pid, signal.SIGKILL)  # the worker dies; the chief waits on it forever
    first[1].wait()
    os.kill(first[0].pid, signal.SIGKILL)
    first[0].wait()

    # Both start again and finish from the chief's checkpoint of step 20.
    second = _workers(tmp_path, "second", spec)
    _wait(second, [tmp_path / "second-0.log", tmp_path / "second-1.log"])
    _wait([single], [tmp_path / "single.log"])
    chief_log, worker_log = ((tmp_path / f"second-{i}.log").read_text() for i in range(2))
    for log in (chief_log, worker_log):
        assert "Distribution strategy: CollectiveAllReduceStrategy with 2 replica(s)" in log
        assert f"at step {2 * EVERY} of {STEPS}" in log
    assert "is not the chief" in worker_log and "is not the chief" not in chief_log
    assert not backup.exists()  # the chief removes its backup when the training completes
    assert _temporary_folders(tmp_path, 1) == [killed_folder]  # the new one was removed

    reference = json.loads((tmp_path / "single.json").read_text())
    chief, worker = (json.loads((tmp_path / f"second-{i}.json").read_text()) for i in range(2))
    assert reference["replicas"] == 1 and chief["replicas"] == 2
    assert chief["chief"] and not worker["chief"]
    assert chief["iterations"] == worker["iterations"] == reference["iterations"] == STEPS
    curve, expected = chief["curve"], reference["curve"]
    # The resumed chief's curve holds the first run's points up to step 20 and its own after.
    assert curve["steps"] == expected["steps"] and curve["steps"][-1] == STEPS
    assert curve["metrics"]["loss"] == pytest.approx(expected["metrics"]["loss"], rel=1e-4)
    assert curve["validation"]["steps"] == [10, 20, 30]
    assert curve["validation"]["metrics"]["loss"] == pytest.approx(
        expected["validation"]["metrics"]["loss"], rel=1e-4)
    assert chief["metrics"] == pytest.approx(reference["metrics"], rel=1e-4)
    for ours, theirs, other in zip(chief["weights"], reference["weights"], worker["weights"]):
        np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-5)
        np.testing.assert_array_equal(ours, other)  # the replicas stay identical
