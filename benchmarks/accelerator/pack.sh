#!/usr/bin/env bash
# Downloads the wheels that benchmarks/accelerator_pretraining.py needs on an x86-64 Linux
# machine with Python 3.12 and JAX but no Keras and no package index (README.md beside this
# file): keras, keras-hub, keras-nlp and the two packages keras needs that such a machine
# lacks (namex, optree). They go to benchmarks/accelerator/wheels/, a folder that ignores
# itself, so git never sees the wheels and the device tool's `carry` can name it.
#
#   benchmarks/accelerator/pack.sh          # PYTHON=... picks the interpreter running pip
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
wheels="$here/wheels"
python="${PYTHON:-python3}"

# The versions the project's JAX environment (.venv-jax) is tested with.
packages=(keras==3.15.1 keras-hub==0.32.0 keras-nlp==0.32.0 namex==0.1.0 optree==0.20.0)

mkdir -p "$wheels"
printf '*\n' >"$wheels/.gitignore"
# Only these wheels travel: one version of each, none left from an earlier pack.
find "$wheels" -name '*.whl' -delete
"$python" -m pip download --quiet --no-deps --only-binary=:all: \
    --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --dest "$wheels" "${packages[@]}"
ls -l "$wheels"
du -sh "$wheels"
