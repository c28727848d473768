"""One local run per run folder, and the empty output folders a killed run leaves
(TFX makes them before the executor runs) are removed by the next run."""

import os
import subprocess
import sys
import textwrap

import pytest
from ml_metadata.metadata_store import metadata_store
from ml_metadata.proto import metadata_store_pb2

from lmfactory.pipelines import local_state


def _store(path):
    config = metadata_store_pb2.ConnectionConfig()
    config.sqlite.filename_uri = str(path)
    config.sqlite.connection_mode = metadata_store_pb2.SqliteMetadataSourceConfig.READWRITE_OPENCREATE
    return metadata_store.MetadataStore(config)


def test_empty_outputs_of_unfinished_executions_are_removed(tmp_path):
    store = _store(tmp_path / "metadata.sqlite")
    type_id = store.put_execution_type(metadata_store_pb2.ExecutionType(name="Trainer"))
    states = {"done": metadata_store_pb2.Execution.COMPLETE,
              "killed": metadata_store_pb2.Execution.RUNNING,
              "failed": metadata_store_pb2.Execution.FAILED}
    ids = dict(zip(states, store.put_executions([
        metadata_store_pb2.Execution(type_id=type_id, last_known_state=state)
        for state in states.values()])))
    root = tmp_path / "pipeline"
    folders = {name: root / "Pretrainer" / "model" / str(i) for name, i in ids.items()}
    for folder in folders.values():
        folder.mkdir(parents=True)
    (folders["done"] / "model.keras").write_text("x")
    logs = root / "Pretrainer" / "model_run" / str(ids["failed"])
    logs.mkdir(parents=True)
    (logs / "events").write_text("kept for debugging")
    del store
    removed = local_state.clean_incomplete_outputs(str(root), str(tmp_path / "metadata.sqlite"))
    assert sorted(removed) == sorted([str(folders["killed"]), str(folders["failed"])])
    assert folders["done"].exists() and logs.exists()
    assert local_state.clean_incomplete_outputs(str(root), str(tmp_path / "none.sqlite")) == []


def test_a_second_run_into_the_same_folder_is_refused(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from lmfactory.pipelines import local_state
        with local_state.exclusive({str(tmp_path)!r}):
            print("locked", flush=True)
            time.sleep(60)
    """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(local_state.RunFolderBusy, match=f"pid {holder.pid}"):
            with local_state.exclusive(str(tmp_path)):
                pass
    finally:
        holder.kill()
        holder.wait()
    with local_state.exclusive(str(tmp_path)):  # the kernel dropped the killed holder's lock
        assert os.path.exists(tmp_path / ".lock")
