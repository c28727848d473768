"""The knowledge-graph stage of the DAG, added when the recipe has a
``knowledge_graph`` section:

    KnowledgeGraphGen -> KGEmbeddingTrainer (TransE)
          └──> EntityLinker (corpus, task examples; when the architecture links entities)
    the Pretrainer / FineTuner become KnowledgeTrainers fed the KGEmbeddings

`knowledge_stage` builds the first two; pipeline.py asks `links_entities` and uses
`entity_linker` for the examples of an architecture with ``links_entities``.
"""

from __future__ import annotations

import os

from lmfactory import models
from lmfactory.components.concept_paths.component import ConceptPaths
from lmfactory.components.knowledge_graph.component import KnowledgeGraphGen
from lmfactory.components.knowledge_graph.embedding_component import KGEmbeddingTrainer
from lmfactory.components.knowledge_graph.linker_component import EntityLinker


def _resolve(path: str) -> str:
    return path if "://" in path else os.path.abspath(path)  # gs://: as given


def graph_section(recipe: dict) -> dict:
    """The recipe's ``knowledge_graph`` section with its local paths made absolute; a local
    file that is missing is a one-line FileNotFoundError now, before any stage runs."""
    section = dict(recipe["knowledge_graph"])
    section["splits"] = {split: _resolve(path) for split, path in section["splits"].items()}
    if section.get("labels"):
        section["labels"] = _resolve(section["labels"])
    for path in [*section["splits"].values(), section.get("labels")]:
        if path and "://" not in path and not os.path.isfile(path):
            raise FileNotFoundError(f"knowledge graph file {path} does not exist")
    return section


def knowledge_stage(recipe: dict):
    """``(components, knowledge-graph channel, KG-embeddings channel)`` of the recipe's
    ``knowledge_graph`` section, or ``([], None, None)`` without one."""
    if not recipe.get("knowledge_graph"):
        return [], None, None
    section = graph_section(recipe)
    graph_gen = KnowledgeGraphGen(knowledge_graph={key: value for key, value in
                                                   section.items() if key != "embedding"})
    embeddings = KGEmbeddingTrainer(knowledge_graph=graph_gen.outputs["knowledge_graph"],
                                    embedding=section["embedding"])
    return ([graph_gen, embeddings], graph_gen.outputs["knowledge_graph"],
            embeddings.outputs["kg_embeddings"])


def links_entities(recipe: dict) -> bool:
    """Whether the recipe's examples go through the EntityLinker (its architecture links
    entities and it has a knowledge graph)."""
    return bool(recipe.get("knowledge_graph")) and models.get(
        recipe["architecture"]).links_entities


def uses_knowledge(recipe: dict) -> bool:
    """Whether the recipe's model uses its knowledge graph: entity linking (ERNIE) or
    concept paths (KagNet, `Architecture.concept_paths`)."""
    if not recipe.get("knowledge_graph"):
        return False
    arch = models.get(recipe["architecture"])
    return bool(arch.links_entities or arch.concept_paths)


def task_knowledge_stage(recipe: dict, examples, knowledge_graph, kg_embeddings):
    """``(components, examples)``: the task examples annotated for the architecture:
    KagNet's ConceptPaths (schema graphs and paths per choice) or the EntityLinker."""
    if models.get(recipe["architecture"]).concept_paths:
        paths = ConceptPaths(examples=examples, knowledge_graph=knowledge_graph,
                             kg_embeddings=kg_embeddings,
                             settings=recipe["finetuning"].get("task_args") or {}
                             ).with_id("TaskConceptPaths")
        return [paths], paths.outputs["examples"]
    linker = entity_linker(examples, knowledge_graph, recipe["finetuning"]["text_features"],
                           "TaskEntityLinker")
    return [linker], linker.outputs["examples"]


def entity_linker(examples, knowledge_graph, text_features, component_id: str):
    """An EntityLinker of ``examples``' ``text_features`` named ``component_id``."""
    return EntityLinker(examples=examples, knowledge_graph=knowledge_graph,
                        text_features=list(text_features)).with_id(component_id)
