"""Entity-level precision / recall / F1 for token tagging (CoNLL / WNUT NER), with the chunking
rules of the CoNLL-2000 ``conlleval`` script that seqeval's default (non-strict) mode follows.

A tag is ``O`` or ``<prefix>-<type>`` with prefix B (begin), I (inside), E (end) or S (single);
IOB1, IOB2 and IOBES sequences are all read the same way. A chunk ends before the current token
when the previous token closed it (E, S), when the current token opens a new one (B, S, or O),
or when the type changes; a chunk starts at B and S, at an I or E that follows O, E or S, and
at any tagged token whose type differs from the previous one. An entity is (type, first token,
last token); a predicted entity is correct only if a gold entity has the same type and span.
Scores are micro-averaged over entities (seqeval's ``classification_report`` "micro avg").
"""

from __future__ import annotations

from collections import Counter


def _split(tag: str) -> tuple[str, str]:
    if tag in ("O", "", None):
        return "O", ""
    prefix, sep, entity_type = tag.partition("-")
    if not sep or prefix not in ("B", "I", "E", "S"):
        raise ValueError(f"tag {tag!r} is neither 'O' nor '<B|I|E|S>-<type>'")
    return prefix, entity_type


def _chunk_ends(prev_prefix, prev_type, prefix, entity_type) -> bool:
    if prev_prefix in ("E", "S"):
        return True
    if prev_prefix in ("B", "I"):
        return prefix in ("B", "S", "O") or prev_type != entity_type
    return False


def _chunk_starts(prev_prefix, prev_type, prefix, entity_type) -> bool:
    if prefix in ("B", "S"):
        return True
    if prefix in ("I", "E"):
        return prev_prefix in ("O", "E", "S") or prev_type != entity_type
    return False


def entities(tags: list[str]) -> list[tuple[str, int, int]]:
    """The (type, start, end) chunks of one sentence's tags, end inclusive."""
    found = []
    start, prev_prefix, prev_type = None, "O", ""
    for position, tag in enumerate(list(tags) + ["O"]):
        prefix, entity_type = _split(tag)
        if start is not None and _chunk_ends(prev_prefix, prev_type, prefix, entity_type):
            found.append((prev_type, start, position - 1))
            start = None
        if _chunk_starts(prev_prefix, prev_type, prefix, entity_type):
            start = position
        prev_prefix, prev_type = prefix, entity_type
    return found


def _prf(correct: int, predicted: int, gold: int) -> dict:
    precision = correct / predicted if predicted else 0.0
    recall = correct / gold if gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1, "support": gold}


def entity_scores(gold_tags: list[list[str]], predicted_tags: list[list[str]]) -> dict:
    """Micro precision / recall / F1 over all entities, plus a per-type breakdown.

    Args: per-sentence tag lists, gold and predicted, with equal lengths sentence by sentence.
    """
    if len(gold_tags) != len(predicted_tags):
        raise ValueError(f"{len(gold_tags)} gold sentences but {len(predicted_tags)} predicted")
    correct, predicted, gold = Counter(), Counter(), Counter()
    for index, (gold_sentence, predicted_sentence) in enumerate(zip(gold_tags, predicted_tags)):
        if len(gold_sentence) != len(predicted_sentence):
            raise ValueError(f"sentence {index}: {len(gold_sentence)} gold tags but "
                             f"{len(predicted_sentence)} predicted")
        gold_entities = set(entities(gold_sentence))
        predicted_entities = set(entities(predicted_sentence))
        for entity_type, _, _ in gold_entities:
            gold[entity_type] += 1
        for entity_type, _, _ in predicted_entities:
            predicted[entity_type] += 1
        for entity_type, _, _ in gold_entities & predicted_entities:
            correct[entity_type] += 1
    scores = _prf(sum(correct.values()), sum(predicted.values()), sum(gold.values()))
    scores["per_type"] = {t: _prf(correct[t], predicted[t], gold[t])
                          for t in sorted(set(gold) | set(predicted))}
    return scores
