"""`kill -9` of a process running a multi-process Beam DirectRunner pipeline must
not leave the SDK worker processes behind (pipelines/beam_workers.py)."""

import os
import signal
import subprocess
import sys
import textwrap
import time

SCRIPT = textwrap.dedent("""
    import sys, time
    import apache_beam as beam
    from lmfactory.pipelines import beam_workers

    if sys.argv[1] == "install":
        assert beam_workers.install()

    def wait(element):
        time.sleep(120)
        return element

    options = ["--direct_running_mode=multi_processing", "--direct_num_workers=2"]
    with beam.Pipeline(argv=options) as pipeline:
        _ = pipeline | beam.Create(list(range(4))) | beam.Reshuffle() | beam.Map(wait)
""")


def _children(pid: int) -> list[int]:
    """The pids whose parent is ``pid`` (from /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(entry))
    return found


def _is_worker(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return b"sdk_worker_main" in cmdline.read()
    except OSError:
        return False


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _kill_parent_and_watch_workers(tmp_path, mode):
    script = tmp_path / "pipeline.py"
    script.write_text(SCRIPT)
    parent = subprocess.Popen([sys.executable, str(script), mode],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    workers = []
    try:
        # Beam starts a worker when a stage first needs one: wait for the first, then give
        # the second a few seconds (under load it may start later, or not at all).
        deadline, settle = time.time() + 240, None
        while time.time() < deadline and parent.poll() is None:
            time.sleep(0.5)
            workers = [pid for pid in _children(parent.pid) if _is_worker(pid)]
            if len(workers) == 2 or (settle and time.time() > settle):
                break
            if workers and settle is None:
                settle = time.time() + 10
        assert workers, "the pipeline never started an SDK worker"
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    deadline = time.time() + 20
    while any(map(_alive, workers)) and time.time() < deadline:
        time.sleep(0.2)
    survivors = [pid for pid in workers if _alive(pid)]
    for pid in survivors:  # never leave them behind, whatever the outcome
        os.kill(pid, signal.SIGKILL)
    return workers, survivors


def test_sdk_workers_die_with_a_killed_parent(tmp_path):
    workers, survivors = _kill_parent_and_watch_workers(tmp_path, "install")
    assert workers and survivors == []


def test_the_launcher_runs_the_shell_command_as_given(tmp_path):
    from lmfactory.pipelines import beam_workers

    command = "printf '%s|' 'two words' \"$LMF_PROBE\" > " + str(tmp_path / "out")
    subprocess.run(beam_workers.launcher_command(command), shell=True, check=True,
                   env=dict(os.environ, LMF_PROBE="from env"))
    assert (tmp_path / "out").read_text() == "two words|from env|"
