"""Metric implementations against hand-computed cases, and the blessing rule."""

import math

import pytest

from lmfactory.components.evaluator import metrics


def test_accuracy_and_f1_by_hand():
    labels = [1, 1, 1, 0, 0, 0, 1, 0]
    predictions = [1, 0, 1, 0, 1, 0, 1, 0]
    # TP=3 FP=1 FN=1 TN=3
    assert metrics.accuracy(labels, predictions) == 6 / 8
    precision, recall = 3 / 4, 3 / 4
    assert metrics.f1(labels, predictions) == pytest.approx(
        2 * precision * recall / (precision + recall))
    # class 0: TP=3 FP=1 FN=1 -> same F1; macro = 0.75
    assert metrics.macro_f1(labels, predictions) == pytest.approx(0.75)


def test_f1_without_positive_predictions_is_zero():
    assert metrics.f1([1, 0, 1], [0, 0, 0]) == 0.0


def test_perplexity_is_exp_of_mean_nll():
    assert metrics.perplexity(total_nll=2 * math.log(4.0), total_tokens=2) == pytest.approx(4.0)
    with pytest.raises(ValueError):
        metrics.perplexity(1.0, 0)


@pytest.mark.parametrize("metric, value, threshold, baseline, expected", [
    ("accuracy", 0.80, 0.75, None, True),
    ("accuracy", 0.70, 0.75, None, False),
    ("accuracy", 0.80, 0.75, 0.82, False),   # worse than the last blessed model
    ("accuracy", 0.82, 0.75, 0.82, True),    # ties pass
    ("perplexity", 90.0, 100.0, None, True),  # lower is better
    ("perplexity", 120.0, 100.0, None, False),
    ("perplexity", 90.0, 100.0, 80.0, False),
])
def test_blessing_rule(metric, value, threshold, baseline, expected):
    blessed, reason = metrics.passes(metric, value, threshold, baseline)
    assert blessed is expected
    assert metric in reason
