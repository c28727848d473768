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


# What a test file calls when it runs a whole pipeline, a Trainer stage or subprocesses.
HEAVY_MARKS = ("run_local(", "run_fn(", "subprocess.", "serving_models")
# The files importing it share the SavedModels tests/serving_models.py caches per process.
SERVING_MODELS_IMPORT = "import serving_models"


def _unit_of_work(path: Path) -> tuple[bool, str]:
    """``(heavy, group)`` of a test file: whether it runs pipelines or processes, and its
    xdist group (the file, or ``serving_models`` for the files sharing those exports)."""
    text = path.read_text(encoding="utf-8")
    group = "serving_models" if SERVING_MODELS_IMPORT in text else str(path.relative_to(REPO))
    return any(mark in text for mark in HEAVY_MARKS), group


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "dag: in a file that runs a pipeline, a Trainer stage, subprocesses or the "
        "serving exports of every architecture (the slow tier; -m 'not dag' leaves it out)")


@pytest.hookimpl(tryfirst=True)  # before -m reads the markers
def pytest_collection_modifyitems(config, items):
    """Every test of a heavy file (`HEAVY_MARKS`) gets the ``dag`` marker. Under
    ``--dist loadgroup`` (run.sh test) a test file is a unit of work, as with ``loadfile``
    (module fixtures such as a DAG run are built once), and the files importing
    serving_models are one unit. The heavy units go first, so that the workers' last units
    are short ones and they finish together (a stable sort keeps the file order)."""
    units = {}
    for item in items:
        if item.path not in units:
            units[item.path] = _unit_of_work(item.path)
        if units[item.path][0]:
            item.add_marker(pytest.mark.dag)
    if config.getoption("dist", default="no") != "loadgroup":
        return
    items.sort(key=lambda item: not units[item.path][0])
    for item in items:
        item.add_marker(pytest.mark.xdist_group(units[item.path][1]))
