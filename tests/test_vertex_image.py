"""The Dockerfile of the image Vertex AI tasks run.

CI has no Docker daemon, so the image is not built here; what decides whether it would work
is checked instead: the base image is TFX's own at the version constraints.txt pins, every
``pip install`` is pinned by constraints.txt, and the build context the ``.dockerignore``
leaves builds (offline) a wheel holding every module the compiled pipeline's containers
import.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TFX_IMAGE = "gcr.io/tfx-oss-public/tfx"
TEST_TOOLS = ("pytest", "pytest-timeout", "pytest-xdist")


def instructions() -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` of the Dockerfile: comments dropped, continued lines
    joined."""
    joined, current = [], ""
    for line in (REPO / "Dockerfile").read_text().splitlines():
        if line.lstrip().startswith("#") or not line.strip():
            continue
        current += line.rstrip()
        if current.endswith("\\"):
            current = current[:-1] + " "
            continue
        joined.append(current.strip())
        current = ""
    assert not current, "the Dockerfile ends inside a continued line"
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in joined]


def pins() -> dict[str, str]:
    result = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==")
            result[name.strip().lower()] = version.split(";")[0].strip()
    return result


def requirement_name(line: str) -> str:
    return re.split(r"[\[=<>~; ]", line.strip(), maxsplit=1)[0].lower()


def test_base_image_is_tfx_at_the_pinned_version():
    bases = [arguments for instruction, arguments in instructions() if instruction == "FROM"]
    assert len(bases) == 1
    image, tag = bases[0].split()[0].rsplit(":", 1)
    assert image == TFX_IMAGE
    assert tag == pins()["tfx"] == "1.16.0"


def test_every_pip_install_is_pinned_by_constraints():
    installs = [command.strip() for instruction, arguments in instructions()
                if instruction == "RUN" for command in arguments.split("&&")
                if "pip install" in command]
    assert len(installs) >= 2
    for command in installs:
        assert "-c constraints.txt" in command, command
    installed = [requirement_name(line) for line in
                 (REPO / "requirements.in").read_text().splitlines()
                 if line.strip() and not line.startswith("#")]
    runtime = [name for name in installed if name not in TEST_TOOLS]
    missing = [name for name in runtime if name not in pins()]
    assert not missing, f"requirements.in names packages constraints.txt does not pin: {missing}"
    # What the grep of the RUN line leaves out is exactly the test tools.
    run = next(arguments for instruction, arguments in instructions()
               if instruction == "RUN" and "requirements.in" in arguments)
    excluded = re.search(r"grep -v -E '([^']+)' requirements\.in", run)[1]
    assert sorted(set(installed) - set(runtime)) == sorted(
        name for name in installed if re.match(excluded, name))


def _ignore_patterns() -> list[re.Pattern]:
    """.dockerignore lines as regexes over context-relative paths (Docker's rules for the
    forms the file uses: a name, ``*``, ``**/``; a matched folder drops its contents)."""
    patterns = []
    for line in (REPO / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        assert not line.startswith("!") and "?" not in line and "[" not in line, line
        regex = re.escape(line.strip("/")).replace(r"\*\*/", "(?:.*/)?").replace(r"\*", "[^/]*")
        patterns.append(re.compile(regex))
    return patterns


def build_context(target: Path) -> Path:
    """Copies what `docker build .` would send (the worktree minus .dockerignore)."""
    patterns = _ignore_patterns()

    def ignored(relative: str) -> bool:
        return any(pattern.fullmatch(relative) for pattern in patterns)

    for folder, folders, files in os.walk(REPO):
        relative_folder = os.path.relpath(folder, REPO)
        prefix = "" if relative_folder == "." else relative_folder + "/"
        folders[:] = [name for name in folders if not ignored(prefix + name)]
        for name in files:
            if not ignored(prefix + name):
                (target / prefix).mkdir(parents=True, exist_ok=True)
                shutil.copy2(os.path.join(folder, name), target / prefix / name)
    return target


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    tmp = tmp_path_factory.mktemp("image")
    context = build_context(tmp / "context")
    for instruction, arguments in instructions():
        if instruction == "COPY" and not arguments.startswith("."):
            for source in arguments.split()[:-1]:
                assert (context / source).is_file(), f"COPY {source}: not in the context"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "--no-index", "-q", "-w", str(tmp / "dist"), str(context)],
                   check=True, capture_output=True, timeout=300)
    built, = (tmp / "dist").glob("lmfactory-*.whl")
    return zipfile.ZipFile(built)


def test_context_holds_the_package_and_no_local_work(wheel):
    names = set(wheel.namelist())
    assert "lmfactory/__init__.py" in names
    # The console script's module.
    script = re.search(r"^lmfactory = ([\w.]+):main$", wheel.read(
        "lmfactory-0.1.0.dist-info/entry_points.txt").decode(), re.M)[1].replace(".", "/")
    assert f"{script}.py" in names or f"{script}/__init__.py" in names
    assert "lmfactory/recipes/bert_tiny_sst2.yaml" in names
    assert not [name for name in names if name.startswith(
        ("lmfactory/tests/", "lmfactory/benchmarks/", "lmfactory/data/")) or "__pycache__" in name]
    # The Kubeflow v2 entrypoint imports the vocabulary artifact class by its type name.
    assert "def __getattr__" in wheel.read("lmfactory/__init__.py").decode()


def test_image_holds_every_module_the_compiled_spec_imports(wheel, tmp_path):
    from lmfactory.pipelines import runners
    from lmfactory.recipe import load_recipe

    output = tmp_path / "pipeline.json"
    runners.compile_vertex(load_recipe("bert_tiny_sst2"), str(output), "gs://bucket/root",
                           image="lmfactory:test", local_data="as_is")
    text = output.read_text()
    spec = json.loads(text)["pipelineSpec"]
    modules = set()
    for executor in spec["deploymentSpec"]["executors"].values():
        args = executor.get("container", {}).get("args", [])
        if "--executor_class_path" in args:
            modules.add(args[args.index("--executor_class_path") + 1].rsplit(".", 1)[0])
    modules |= {match.rsplit(".", 1)[0] for match in
                re.findall(r"lmfactory(?:\.\w+)+\.run_fn", text)}
    ours = {module for module in modules if module.startswith("lmfactory.")}
    assert "lmfactory.components.trainer.run_fn" in ours and len(ours) >= 5
    names = set(wheel.namelist())
    for module in sorted(ours):
        path = module.replace(".", "/")
        assert f"{path}.py" in names or f"{path}/__init__.py" in names, module
