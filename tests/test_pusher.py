"""The Pusher's executor: a version folder appears complete or not at all, a
killed push's staging folder is cleaned, an identical model is not pushed twice."""

import json
import os

import pytest
from tensorflow.core.protobuf import saved_model_pb2
from tfx.types import standard_artifacts

from lmfactory.components.pusher import executor as pusher


@pytest.fixture(autouse=True)
def _byte_stand_ins(monkeypatch):
    """The models here are byte stand-ins for the copy's mechanics, not servable graphs:
    the servability checks a push runs first (op audit, TF Serving's loader) and the
    batching file written after it are tested on real exports in
    tests/test_serving_warmup.py."""
    monkeypatch.setattr(pusher, "check_servable", lambda model_path: None)
    monkeypatch.setattr(pusher, "write_batching_file", lambda base, interface: None)


def _saved_model(folder, payload: bytes):
    os.makedirs(os.path.join(folder, "variables"), exist_ok=True)
    with open(os.path.join(folder, "variables", "variables.index"), "wb") as f:
        f.write(payload)
    saved_model = saved_model_pb2.SavedModel(saved_model_schema_version=1)
    saved_model.meta_graphs.add().graph_def.node.add(name=payload.decode(), op="Const")
    with open(os.path.join(folder, "saved_model.pb"), "wb") as f:
        f.write(saved_model.SerializeToString())
    return folder


def _do(tmp_path, model_uri, blessed=1, run="1"):
    model = standard_artifacts.Model()
    model.uri = str(model_uri)
    blessing = standard_artifacts.ModelBlessing()
    blessing.uri = str(tmp_path / "blessing")
    blessing.set_int_custom_property("blessed", blessed)
    pushed = standard_artifacts.PushedModel()
    pushed.uri = str(tmp_path / "pushed" / run)
    destination = {"filesystem": {"base_directory": str(tmp_path / "serving")}}
    pusher.Executor().Do({"model": [model], "model_blessing": [blessing]},
                         {"pushed_model": [pushed]}, {"push_destination": json.dumps(destination)})
    return pushed


def test_push_is_atomic_and_copies_saved_model_pb_last(tmp_path, monkeypatch):
    model = _saved_model(str(tmp_path / "model" / "Format-Serving"), b"v1")
    copies = []
    real_copy_file = pusher.io_utils.copy_file
    monkeypatch.setattr(pusher.io_utils, "copy_file", lambda source, target, *a, **k: (
        copies.append(target), real_copy_file(source, target, *a, **k)))
    pushed = _do(tmp_path, tmp_path / "model")
    version = pushed.get_string_custom_property("pushed_version")
    assert pushed.get_int_custom_property("pushed") == 1
    assert sorted(os.listdir(tmp_path / "serving")) == [version]  # no staging folder left
    # every file was written inside the hidden staging folder, saved_model.pb last
    assert copies[-1] == str(tmp_path / "serving" / f".{version}.incomplete" / "model"
                             / "saved_model.pb")
    assert pusher.directory_digest(str(tmp_path / "serving" / version)) == \
        pusher.directory_digest(model)


def test_identical_model_is_not_pushed_twice_and_a_new_one_is(tmp_path):
    _saved_model(str(tmp_path / "model" / "Format-Serving"), b"v1")
    first = _do(tmp_path, tmp_path / "model", run="1")
    again = _do(tmp_path, tmp_path / "model", run="2")
    version = first.get_string_custom_property("pushed_version")
    assert again.get_string_custom_property("pushed_version") == version
    assert again.get_int_custom_property("pushed") == 1
    assert os.listdir(tmp_path / "serving") == [version]
    _saved_model(str(tmp_path / "new" / "Format-Serving"), b"v2")
    newer = _do(tmp_path, tmp_path / "new", run="3")
    assert int(newer.get_string_custom_property("pushed_version")) > int(version)
    assert len(pusher.pushed_versions(str(tmp_path / "serving"))) == 2


def _killed_push(base, version: int, payload: bytes):
    """What a push killed mid-copy leaves: its marked staging folder, half a model."""
    staging = base / f".{version}.incomplete"
    staging.mkdir(parents=True)
    (staging / pusher.STAGING_MARKER).write_text("")
    _saved_model(str(staging / pusher.STAGED_MODEL), payload)


def test_killed_push_leftovers_are_removed_and_unblessed_models_stay(tmp_path):
    base = tmp_path / "serving"
    _killed_push(base, 123, b"half")
    _killed_push(base, 124, b"more")
    model = _saved_model(str(tmp_path / "model" / "Format-Serving"), b"v1")
    assert pusher.pushed_versions(str(base)) == []  # TF Serving would not load it either
    version, new = pusher.push_model(model, str(base), now=1000)
    assert (version, new) == ("1000", True) and os.listdir(base) == ["1000"]
    not_blessed = _do(tmp_path, tmp_path / "model", blessed=0, run="9")
    assert not_blessed.get_int_custom_property("pushed") == 0
    assert os.listdir(base) == ["1000"]


def test_a_push_removes_nothing_it_did_not_create(tmp_path):
    """Entries of the serving folder a push did not stage (a user's ``*.incomplete`` files
    and folders, an unmarked folder of the staging pattern) survive every push."""
    base = tmp_path / "serving"
    (base / "important.incomplete").mkdir(parents=True)
    (base / "important.incomplete" / "thesis.txt").write_text("years of work")
    (base / "draft.incomplete").write_text("a draft")
    (base / ".77.incomplete").mkdir()
    (base / ".77.incomplete" / "notes.txt").write_text("not the Pusher's")
    model = _saved_model(str(tmp_path / "model" / "Format-Serving"), b"v1")
    pusher.push_model(model, str(base), now=1000)
    _saved_model(str(tmp_path / "new" / "Format-Serving"), b"v2")
    pusher.push_model(str(tmp_path / "new" / "Format-Serving"), str(base), now=2000)
    assert sorted(os.listdir(base)) == [".77.incomplete", "1000", "2000", "draft.incomplete",
                                        "important.incomplete"]
    assert (base / "important.incomplete" / "thesis.txt").read_text() == "years of work"
    assert (base / ".77.incomplete" / "notes.txt").read_text() == "not the Pusher's"


def test_a_push_failing_on_a_full_disk_leaves_the_served_versions_as_they_were(
        tmp_path, monkeypatch):
    _saved_model(str(tmp_path / "model" / "Format-Serving"), b"v1")
    first = _do(tmp_path, tmp_path / "model", run="1").get_string_custom_property(
        "pushed_version")
    before = pusher.directory_digest(str(tmp_path / "serving" / first))
    _saved_model(str(tmp_path / "new" / "Format-Serving"), b"v2")

    def full_disk(source, target, *args, **kwargs):
        raise OSError(28, "No space left on device", target)

    monkeypatch.setattr(pusher.io_utils, "copy_file", full_disk)
    with pytest.raises(OSError, match="No space left"):
        _do(tmp_path, tmp_path / "new", run="2")
    assert os.listdir(tmp_path / "serving") == [first]  # its staging copy removed too
    assert pusher.directory_digest(str(tmp_path / "serving" / first)) == before
