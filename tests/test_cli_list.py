"""``lmfactory list`` without TensorFlow: the names come from the source tree
(cli/names.py) and must equal the live registry's and the shipped recipes."""

import os
import subprocess
import sys
import textwrap

import pytest

from lmfactory import models
from lmfactory.cli import names
from lmfactory.recipe import recipe_names

# Runs the console script's entry point, then reports which heavy modules got imported.
_PROBE = textwrap.dedent("""
    import sys
    from lmfactory.cli import main
    code = main(["list"])
    heavy = sorted(m for m in ("tensorflow", "keras", "tfx", "apache_beam", "absl.logging")
                   if m in sys.modules)
    print("HEAVY:" + ",".join(heavy))
    sys.exit(code)
""")


def test_list_imports_no_tensorflow_prints_nothing_else_and_matches_the_registry():
    result = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True,
                            timeout=120, env=dict(os.environ, PYTHONWARNINGS="default"))
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    *printed, heavy = result.stdout.splitlines()
    assert heavy == "HEAVY:"
    assert printed == sorted(models.names()) + recipe_names()
    assert {"bert", "gpt2", "bert_tiny_sst2"} <= set(printed)


def test_console_module_list_writes_no_stderr():
    result = subprocess.run([sys.executable, "-m", "lmfactory.cli", "list"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stderr == ""
    assert result.stdout.split() == names.architecture_names() + names.recipe_names()


def test_source_reader_finds_literal_registrations_in_packages_only(tmp_path):
    package = tmp_path / "alpha"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text(
        "from lmfactory.models import registry\n"
        "ARCH = registry.register(registry.Architecture(name='alpha', family='encoder'))\n")
    (package / "sub" / "extra.py").write_text(
        "from lmfactory.models.registry import Architecture\n"
        "OTHER = Architecture(name=\"beta\", family='decoder')\n"
        "NOT_A_NAME = Architecture(family='decoder', name=some_variable)\n"
        "docs = 'Architecture(name=\"gamma\")'\n")
    (tmp_path / "loose").mkdir()  # no __init__.py: models/__init__.py does not import it
    (tmp_path / "loose" / "x.py").write_text("Architecture(name='delta')\n")
    assert names.architecture_names(str(tmp_path)) == ["alpha", "beta"]


_NATIVE = textwrap.dedent("""
    import os, sys
    from lmfactory.cli.quiet import native_stderr_hidden
    with native_stderr_hidden(sys.argv[1] == "hide"):
        os.write(2, b"native line\\n")  # what TensorFlow's / absl's C++ logging does
        print("python line", file=sys.stderr)
    os.write(2, b"after\\n")
""")


@pytest.mark.parametrize("mode, expected", [
    ("hide", "python line\nafter\n"),
    ("show", "native line\npython line\nafter\n")])
def test_native_log_lines_are_hidden_by_default_and_shown_with_verbose(mode, expected):
    result = subprocess.run([sys.executable, "-c", _NATIVE, mode], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0 and result.stderr == expected


def test_default_verbosity_quiets_tensorflow_before_its_import(monkeypatch):
    import warnings

    from lmfactory import cli

    for name in cli.QUIET_ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
    with warnings.catch_warnings():
        cli._configure_logging(verbose=True)
        assert all(name not in os.environ for name in cli.QUIET_ENVIRONMENT)
        cli._configure_logging(verbose=False)
        assert os.environ["TF_CPP_MIN_LOG_LEVEL"] == "3"
        assert os.environ["GRPC_VERBOSITY"] == "ERROR"
