"""`EntityMatcher`: knowledge-graph entity mentions in text by label matching, in Python (the
Beam `EntityLinker` runs it over a corpus). The rules (words, longest match first, left to
right, non-overlapping, lowest entity index wins a shared label) are those of
`lmfactory.models.knowledge.entity_linking`, whose TF layer gives the same mentions inside an
exported model."""

from __future__ import annotations

from typing import NamedTuple

from lmfactory.models.knowledge.entity_linking import label_table, word_spans


class Mention(NamedTuple):
    """A linked mention: ``text[start_char:end_char]`` names entity ``entity_index``."""

    start_char: int
    end_char: int
    entity_index: int


class EntityMatcher:
    """Links text to the entities of a knowledge graph by their surface forms.

    Args:
        graph_or_labels: a `KnowledgeGraph` (its ``labels``) or, per entity index, a list of
            surface forms.
        max_ngram: longest surface form matched, in words (default: the graph's linking
            setting, else 4).
        lowercase: match lowercased words (default: the graph's setting, else True).
    """

    def __init__(self, graph_or_labels, max_ngram: int | None = None,
                 lowercase: bool | None = None):
        linking = getattr(graph_or_labels, "linking", None) or {}
        labels = getattr(graph_or_labels, "labels", graph_or_labels)
        self.max_ngram = int(max_ngram if max_ngram is not None else
                             linking.get("max_ngram", 4))
        self.lowercase = bool(lowercase if lowercase is not None else
                              linking.get("lowercase", True))
        if self.max_ngram < 1:
            raise ValueError(f"max_ngram must be >= 1, got {self.max_ngram}")
        self.table = label_table(labels, self.max_ngram, self.lowercase)

    def link(self, text: str) -> list[Mention]:
        spans = word_spans(text)
        words = [text[start:end] for start, end in spans]
        if self.lowercase:
            words = [word.lower() for word in words]
        mentions, i = [], 0
        while i < len(words):
            for n in range(min(self.max_ngram, len(words) - i), 0, -1):
                entity = self.table.get(" ".join(words[i:i + n]))
                if entity is not None:
                    mentions.append(Mention(spans[i][0], spans[i + n - 1][1], entity))
                    i += n
                    break
            else:
                i += 1
        return mentions
