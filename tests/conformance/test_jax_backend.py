"""Every registered architecture on the JAX backend, in a process without TensorFlow.

The architectures that declare JAX (``Architecture.backends``) give the TensorFlow
backend's outputs on the same weights (`backend_parity.PARITY_ATOL`), the same loss for
each pretraining objective, and lower it in jit-compiled Adam steps; the others refuse
`models.build` in one line. The JAX side runs in ``.venv-jax`` (``./run.sh setup``;
requirements-jax.txt), with TensorFlow blocked in ``sys.modules``.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from lmfactory import models
from lmfactory.models import registry

from . import backend_parity

TESTS = Path(__file__).resolve().parents[1]
REPOSITORY = TESTS.parent
JAX_RUN_TIMEOUT_S = 900


def _run_on_jax(references: Path, results: Path) -> dict:
    python = backend_parity.jax_python(str(REPOSITORY))
    assert os.path.exists(python), (f"{python} is missing: ./run.sh setup makes .venv-jax "
                                    f"(Keras on JAX without TensorFlow, requirements-jax.txt)")
    environment = {key: value for key, value in os.environ.items()
                   if not key.startswith(("PYTHON", "VIRTUAL_ENV", "KERAS_", "TF_"))}
    environment["KERAS_BACKEND"] = "jax"
    completed = subprocess.run(
        [python, "-m", "conformance.backend_parity", str(references), str(results)],
        cwd=TESTS, env=environment, capture_output=True, text=True,
        timeout=JAX_RUN_TIMEOUT_S)
    assert completed.returncode == 0, completed.stderr[-3000:]
    return json.loads(results.read_text())


def _failures(name: str, result: dict) -> list:
    if "error" in result:
        return [f"{name}: {result['error']}"]
    failures = []
    if result["backbone_max_abs_difference"] > backend_parity.PARITY_ATOL:
        failures.append(f"{name}: backbone outputs differ by "
                        f"{result['backbone_max_abs_difference']:.2e}")
    for objective, check in result["objectives"].items():
        difference = check["loss_difference"]
        scale = max(1.0, abs(check["loss_tensorflow"]))
        if difference is not None and difference > backend_parity.PARITY_ATOL * scale:
            failures.append(f"{name} {objective}: loss {check['loss_jax']:.6f} on JAX, "
                            f"{check['loss_tensorflow']:.6f} on TensorFlow")
        if not check["loss_after_steps"] < check["loss_jax"]:
            failures.append(f"{name} {objective}: loss {check['loss_jax']:.4f} -> "
                            f"{check['loss_after_steps']:.4f} after {check['steps']} steps")
    return failures


def _loss_difference(check: dict) -> str:
    if check["loss_difference"] is None:
        return "sampled"
    return f"{check['loss_difference']:.1e}"


def _report(results: dict) -> str:
    lines = [f"backend {results['backend']}, keras {results['keras']}"]
    for name, result in results["architectures"].items():
        if "refused" in result:
            lines.append(f"{name:24s} TensorFlow only")
        elif "error" in result:
            lines.append(f"{name:24s} ERROR {result['error']}")
        else:
            losses = ", ".join(f"{objective} loss {check['loss_jax']:.3f} "
                               f"(|diff| {_loss_difference(check)}) -> "
                               f"{check['loss_after_steps']:.3f}"
                               for objective, check in result["objectives"].items())
            lines.append(f"{name:24s} outputs max |diff| "
                         f"{result['backbone_max_abs_difference']:.1e}  {losses}")
    return "\n".join(lines)


def test_architectures_run_on_jax_without_tensorflow(tmp_path):
    names = models.names()
    backend_parity.write_references(names, str(tmp_path))
    results = _run_on_jax(tmp_path, tmp_path / "results.json")
    print(_report(results))
    assert results["backend"] == "jax"
    assert not results["tensorflow_imported"], "TensorFlow was imported on the JAX side"
    assert sorted(results["architectures"]) == sorted(names)
    failures = []
    for name, result in results["architectures"].items():
        if "jax" in models.get(name).backends:
            failures += _failures(name, result)
        else:
            message = result["refused"] or ""
            if "\n" in message or "TensorFlow backend only" not in message \
                    or models.get(name).tensorflow_only_because not in message:
                failures.append(f"{name}: models.build on JAX gave {message!r}, not the "
                                f"one-line refusal with its reason")
    assert not failures, "\n".join(failures)
    # Most of the zoo is backend-neutral: a change that ties a common layer to TensorFlow
    # shows here as a drop, not as one more quiet exception.
    assert sum("jax" in models.get(name).backends for name in names) >= 20


def test_backends_are_declared_with_a_reason():
    with pytest.raises(ValueError, match="tensorflow_only_because"):
        _toy_architecture(backends=("tensorflow",))
    with pytest.raises(ValueError, match="backends must include 'tensorflow'"):
        _toy_architecture(backends=("jax",), tensorflow_only_because="x")
    with pytest.raises(ValueError, match="tensorflow_only_because"):
        _toy_architecture(tensorflow_only_because="a reason without leaving a backend out")
    architecture = _toy_architecture(backends=("tensorflow",),
                                     tensorflow_only_because="its layers use tf ops")
    with pytest.raises(RuntimeError, match=r"'toy' runs on the TensorFlow backend only "
                                           r"\(its layers use tf ops\); the Keras backend is "
                                           r"'jax'"):
        architecture.check_backend("jax")
    architecture.check_backend("tensorflow")


def _toy_architecture(**fields):
    bert = models.get("bert")
    return registry.Architecture(name="toy", family="encoder", backbone_cls=bert.backbone_cls,
                                 presets=bert.presets, tokenizer_kind=bert.tokenizer_kind,
                                 pretrainers=dict(bert.pretrainers), **fields)
