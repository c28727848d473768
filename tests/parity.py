"""Shared helpers of the numeric-parity tests (fixtures: tests/fixtures/make_parity_fixtures.py).

    inputs, expected, folder = parity.load_fixture("bert")
    parity.assert_close_on_tokens(ours, expected["last_hidden_state"],
                                  inputs["attention_mask"])
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "hf"
TOLERANCE = 1e-4  # max abs error on non-padding positions


def fixture_dir(name: str) -> Path:
    folder = FIXTURES / name
    if not (folder / "config.json").exists():
        raise FileNotFoundError(f"No parity fixture {folder}; make it with "
                                f"tests/fixtures/make_parity_fixtures.py {name}")
    return folder


def load_fixture(name: str):
    """``(inputs, expected, folder)``: dicts of numpy arrays and the fixture folder."""
    folder = fixture_dir(name)
    with np.load(folder / "inputs.npz") as inputs, np.load(folder / "expected.npz") as expected:
        return dict(inputs), dict(expected), folder


def tokenizer_expectations(name: str) -> dict:
    with open(fixture_dir(name) / "tokenizer_expected.json", encoding="utf-8") as f:
        return json.load(f)


def max_error_on_tokens(actual, expected, attention_mask) -> float:
    """Largest |actual - expected| over real (non-padding) positions of [B, T, ...] arrays."""
    actual, expected = np.asarray(actual, dtype="float64"), np.asarray(expected, "float64")
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    real = np.asarray(attention_mask).astype(bool)
    return float(np.max(np.abs(actual[real] - expected[real])))


def assert_close_on_tokens(actual, expected, attention_mask, tolerance=TOLERANCE) -> float:
    error = max_error_on_tokens(actual, expected, attention_mask)
    assert error <= tolerance, f"max abs error {error:.3g} > {tolerance:g} on real tokens"
    return error


def assert_close(actual, expected, tolerance=TOLERANCE) -> float:
    actual, expected = np.asarray(actual, dtype="float64"), np.asarray(expected, "float64")
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    error = float(np.max(np.abs(actual - expected)))
    assert error <= tolerance, f"max abs error {error:.3g} > {tolerance:g}"
    return error
