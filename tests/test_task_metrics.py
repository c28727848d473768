"""SQuAD EM/F1 (v1.1 normalisation, v2.0 no-answer threshold) and entity-level NER scores,
checked against hand-computed cases."""

import json

import pytest

from lmfactory.components.evaluator import entity_metrics, squad_metrics


@pytest.mark.parametrize("text, normalised", [
    ("The Eiffel Tower!", "eiffel tower"),
    ("  an   apple, a pear ", "apple pear"),
    ("apple,a pear", "applea pear"),  # punctuation goes before articles, as officially
    ("Theatre of the Absurd", "theatre of absurd"),  # "the" only as a whole word
    ("1,000 km", "1000 km"),
    ("Ünïcode – dash", "ünïcode – dash"),  # only ASCII punctuation is removed
    ("", ""),
])
def test_answer_normalisation(text, normalised):
    assert squad_metrics.normalize_answer(text) == normalised


def test_exact_match_and_f1_by_hand():
    # prediction tokens: [denver, broncos]; gold: [broncos]  -> P = 1/2, R = 1, F1 = 2/3
    assert squad_metrics.token_f1("Denver Broncos", "the Broncos") == pytest.approx(2 / 3)
    assert squad_metrics.exact_match("the Broncos.", "Broncos") == 1.0
    # repeated tokens count with multiplicity: pred [a?] -> [x, x, y], gold [x, y, y]
    # overlap = min(2,1) + min(1,2) = 2 -> P = R = 2/3
    assert squad_metrics.token_f1("x x y", "x y y") == pytest.approx(2 / 3)
    assert squad_metrics.token_f1("cat", "dog") == 0.0
    # a gold answer that normalises to nothing ("A") makes the question unanswerable, as in
    # the v2.0 script
    assert squad_metrics.question_scores("", ["A"]) == (1.0, 1.0)
    # v2.0: abstaining on an unanswerable question is right, answering it is wrong
    assert squad_metrics.question_scores("", []) == (1.0, 1.0)
    assert squad_metrics.question_scores("Paris", []) == (0.0, 0.0)
    assert squad_metrics.question_scores("", ["Paris"]) == (0.0, 0.0)
    # the best over several gold answers
    assert squad_metrics.question_scores(
        "in 1066", ["1066", "in the year 1066"]) == (0.0, pytest.approx(max(2 / 3, 0.8)))


def test_evaluate_over_a_squad_json(tmp_path):
    dataset = {"version": "1.1", "data": [{"title": "t", "paragraphs": [{
        "context": "c", "qas": [
            {"id": "q1", "question": "?", "answers": [{"text": "Denver Broncos",
                                                      "answer_start": 0}]},
            {"id": "q2", "question": "?", "answers": [{"text": "Santa Clara",
                                                      "answer_start": 0}]},
            {"id": "q3", "question": "?", "answers": [], "is_impossible": True},
        ]}]}]}
    path = tmp_path / "dev.json"
    path.write_text(json.dumps(dataset))
    gold = squad_metrics.read_gold(json.loads(path.read_text()))
    scores = squad_metrics.evaluate(gold, {"q1": "the Denver Broncos", "q3": ""})
    # q1: EM 1, F1 1; q2 missing: 0, 0; q3 abstained correctly: 1, 1
    assert scores["exact_match"] == pytest.approx(200 / 3)
    assert scores["f1"] == pytest.approx(200 / 3)
    assert (scores["missing"], scores["has_answer"], scores["no_answer"]) == (1, 2, 1)
    with pytest.raises(ValueError, match="top-level 'data'"):
        squad_metrics.read_gold({"version": "1.1"})


def test_no_answer_threshold_is_tuned_on_dev():
    gold = {"a": ["Paris"], "b": ["Rome"], "c": [], "d": []}
    predictions = {"a": "Paris", "b": "Milan", "c": "Oslo", "d": "Bern"}
    # margin = no-answer score - best span score; abstain when margin > threshold
    margins = {"a": -3.0, "b": 0.5, "c": 1.0, "d": -1.0}
    threshold, exact = squad_metrics.best_no_answer_threshold(gold, predictions, margins)
    # all abstain: c, d right = 2/4. Answer a (-3): 3/4. Answer d (-1): 2/4. b (0.5): 2/4.
    assert threshold == -3.0
    assert exact == pytest.approx(75.0)
    # answering is never better when every answer is wrong: keep abstaining everywhere
    threshold, exact = squad_metrics.best_no_answer_threshold(
        {"x": ["Xy"]}, {"x": "Zw"}, {"x": 0.0})
    assert threshold == float("-inf") and exact == 0.0
    # questions sharing a margin switch together
    threshold, exact = squad_metrics.best_no_answer_threshold(
        {"p": ["Xy"], "q": []}, {"p": "Xy", "q": "Zw"}, {"p": 0.0, "q": 0.0})
    assert exact == pytest.approx(50.0)


@pytest.mark.parametrize("tags, expected", [
    (["B-PER", "I-PER", "O", "B-LOC"], [("PER", 0, 1), ("LOC", 3, 3)]),
    (["I-PER", "I-PER", "O"], [("PER", 0, 1)]),                  # IOB1: I starts a chunk
    (["B-PER", "I-LOC", "I-LOC"], [("PER", 0, 0), ("LOC", 1, 2)]),  # type change splits
    (["B-PER", "B-PER", "I-PER"], [("PER", 0, 0), ("PER", 1, 2)]),
    (["S-ORG", "B-ORG", "E-ORG", "E-ORG"], [("ORG", 0, 0), ("ORG", 1, 2), ("ORG", 3, 3)]),
    (["O", "O"], []),
    ([], []),
])
def test_entity_chunks(tags, expected):
    assert entity_metrics.entities(tags) == expected


def test_entity_scores_by_hand():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
    predicted = [["B-PER", "I-PER", "O", "O"], ["B-ORG", "B-LOC"]]
    # gold: PER(0,1) LOC(3,3) ORG(0,0); predicted: PER(0,1) ORG(0,0) LOC(1,1)
    # correct 2, predicted 3, gold 3 -> P = R = F1 = 2/3
    scores = entity_metrics.entity_scores(gold, predicted)
    assert scores["precision"] == pytest.approx(2 / 3)
    assert scores["recall"] == pytest.approx(2 / 3)
    assert scores["f1"] == pytest.approx(2 / 3)
    assert scores["per_type"]["LOC"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0,
                                         "support": 1}
    assert scores["per_type"]["PER"]["f1"] == 1.0
    # a partial span is wrong, not half right
    partial = entity_metrics.entity_scores([["B-PER", "I-PER"]], [["B-PER", "O"]])
    assert partial["f1"] == 0.0


def test_entity_scores_reject_bad_input():
    with pytest.raises(ValueError, match="neither 'O'"):
        entity_metrics.entities(["PER"])
    with pytest.raises(ValueError, match="sentence 0"):
        entity_metrics.entity_scores([["O", "O"]], [["O"]])
    with pytest.raises(ValueError, match="gold sentences"):
        entity_metrics.entity_scores([["O"]], [])
