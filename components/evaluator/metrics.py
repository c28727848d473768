"""Task metrics computed from predictions (pure numpy, unit-testable)."""

from __future__ import annotations

import math

import numpy as np

# metric name -> True when larger is better
METRICS = {"accuracy": True, "f1": True, "macro_f1": True, "perplexity": False,
           "bits_per_character": False}


def accuracy(labels: np.ndarray, predictions: np.ndarray) -> float:
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    if labels.size == 0:
        raise ValueError("accuracy of an empty set is undefined")
    return float(np.mean(labels == predictions))


def f1(labels: np.ndarray, predictions: np.ndarray, positive: int = 1) -> float:
    """Binary F1 of the positive class (GLUE's MRPC/QQP F1)."""
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    true_positive = np.sum((predictions == positive) & (labels == positive))
    predicted = np.sum(predictions == positive)
    actual = np.sum(labels == positive)
    if predicted == 0 or actual == 0:
        return 0.0
    precision, recall = true_positive / predicted, true_positive / actual
    return 0.0 if true_positive == 0 else float(2 * precision * recall / (precision + recall))


def macro_f1(labels: np.ndarray, predictions: np.ndarray) -> float:
    classes = np.union1d(np.unique(labels), np.unique(predictions))
    return float(np.mean([f1(labels, predictions, positive=c) for c in classes]))


def classification_metrics(labels, predictions) -> dict:
    return {"accuracy": accuracy(labels, predictions), "f1": f1(labels, predictions),
            "macro_f1": macro_f1(labels, predictions), "examples": int(np.size(labels))}


def perplexity(total_nll: float, total_tokens: float) -> float:
    """exp(mean next-token negative log-likelihood in nats)."""
    if total_tokens <= 0:
        raise ValueError("perplexity over zero tokens is undefined")
    return float(math.exp(total_nll / total_tokens))


def bits_per_character(total_nll: float, total_characters: float) -> float:
    """Mean negative log-likelihood per character in bits, ``nll / ln 2`` (the measure of
    character-level LMs, Al-Rfou et al. 2018 §3; for a byte vocabulary a character is a
    byte, as in enwik8)."""
    if total_characters <= 0:
        raise ValueError("bits per character over zero characters are undefined")
    return float(total_nll / total_characters / math.log(2.0))


def passes(metric: str, value: float, threshold: float | None,
           baseline_value: float | None) -> tuple[bool, str]:
    """The blessing rule: over the threshold and not worse than the last blessed model."""
    higher_is_better = METRICS[metric]
    better_or_equal = (lambda a, b: a >= b) if higher_is_better else (lambda a, b: a <= b)
    if threshold is not None and not better_or_equal(value, threshold):
        return False, f"{metric}={value:.4f} does not pass threshold {threshold}"
    if baseline_value is not None and not better_or_equal(value, baseline_value):
        return False, f"{metric}={value:.4f} is worse than the blessed baseline's {baseline_value:.4f}"
    return True, f"{metric}={value:.4f} passes (threshold {threshold}, baseline {baseline_value})"
