"""Knowledge-graph layers used inside exported models (no architecture registers here):
`EntityLinkingLayer` finds knowledge-graph entity mentions in raw text with TF ops, so a
SavedModel served by TF Serving links its own input (ERNIE, KagNet)."""

from lmfactory.models.knowledge.entity_linking import (EntityLinkingLayer, label_key,
                                                       label_table, word_spans)

__all__ = ["EntityLinkingLayer", "label_key", "label_table", "word_spans"]
