"""The fine-tuning stage's side of KagNet's knowledge stages: the `ConceptGraph` the
Beam stage (``component.py``) searched, rebuilt from the same artifacts and settings, for
the exported model's in-graph grounding and path finding."""

from __future__ import annotations

import logging
import os

from lmfactory.components.concept_paths.grounding import (
    concept_graph_of, split_settings, transe_norm)

CONCEPT_GRAPH_DIR = "concept_graph"


def concept_graph_task_args(context, task_args: dict) -> dict:
    """``task_args`` plus ``concept_graph`` (the folder of the stage's `ConceptGraph`,
    written under the run's ``model_run_dir``) and the KG's linking settings, for the
    architecture's multiple-choice preprocessor."""
    graph = context.knowledge_graph
    if graph is None:
        raise ValueError(f"{context.config.architecture} fine-tuning grounds questions in a "
                         f"knowledge graph: the recipe needs a knowledge_graph section")
    _, graph_settings = split_settings(task_args)
    concept_graph = concept_graph_of(graph, context.kg_embeddings,
                                     norm=transe_norm(context.config.kg_embeddings),
                                     **graph_settings)
    directory = concept_graph.save(os.path.join(context.fn_args.model_run_dir,
                                                CONCEPT_GRAPH_DIR))
    logging.info("Concept graph of %d concepts, %d edges in %s", concept_graph.num_concepts,
                 len(concept_graph.targets), directory)
    return {**dict(task_args), "concept_graph": directory, **dict(graph.linking or {})}


__all__ = ["concept_graph_task_args"]
