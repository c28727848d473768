"""KnowledgeTrainer: trains a stage with knowledge-graph embeddings (ERNIE's TransE entity
vectors) — TFX Trainer's spec plus a ``kg_embeddings`` input and an optional
``knowledge_graph`` input (the Distiller's pattern, components/distiller). It runs the same
``run_fn``; ``run_fn`` sees the folders in ``custom_config["kg_embeddings"]`` /
``custom_config["knowledge_graph"]``, `StageContext.kg_embeddings` /
`StageContext.knowledge_graph` load them, and the architecture's ``knowledge_init``
(models/registry.py) puts the vectors into a freshly built pretrainer or head. With the
graph, the stage's vocabulary folder (and so the Model artifact's) also holds the graph's
entities and linking settings (`StageContext.knowledge_vocabulary`)."""

from __future__ import annotations

import json

from tfx import types
from tfx.components.trainer import executor as trainer_executor
from tfx.dsl.components.base import base_component, executor_spec
from tfx.proto import trainer_pb2
from tfx.types import artifact_utils, standard_artifacts, standard_component_specs
from tfx.types.component_spec import ChannelParameter

from lmfactory.components.artifacts import KGEmbeddings, KnowledgeGraph

KG_EMBEDDINGS_KEY = "kg_embeddings"
KNOWLEDGE_GRAPH_KEY = "knowledge_graph"


class Executor(trainer_executor.GenericExecutor):
    """TFX's generic Trainer executor with the KGEmbeddings folder handed to ``run_fn``
    through ``custom_config["kg_embeddings"]``."""

    def Do(self, input_dict, output_dict, exec_properties):
        exec_properties = dict(exec_properties)
        custom_config = json.loads(exec_properties.get("custom_config") or "{}")
        for key in (KG_EMBEDDINGS_KEY, KNOWLEDGE_GRAPH_KEY):
            if input_dict.get(key):
                custom_config[key] = artifact_utils.get_single_uri(input_dict[key])
        exec_properties["custom_config"] = json.dumps(custom_config)
        super().Do(input_dict, output_dict, exec_properties)


class KnowledgeTrainerSpec(standard_component_specs.TrainerSpec):
    INPUTS = {
        **standard_component_specs.TrainerSpec.INPUTS,
        KG_EMBEDDINGS_KEY: ChannelParameter(type=KGEmbeddings),
        KNOWLEDGE_GRAPH_KEY: ChannelParameter(type=KnowledgeGraph, optional=True),
    }


class KnowledgeTrainer(base_component.BaseComponent):
    SPEC_CLASS = KnowledgeTrainerSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)

    def __init__(self, examples: types.BaseChannel, kg_embeddings: types.BaseChannel,
                 run_fn: str, train_args: trainer_pb2.TrainArgs,
                 eval_args: trainer_pb2.EvalArgs, custom_config: dict,
                 base_model: types.BaseChannel | None = None,
                 knowledge_graph: types.BaseChannel | None = None):
        spec = KnowledgeTrainerSpec(
            examples=examples, kg_embeddings=kg_embeddings, base_model=base_model,
            knowledge_graph=knowledge_graph,
            run_fn=run_fn, train_args=train_args, eval_args=eval_args,
            custom_config=json.dumps(custom_config, sort_keys=True),
            model=types.Channel(type=standard_artifacts.Model),
            model_run=types.Channel(type=standard_artifacts.ModelRun))
        super().__init__(spec=spec)
