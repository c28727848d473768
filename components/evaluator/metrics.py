"""Task metrics computed from predictions (pure numpy, unit-testable)."""

from __future__ import annotations

import math

import numpy as np

# metric name -> True when larger is better
METRICS = {"accuracy": True, "f1": True, "macro_f1": True, "matthews_corrcoef": True,
           "pearson": True, "spearman": True, "mse": False, "perplexity": False,
           "bits_per_character": False, "entity_f1": True, "entity_precision": True,
           "entity_recall": True, "exact_match": True,
           "bleu": True,  # sacreBLEU corpus BLEU (components/tasks/translation.py)
           # word vectors (components/tasks/word_vectors.py)
           "sgns_loss": False, "analogy_accuracy": True, "similarity_spearman": True,
           # entity typing (components/tasks/entity_typing.py)
           "strict_accuracy": True, "loose_macro_f1": True, "loose_micro_f1": True}
# The metrics of each fine-tuning task kind (evaluation.metric must be one of its kind's).
CLASSIFICATION_METRICS = ("accuracy", "f1", "macro_f1", "matthews_corrcoef")
REGRESSION_METRICS = ("pearson", "spearman", "mse")


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


def matthews_corrcoef(labels, predictions) -> float:
    """Matthews correlation coefficient (GLUE's CoLA metric; Matthews 1975): for two classes
    ``(TP·TN − FP·FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN))``; for K classes Gorodkin's
    (2004) generalisation from the confusion matrix C, ``(c·s − Σ_k p_k t_k) /
    sqrt((s² − Σ p_k²)(s² − Σ t_k²))`` with c correct, s samples, p_k predicted and t_k true
    counts of class k. 0.0 when a denominator factor is zero (all labels or all predictions
    one class), as scikit-learn defines it."""
    labels, predictions = np.asarray(labels).ravel(), np.asarray(predictions).ravel()
    if labels.size == 0:
        raise ValueError("Matthews correlation of an empty set is undefined")
    if labels.shape != predictions.shape:
        raise ValueError(f"{labels.size} labels but {predictions.size} predictions")
    classes = np.union1d(labels, predictions)
    true_counts = np.array([np.sum(labels == c) for c in classes], dtype=np.float64)
    predicted_counts = np.array([np.sum(predictions == c) for c in classes], dtype=np.float64)
    correct = float(np.sum(labels == predictions))
    samples = float(labels.size)
    numerator = correct * samples - float(np.dot(predicted_counts, true_counts))
    denominator = math.sqrt(samples ** 2 - float(np.dot(predicted_counts, predicted_counts))) \
        * math.sqrt(samples ** 2 - float(np.dot(true_counts, true_counts)))
    return 0.0 if denominator == 0.0 else float(numerator / denominator)


def pearson(labels, predictions) -> float:
    """Pearson's r (GLUE's STS-B metric). 0.0 when either side is constant (no variance, the
    coefficient is undefined; a constant predictor measures no correlation)."""
    x = np.asarray(labels, dtype=np.float64).ravel()
    y = np.asarray(predictions, dtype=np.float64).ravel()
    if x.size < 2:
        raise ValueError(f"a correlation needs at least two pairs, got {x.size}")
    if x.shape != y.shape:
        raise ValueError(f"{x.size} labels but {y.size} predictions")
    x, y = x - x.mean(), y - y.mean()
    denominator = math.sqrt(float(np.dot(x, x)) * float(np.dot(y, y)))
    return 0.0 if denominator == 0.0 else float(np.dot(x, y) / denominator)


def average_ranks(values) -> np.ndarray:
    """1-based ranks; tied values share the mean of the ranks they span ([10, 20, 20, 30] ->
    [1, 2.5, 2.5, 4])."""
    values = np.asarray(values, dtype=np.float64).ravel()
    order = np.argsort(values, kind="mergesort")
    ranks = np.empty(values.size, dtype=np.float64)
    start = 0
    while start < values.size:
        end = start
        while end + 1 < values.size and values[order[end + 1]] == values[order[start]]:
            end += 1
        ranks[order[start:end + 1]] = (start + end) / 2.0 + 1.0
        start = end + 1
    return ranks


def spearman(labels, predictions) -> float:
    """Spearman's rank correlation: Pearson's r of the average ranks (ties share their mean
    rank), as scipy.stats.spearmanr computes it."""
    return pearson(average_ranks(labels), average_ranks(predictions))


def mse(labels, predictions) -> float:
    x = np.asarray(labels, dtype=np.float64).ravel()
    y = np.asarray(predictions, dtype=np.float64).ravel()
    if x.size == 0:
        raise ValueError("mean squared error of an empty set is undefined")
    return float(np.mean((x - y) ** 2))


def classification_metrics(labels, predictions) -> dict:
    return {"accuracy": accuracy(labels, predictions), "f1": f1(labels, predictions),
            "macro_f1": macro_f1(labels, predictions),
            "matthews_corrcoef": matthews_corrcoef(labels, predictions),
            "examples": int(np.size(labels))}


def regression_metrics(labels, predictions) -> dict:
    return {"pearson": pearson(labels, predictions), "spearman": spearman(labels, predictions),
            "mse": mse(labels, predictions), "examples": int(np.size(labels))}


def _f1(precision: float, recall: float) -> float:
    return 0.0 if precision + recall == 0 else 2 * precision * recall / (precision + recall)


def typing_metrics(labels, predictions) -> dict:
    """Multi-label entity-typing metrics of Ling & Weld (2012), the figures of ERNIE's
    Tables 2-3 (FIGER: strict accuracy, loose macro-F1, loose micro-F1; Open Entity: loose
    micro precision / recall / F1). ``labels`` and ``predictions`` are [N, K] 0/1 arrays
    (true and predicted types of N mentions). Strict: a mention counts when its predicted
    type set equals its true set. Loose macro: precision and recall averaged over the
    mentions, |pred ∩ true| / |pred| and |pred ∩ true| / |true| (a mention with no
    predicted type adds 0 to the precision sum and is still counted, as the released ERNIE
    evaluation code/eval_typing.py averages both over every mention). Loose micro: the
    summed intersections over the summed predicted / true counts. F1 is 0 when P + R = 0."""
    labels = np.asarray(labels).astype(bool)
    predictions = np.asarray(predictions).astype(bool)
    if labels.shape != predictions.shape or labels.ndim != 2:
        raise ValueError(f"labels {labels.shape} and predictions {predictions.shape} must "
                         f"be [N, K] of one shape")
    if labels.shape[0] == 0:
        raise ValueError("typing metrics of an empty set are undefined")
    both = np.sum(labels & predictions, axis=1).astype(np.float64)
    predicted = np.sum(predictions, axis=1).astype(np.float64)
    true = np.sum(labels, axis=1).astype(np.float64)
    macro_p = float(np.mean(np.divide(both, predicted, out=np.zeros_like(both),
                                      where=predicted > 0)))
    macro_r = float(np.mean(np.divide(both, true, out=np.zeros_like(both), where=true > 0)))
    micro_p = float(both.sum() / predicted.sum()) if predicted.sum() else 0.0
    micro_r = float(both.sum() / true.sum()) if true.sum() else 0.0
    return {"strict_accuracy": float(np.mean(np.all(labels == predictions, axis=1))),
            "loose_macro_precision": macro_p, "loose_macro_recall": macro_r,
            "loose_macro_f1": _f1(macro_p, macro_r),
            "loose_micro_precision": micro_p, "loose_micro_recall": micro_r,
            "loose_micro_f1": _f1(micro_p, micro_r), "examples": int(labels.shape[0])}


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


# What each reported figure means, as the Evaluator's report and ``lmfactory evaluate`` print
# it beside the value, so that a metric says what it means.
MEANINGS = {
    "accuracy": "fraction of the evaluated examples predicted right, each counted once",
    "macro_f1": "unweighted mean of the per-class F1 scores",
    "matthews_corrcoef": "Matthews correlation of predicted and true classes, -1..1 (CoLA)",
    "pearson": "Pearson correlation of predicted and gold scores (STS-B)",
    "spearman": "Spearman rank correlation of predicted and gold scores",
    "mse": "mean squared error of the predicted scores",
    "perplexity": "exp(mean next-token negative log-likelihood) over the held-out tokens",
    "nll": "mean next-token negative log-likelihood in nats",
    "bits_per_character": "mean negative log-likelihood per character (byte), in bits",
    "entity_f1": "entity-level F1 (an entity counts when its span and type match; CoNLL)",
    "entity_precision": "entity-level precision",
    "entity_recall": "entity-level recall",
    "exact_match": "percentage of questions whose normalised answer equals a gold answer",
    "bleu": "corpus BLEU (sacreBLEU's 13a tokenization)",
    "sgns_loss": "mean skip-gram negative-sampling loss per (input, target) pair",
    "held_out_exact_match": "SQuAD 2.0 exact_match at no-answer thresholds tuned on the other "
                            "half of the questions (never on the scored one)",
    "held_out_f1": "SQuAD 2.0 f1 at no-answer thresholds tuned on the other half of the "
                   "questions (never on the scored one)",
    "best_f1": "f1 at the best no-answer threshold for these very records (an upper bound)",
    "null_threshold": "the exported no-answer threshold, tuned by the FineTuner on its eval "
                      "split",
    "strict_accuracy": "fraction of the mentions whose predicted type set equals the true "
                       "set (Ling & Weld 2012)",
    "loose_macro_f1": "F1 of the per-mention type precision and recall, averaged over the "
                      "mentions (Ling & Weld 2012)",
    "loose_micro_f1": "F1 of the type predictions pooled over all mentions (Ling & Weld "
                      "2012)",
    "examples": "number of examples evaluated",
    "tokens": "number of predicted tokens",
}


def positive_class(task: dict | None) -> str:
    """The class ``f1`` is computed for: class id 1, named by the task's labels if any."""
    labels = (task or {}).get("label_vocabulary") or []
    return f"class 1 ({labels[1]!r})" if len(labels) > 1 else "class 1"


def describe(name: str, task: dict | None = None) -> str:
    """One line saying what the metric ``name`` of a model of ``task`` measures ('' when
    unknown). ``f1`` depends on the task: a classifier's binary F1 of `positive_class` (GLUE's
    MRPC / QQP F1), a span extractor's SQuAD token-overlap F1."""
    kind = (task or {}).get("kind")
    if name == "f1":
        if kind == "span_qa":
            return "mean token-overlap F1 of the answers with the best gold answer, 0-100"
        return (f"F1 of {positive_class(task)} against all others, as GLUE scores MRPC / QQP "
                f"(macro_f1 averages every class)")
    return MEANINGS.get(name, "")


def notes(results: dict, task: dict | None, split: str = "eval",
          tuned_on_scored: bool = True) -> list[str]:
    """Lines the evaluation report prints under its metrics so the figures are not misread:
    how the Evaluator's accuracy differs from the FineTuner's logged one, and on which
    records a SQuAD 2.0 no-answer threshold was tuned. ``split``: what was scored;
    ``tuned_on_scored``: whether it is the split the FineTuner tuned the threshold on (the
    pipeline's Evaluator), not a new file (``lmfactory evaluate``)."""
    task = task or {}
    lines = []
    if "accuracy" in results:
        count = results.get("examples")
        lines.append(
            f"accuracy counts each of the {count if count is not None else 'evaluated'} "
            f"examples of {split} once. The FineTuner's logged accuracy (training curve, "
            f"train_metrics) is Keras's mean over its eval_steps whole batches of the "
            f"repeated eval split (some examples twice, some never), so the two differ.")
    if task.get("kind") == "span_qa" and task.get("version") == "2.0":
        threshold = (f"The no-answer threshold null_threshold = {task.get('null_threshold')} "
                     f"was tuned by the FineTuner on its eval split")
        if tuned_on_scored:
            lines.append(
                f"{threshold}, the records scored here: exact_match / f1 are tuned-split "
                f"figures (optimistic), and best_f1 is the best threshold on these records. "
                f"held_out_exact_match / held_out_f1 tune the threshold on one half of the "
                f"questions and score the other half (and the reverse), so no question is "
                f"scored with a threshold it helped choose; `lmfactory evaluate MODEL --data "
                f"NEW.json` scores a file the threshold never saw.")
        else:
            lines.append(
                f"{threshold}; exact_match / f1 here are on {split}, which it never saw "
                f"(unless it is that split); best_f1 and held_out_* tune a threshold on "
                f"{split} itself.")
    return lines
