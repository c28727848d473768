"""SQuAD's official metrics: exact match and token F1 after answer normalisation (v1.1), plus
v2.0's no-answer handling and the no-answer threshold tuned on dev.

Rajpurkar et al. 2016 §3 / the v1.1 evaluation script: an answer is normalised by lower-casing,
deleting ASCII punctuation, deleting the articles "a", "an", "the" as whole words and collapsing
whitespace; EM is 1 when the normalised prediction equals a normalised gold answer; F1 is the
harmonic mean of the bag-of-tokens precision and recall; both take the maximum over the gold
answers of a question and are averaged over questions (x 100).

Rajpurkar et al. 2018 (v2.0): an unanswerable question has the single gold answer "" and an
empty prediction scores 1 on it (EM and F1 both), a non-empty one 0. A system abstains when
its no-answer score beats the best span's score by more than a threshold; the threshold is
chosen on dev to maximise EM (or F1), as the v2.0 script's ``best_exact_thresh`` does.
"""

from __future__ import annotations

import collections
import hashlib
import itertools
import re
import string

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    lowered = text.lower()
    without_punctuation = "".join(c for c in lowered if c not in _PUNCTUATION)
    without_articles = _ARTICLES.sub(" ", without_punctuation)
    return " ".join(without_articles.split())


def exact_match(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def token_f1(prediction: str, gold: str) -> float:
    predicted_tokens = normalize_answer(prediction).split()
    gold_tokens = normalize_answer(gold).split()
    if not predicted_tokens or not gold_tokens:
        # v2.0: "" against "" is a correct abstention; otherwise nothing overlaps.
        return float(predicted_tokens == gold_tokens)
    overlap = collections.Counter(predicted_tokens) & collections.Counter(gold_tokens)
    shared = sum(overlap.values())
    if shared == 0:
        return 0.0
    precision = shared / len(predicted_tokens)
    recall = shared / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def _gold_answers(answers) -> list[str]:
    """The gold texts of a question; v2.0 unanswerable questions (no answers) -> [""]."""
    texts = [a["text"] if isinstance(a, dict) else a for a in answers]
    texts = [t for t in texts if normalize_answer(t)]
    return texts or [""]


def question_scores(prediction: str, answers) -> tuple[float, float]:
    """(EM, F1) of one prediction: the best over the question's gold answers."""
    golds = _gold_answers(answers)
    return (max(exact_match(prediction, g) for g in golds),
            max(token_f1(prediction, g) for g in golds))


def read_gold(dataset: dict) -> dict[str, list[str]]:
    """question id -> gold answer texts, from a SQuAD JSON (``{"data": [...]}``)."""
    if "data" not in dataset:
        raise ValueError("a SQuAD file has a top-level 'data' list; this one has keys "
                         f"{sorted(dataset)}")
    gold = {}
    for article in dataset["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                gold[qa["id"]] = [a["text"] for a in qa.get("answers", [])]
    return gold


def evaluate(gold: dict[str, list[str]], predictions: dict[str, str]) -> dict:
    """EM and F1 (0-100) over every gold question; a question with no prediction scores 0
    and is counted in ``missing`` (the official script prints a warning for it)."""
    if not gold:
        raise ValueError("no gold questions to evaluate")
    exact_total = f1_total = 0.0
    missing = 0
    has_answer = no_answer = 0
    for qid, answers in gold.items():
        if _gold_answers(answers) == [""]:
            no_answer += 1
        else:
            has_answer += 1
        if qid not in predictions:
            missing += 1
            continue
        exact, f1 = question_scores(predictions[qid], answers)
        exact_total += exact
        f1_total += f1
    return {"exact_match": 100.0 * exact_total / len(gold), "f1": 100.0 * f1_total / len(gold),
            "total": len(gold), "has_answer": has_answer, "no_answer": no_answer,
            "missing": missing}


def best_no_answer_threshold(gold: dict[str, list[str]], predictions: dict[str, str],
                             no_answer_margins: dict[str, float], metric: str = "exact_match"
                             ) -> tuple[float, float]:
    """(threshold, metric 0-100): abstain on a question when its margin (no-answer score minus
    best span score) is above the threshold. Sweeping the questions in increasing margin,
    each step switches one question from abstaining to answering; the best prefix wins (ties
    keep the lower threshold). A question without a margin always abstains."""
    if metric not in ("exact_match", "f1"):
        raise ValueError(f"metric must be 'exact_match' or 'f1', got {metric!r}")
    index = 0 if metric == "exact_match" else 1
    answer_score, abstain_score = {}, {}
    for qid, answers in gold.items():
        answer_score[qid] = question_scores(predictions.get(qid, ""), answers)[index]
        abstain_score[qid] = question_scores("", answers)[index]
    # Threshold -inf: every question abstains. Raising it past each margin in increasing
    # order switches that question to answering.
    current = sum(abstain_score.values())
    best_score, best_threshold = current, float("-inf")
    ordered = sorted((no_answer_margins[q], q) for q in gold if q in no_answer_margins)
    # Questions sharing a margin switch together: no threshold separates them.
    for margin, group in itertools.groupby(ordered, key=lambda pair: pair[0]):
        current += sum(answer_score[qid] - abstain_score[qid] for _, qid in group)
        if current > best_score:
            best_score, best_threshold = current, margin
    return best_threshold, 100.0 * best_score / len(gold)


def _fold(qid: str, folds: int) -> int:
    return int(hashlib.sha256(qid.encode("utf-8")).hexdigest(), 16) % folds


def held_out_threshold_scores(gold: dict[str, list[str]], predictions: dict[str, str],
                              no_answer_margins: dict[str, float], folds: int = 2) -> dict:
    """EM and F1 (0-100) of SQuAD 2.0 answers whose no-answer threshold never saw the question
    it scores: the questions are split into ``folds`` parts by a hash of their id; each part is
    scored at the thresholds (one for EM, one for F1, `best_no_answer_threshold`) tuned on the
    other parts. A threshold tuned and scored on the same questions (the FineTuner tunes it
    on the eval split the Evaluator then scores) overstates both figures. ``{}`` when a part
    would be empty (too few questions)."""
    if folds < 2:
        raise ValueError(f"folds must be at least 2, got {folds}")
    parts = [{q: a for q, a in gold.items() if _fold(q, folds) == k} for k in range(folds)]
    if any(not part for part in parts):
        return {}
    scores = {"exact_match": 0.0, "f1": 0.0}
    for k, part in enumerate(parts):
        tuning = {q: a for q, a in gold.items() if q not in part}
        for metric in scores:
            threshold, _ = best_no_answer_threshold(tuning, predictions, no_answer_margins,
                                                    metric)
            index = 0 if metric == "exact_match" else 1
            for qid, answers in part.items():
                margin = no_answer_margins.get(qid)
                answering = margin is not None and margin <= threshold
                scores[metric] += question_scores(
                    predictions.get(qid, "") if answering else "", answers)[index]
    return {"held_out_exact_match": 100.0 * scores["exact_match"] / len(gold),
            "held_out_f1": 100.0 * scores["f1"] / len(gold), "held_out_folds": folds}
