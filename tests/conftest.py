import functools
import json
import os
from pathlib import Path

import pytest

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _share_the_cores_between_workers() -> None:
    """Each TensorFlow process sizes its intra-op and inter-op pools (and oneDNN its OpenMP
    pool) to every core of the machine; with as many pytest-xdist workers as cores or more,
    the workers' pools oversubscribe the cores and their threads spin against each other
    (two DAG test files ran 11% faster on 2 cores with one thread each, the whole suite 3%
    faster on the same day). Each worker, and every process it starts (Beam workers, the C
    API loader, command lines), gets its share of the cores, at least one thread; what the
    environment sets is kept."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers < 1:
        return
    share = str(max(1, (os.cpu_count() or 1) // workers))
    for variable in ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "OMP_NUM_THREADS"):
        os.environ.setdefault(variable, share)


_share_the_cores_between_workers()

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


# What a test file calls when it runs a whole pipeline, a Trainer stage or subprocesses
# (forked_tasks.run: container tasks in forked processes).
HEAVY_MARKS = ("run_local(", "run_fn(", "subprocess.", "forked_tasks.run(", "serving_models")
# The files importing it share the SavedModels tests/serving_models.py caches per process.
SERVING_MODELS_IMPORT = "import serving_models"


@functools.lru_cache(maxsize=None)
def _unit_of_work(path: Path) -> tuple[bool, str]:
    """``(heavy, unit)`` of a test file: whether it runs pipelines or processes, and the unit
    of work it belongs to under xdist (the file, or ``serving_models`` for the files sharing
    those exports)."""
    text = path.read_text(encoding="utf-8")
    unit = "serving_models" if SERVING_MODELS_IMPORT in text else str(path.relative_to(REPO))
    return any(mark in text for mark in HEAVY_MARKS), unit


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "dag: in a file that runs a pipeline, a Trainer stage, subprocesses or the "
        "serving exports of every architecture, or marked by hand: a check that builds "
        "published-size models, trains a two-stage distillation or starts Beam's worker "
        "processes (the slow tier; -m 'not dag' leaves it out)")


@functools.lru_cache(maxsize=None)
def _measured_seconds() -> dict:
    """``{unit: seconds}`` of a full run (tests/unit_seconds.json, the per-file sums of a
    ``--junitxml`` report): only the order in which units are handed out depends on it."""
    with open(REPO / "tests" / "unit_seconds.json", encoding="utf-8") as f:
        return json.load(f)


def _expected_seconds(path: Path) -> float:
    """The unit's measured time; a unit the table does not know yet is assumed long when it
    is heavy (a new DAG test), short otherwise."""
    heavy, unit = _unit_of_work(path)
    return _measured_seconds().get(unit, 120.0 if heavy else 1.0)


@pytest.hookimpl(tryfirst=True)  # before -m reads the markers
def pytest_collection_modifyitems(config, items):
    """Every test of a heavy file (`HEAVY_MARKS`) gets the ``dag`` marker. On an xdist worker
    (run.sh test), whose collection order is the order the units are handed out in, the
    longest units go first (longest-processing-time scheduling), so that the workers' last
    units are short ones and the workers finish together (a stable sort keeps the file order
    within a unit)."""
    for item in items:
        if _unit_of_work(item.path)[0]:
            item.add_marker(pytest.mark.dag)
    if hasattr(config, "workerinput"):
        items.sort(key=lambda item: -_expected_seconds(item.path))


def pytest_runtest_teardown(item, nextitem):
    """After the last test of the files sharing serving_models' exports (one unit of work,
    run in a row on one worker), their models are dropped (`serving_models.release`)."""
    unit = _unit_of_work(item.path)[1]
    if unit == "serving_models" and (nextitem is None
                                     or _unit_of_work(nextitem.path)[1] != unit):
        import serving_models

        serving_models.release()


def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile`` (run.sh test) with the files importing serving_models as one unit:
    a test file is a unit of work, so its module fixtures (a DAG run, exported models) are
    built once, on one worker; units are handed out in the workers' collection order (see
    above), not re-sorted by their number of tests. (xdist's ``loadgroup`` would group from
    markers, but it renames node ids through an attribute pytest 9 no longer reads.)"""
    if config.getoption("dist", default="no") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class FileUnitScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _unit_of_work(REPO / nodeid.split("::", 1)[0])[1]

    config.option.loadscopereorder = False
    return FileUnitScheduling(config, log)
