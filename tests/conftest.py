import os
from pathlib import Path

import pytest

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

REPO = Path(__file__).resolve().parent.parent
SHARED_DATA = REPO.parent / "shared" / "data"
DEMO_DATA = REPO / "data" / "demo"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        raise FileNotFoundError(f"The shared data folder {SHARED_DATA} is missing")
    return SHARED_DATA


@pytest.fixture(scope="session")
def demo_data() -> Path:
    return DEMO_DATA


# Test files whose tests share the SavedModels that tests/serving_models.py caches per
# process: one worker process runs them all under `pytest -n N --dist loadgroup`.
SERVING_MODEL_FILES = {"test_serving_ops.py", "test_serving_docs.py", "test_serving_warmup.py",
                       "test_entity_typing.py"}


# What a test file calls when it runs a whole pipeline, a Trainer stage or subprocesses.
HEAVY_MARKS = ("run_local(", "run_fn(", "subprocess.", "serving_models")


def pytest_collection_modifyitems(config, items):
    """Under ``--dist loadgroup`` (run.sh test) a test file is a unit of work, as with
    ``loadfile`` (module fixtures such as a DAG run are built once), and the files of
    SERVING_MODEL_FILES are one unit."""
    if config.getoption("dist", default="no") != "loadgroup":
        return
    # The files that run whole pipelines or start processes go first, so that the workers'
    # last units are short ones and they finish together (a stable sort keeps file order).
    heavy = {}
    for item in items:
        if item.path not in heavy:
            text = item.path.read_text(encoding="utf-8")
            heavy[item.path] = any(mark in text for mark in HEAVY_MARKS)
    items.sort(key=lambda item: not heavy[item.path])
    for item in items:
        name = item.path.name
        group = "serving_models" if name in SERVING_MODEL_FILES else str(
            item.path.relative_to(REPO))
        item.add_marker(pytest.mark.xdist_group(group))
