"""Raw (question, choices) -> KagNet's inputs: the text packing plus the grounded schema
graph and paths of every choice, in TensorFlow ops (fine-tuning's tf.data and the
exported SavedModel run the same layer)."""

from __future__ import annotations

import keras

from lmfactory.models.backend import tf
from lmfactory.models.kagnet.kagnet_graph import ConceptGraph
from lmfactory.models.kagnet.kagnet_path_finder import GRAPH_INPUTS, ConceptPathFinder

# Grounding skips concepts that are only function words (§3.1: the question and answer
# words are matched "after removing stop words"). The project's own short list.
STOP_WORDS = frozenset("""a an the and or but if of at by for with about to from in on
into onto over under up down out off is am are was were be been being have has had do
does did doing i me my we our you your he him his she her it its they them their what
which who whom whose this that these those there here when where why how not no nor so
than too very can will would should could may might must shall just also as such some
any each every all both either neither other another""".split())

# `finetuning.task_args` the path search takes (the rest go to the head): the
# `ConceptPathFinder`'s and the concept graph's (`build_concept_graph`).
PATH_ARGUMENTS = ("max_hops", "max_paths_per_pair", "max_question_concepts",
                  "max_answer_concepts", "min_path_score")
SEARCH_ARGUMENTS = PATH_ARGUMENTS + ("max_neighbours",)


def grounding_labels(labels, stop_words=STOP_WORDS):
    """Concept labels for grounding: a concept whose every surface form is a stop word
    gets no form (it is never matched)."""
    return [[] if forms and all(form in stop_words for form in forms) else list(forms)
            for forms in labels]


@keras.saving.register_keras_serializable(package="lmfactory")
class KagNetPreprocessor(keras.layers.Layer):
    """``(question [B], choices [B, C])`` strings -> the inputs of `KagNetMultipleChoice`.

    1. Text: ``[CLS] question [SEP] choice [SEP]`` per choice (``text_preprocessor``, a
       `MultipleChoicePreprocessor`), the statement the text encoder reads.
    2. §3.1 concept recognition: ``linker`` (the KG's `EntityLinkingLayer`: longest label
       n-gram first, left to right) grounds the question and each choice in KG concepts;
       the question's concepts are the question concepts of each of its C rows, the
       choice's the answer concepts. The paper matches lemmatised n-grams; no lemmatiser
       runs in TF Serving, so words match a concept's label as written (lowercased), and
       an inflected word reaches its lemma only through the KG's own edges (ConceptNet's
       ``/r/FormOf``).
    3. §3.1 path finding, pruning and schema graph: `ConceptPathFinder`.

    Outputs: dict of int32 [B, C, ...]: ``token_ids``, ``segment_ids``, ``padding_mask`` and
    the `GRAPH_INPUTS`.
    """

    def __init__(self, text_preprocessor, linker, path_finder, **kwargs):
        super().__init__(**kwargs)
        self.text_preprocessor = text_preprocessor
        self.linker = linker
        self.path_finder = path_finder

    @property
    def sequence_length(self) -> int:
        return self.text_preprocessor.sequence_length

    def head_arguments(self, task_args=None) -> dict:
        """The head's arguments: the graph's sizes plus the recipe's ``task_args`` that are
        not path-search settings."""
        finder = self.path_finder
        arguments = {key: value for key, value in dict(task_args or {}).items()
                     if key not in SEARCH_ARGUMENTS}
        arguments.update(num_concepts=finder.num_concepts, num_relations=finder.num_relations)
        if getattr(finder, "embedding_dim", None):
            arguments["concept_dim"] = finder.embedding_dim
        return arguments

    def record_features(self, num_choices: int) -> dict:
        """The graph features of a question's record written by the Beam stage
        (``components/concept_paths``), name -> its shape [C, ...] (stored flattened)."""
        return {name: (num_choices,) + shape
                for name, shape in self.path_finder.output_shapes().items()}

    def from_records(self, inputs, records: dict) -> dict:
        """The model inputs of ``(question [B], choices [B, C])`` whose graph features were
        computed offline by the Beam stage: ``records`` name -> int [B, C * ...]."""
        question, choices = (tf.convert_to_tensor(x) for x in inputs)
        outputs = dict(self.text_preprocessor((question, choices)))
        num_choices = choices.shape[1] or tf.shape(choices)[1]
        for name, shape in self.record_features(num_choices).items():
            outputs[name] = tf.reshape(tf.cast(records[name], tf.int32), (-1,) + shape)
        return outputs

    def ground(self, texts):
        """Concept ids [N, None] (ragged int64) grounded in ``texts`` [N]."""
        entity_ids = self.linker(texts)[2]
        return tf.cast(entity_ids, tf.int64)

    def graph(self, question, choices):
        """The `GRAPH_INPUTS` [B, C, ...] of raw ``question`` [B] and ``choices`` [B, C]."""
        num_choices = tf.shape(choices)[1]
        question_concepts = self.ground(question)
        answer_concepts = self.ground(tf.reshape(choices, [-1]))
        rows = tf.repeat(tf.range(tf.shape(question)[0]), num_choices)
        graph = self.path_finder(tf.gather(question_concepts, rows), answer_concepts)
        return {name: tf.reshape(value, tf.concat([[-1, num_choices],
                                                   tf.shape(value)[1:]], 0))
                for name, value in graph.items()}

    def call(self, inputs):
        if not isinstance(inputs, (tuple, list)) or len(inputs) != 2:
            raise ValueError("KagNetPreprocessor takes a tuple (question [batch], choices "
                             "[batch, num_choices]) of strings")
        question = tf.convert_to_tensor(inputs[0])
        choices = tf.convert_to_tensor(inputs[1])
        outputs = dict(self.text_preprocessor((question, choices)))
        outputs.update(self.graph(question, choices))
        return outputs

    def get_config(self):
        config = super().get_config()
        for name in ("text_preprocessor", "linker", "path_finder"):
            config[name] = keras.saving.serialize_keras_object(getattr(self, name))
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        for name in ("text_preprocessor", "linker", "path_finder"):
            config[name] = keras.saving.deserialize_keras_object(config[name])
        return cls(**config)


def make_linker(labels, max_ngram=4, lowercase=True):
    """The in-graph grounding layer over concept ``labels`` (stop-word concepts blanked)."""
    from lmfactory.models.knowledge.entity_linking import EntityLinkingLayer

    return EntityLinkingLayer(grounding_labels(labels), max_ngram=max_ngram,
                              lowercase=lowercase)


def kagnet_preprocessor(vocab_dir: str, sequence_length: int, num_text_features: int,
                        task_args: dict) -> KagNetPreprocessor:
    """The registry's ``multiple_choice`` preprocessor of KagNet (`Architecture.preprocessors`).

    ``task_args`` hold the path-search settings (`PATH_ARGUMENTS`) and, from the
    fine-tuning stage, ``concept_graph``: the folder of the `ConceptGraph` (with its
    labels) built from the recipe's knowledge graph, plus ``max_ngram`` / ``lowercase`` of
    its linking settings."""
    from lmfactory.models.classifier_preprocessor import classifier_preprocessor
    from lmfactory.models.tasks.multiple_choice_preprocessor import MultipleChoicePreprocessor

    if num_text_features != 2:
        raise ValueError("KagNet reads a question and its choices (two text features)")
    graph_dir = task_args.get("concept_graph")
    if not graph_dir:
        raise ValueError("KagNet's fine-tuning needs the recipe's knowledge_graph section "
                         "(its concept graph grounds the questions and answers)")
    graph = ConceptGraph.load(graph_dir)
    if graph.labels is None:
        raise ValueError(f"KagNet: the concept graph {graph_dir!r} has no concept labels")
    text = MultipleChoicePreprocessor(classifier_preprocessor(
        vocab_dir, "kagnet", sequence_length, num_text_features=2))  # [CLS] q [SEP] a [SEP]
    finder = ConceptPathFinder(graph_dir, graph=graph,
                               **{key: task_args[key] for key in PATH_ARGUMENTS
                                  if key in task_args})
    linker = make_linker(graph.labels, task_args.get("max_ngram", 4),
                         task_args.get("lowercase", True))
    return KagNetPreprocessor(text, linker, finder)


__all__ = ["KagNetPreprocessor", "PATH_ARGUMENTS", "SEARCH_ARGUMENTS", "STOP_WORDS", "grounding_labels",
           "kagnet_preprocessor", "make_linker"]
