"""Knowledge-graph layers used inside exported models (no architecture registers here):
`EntityLinkingLayer` finds knowledge-graph entity mentions in raw text with TF ops, so a
SavedModel served by TF Serving links its own input (ERNIE, KagNet)."""

from lmfactory.models.knowledge.entity_linking import (
    ENTITIES_FILE, LINKING_FILE, EntityLinkingLayer, label_key, label_table,
    read_entities_file, read_linking_vocabulary, word_spans)

__all__ = ["ENTITIES_FILE", "LINKING_FILE", "EntityLinkingLayer", "label_key", "label_table",
           "read_entities_file", "read_linking_vocabulary", "word_spans"]
