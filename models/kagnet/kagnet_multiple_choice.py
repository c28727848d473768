"""KagNet's answer scorer (Lin et al. 2019 §3, Figure 2): text encoder + GCN-LSTM-HPA."""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

from lmfactory.models.kagnet.kagnet_graph_encoder import KagNetGraphEncoder
from lmfactory.models.kagnet.kagnet_path_finder import GRAPH_INPUTS
from lmfactory.models.task_losses import sentence_objective, with_regularization
from lmfactory.models.task_model import Task, first_token_vector, int_inputs
from lmfactory.models.tasks.fold_choices import FoldChoices

TEXT_INPUTS = ("token_ids", "padding_mask", "segment_ids")
# Per-choice shapes of the graph inputs after [batch, choices] (-1 = a size of the data).
GRAPH_INPUT_SHAPES = {"concept_ids": (None,), "edges": (None, 2), "pair_nodes": (None, 2),
                      "path_nodes": (None, None, None), "path_relations": (None, None, None)}


class KagNetMultipleChoice(Task):
    """Scores each answer choice from its statement vector and its graph vector.

    §3 / Figure 2: the question and a choice form a statement, encoded by the text encoder
    (the paper uses BERT / GPT; here the architecture's BERT backbone reads ``[CLS]
    question [SEP] choice [SEP]`` and its pooled ``[CLS]`` vector is s); the choice's
    schema graph and paths give g (`KagNetGraphEncoder`, §3.2-3.3); the choice's score is
    an MLP of ``[s; g]`` and a softmax across the choices gives the answer (§3.4,
    trained with cross-entropy).

    Inputs (dict, int32 [batch, num_choices, ...]): ``token_ids``, ``padding_mask``,
        ``segment_ids`` [.., T] (what the backbone takes) and the `GRAPH_INPUTS` of
        `ConceptPathFinder` (`KagNetPreprocessor` makes all of them from raw text).
    Output: logits [batch, num_choices].

    Args:
        backbone: the text encoder (KagNet's BERT backbone).
        num_choices: C.
        num_concepts, num_relations, concept_dim: the KG's sizes (concepts, 2x relations,
            TransE dimension); the fine-tuning stage passes its graph's
            (`KagNetPreprocessor.head_arguments`).
        graph_dim, gcn_layers, path_dim, pair_dim: `KagNetGraphEncoder`'s sizes.
        dropout: before the scoring MLP and inside the graph encoder.
    """

    # The recipe's `finetuning.task_args` for KagNet: the head's sizes and the path search's
    # settings (`KagNetPreprocessor`, ``components/concept_paths``).
    RECIPE_TASK_ARGS = ("dropout", "graph_dim", "gcn_layers", "path_dim", "pair_dim",
                        "max_hops", "max_paths_per_pair", "max_question_concepts",
                        "max_answer_concepts", "min_path_score", "max_neighbours")

    @classmethod
    def head_task_args(cls, task_args: dict) -> dict:
        """The recipe ``task_args`` the head itself takes (the others set the search)."""
        from lmfactory.models.kagnet.kagnet_preprocessor import SEARCH_ARGUMENTS

        return {k: v for k, v in dict(task_args or {}).items() if k not in SEARCH_ARGUMENTS}

    @classmethod
    def task_args_problem(cls, task_args: dict):
        """``(key, message)`` of the first invalid recipe ``task_args`` value, or None."""
        for key, value in dict(task_args or {}).items():
            if key == "dropout" or key == "min_path_score":
                if isinstance(value, bool) or not isinstance(value, (int, float)) \
                        or not 0 <= value < 1:
                    return key, f"must be a number in [0, 1), got {value!r}"
            elif isinstance(value, bool) or not isinstance(value, int) or value < 1 or (
                    key == "max_hops" and value > 3) or (key == "gcn_layers" and value > 8):
                bound = {"max_hops": " <= 3", "gcn_layers": " <= 8"}.get(key, "")
                return key, f"must be a positive integer{bound}, got {value!r}"
        return None

    def __init__(self, backbone, num_choices, num_concepts=16, num_relations=4,
                 concept_dim=16, graph_dim=None, gcn_layers=2, path_dim=None, pair_dim=None,
                 dropout=0.1, **kwargs):
        hidden = int(backbone.get_config()["hidden_dim"])
        graph_dim = int(graph_dim or concept_dim)
        path_dim = int(path_dim or hidden)
        pair_dim = int(pair_dim or hidden)
        policy = backbone.dtype_policy
        # === Layers ===
        self.backbone = backbone
        self.fold = FoldChoices(num_choices, name="fold_choices")
        self.graph_encoder = KagNetGraphEncoder(
            num_concepts, num_relations, concept_dim=concept_dim, graph_dim=graph_dim,
            gcn_layers=gcn_layers, path_dim=path_dim, pair_dim=pair_dim, dropout=dropout,
            dtype=policy, name="graph_encoder")
        self.output_dropout = keras.layers.Dropout(dropout, dtype=policy,
                                                   name="output_dropout")
        self.score_hidden = keras.layers.Dense(hidden, activation="relu", dtype=policy,
                                               name="score_hidden")
        self.score = keras.layers.Dense(1, dtype=policy, name="choice_score")
        self.unfold = FoldChoices(num_choices, unfold=True, name="unfold_choices")

        # === Functional model ===
        names = [name for name in TEXT_INPUTS if name in backbone.input]
        names += sorted(set(backbone.input) - set(names))
        inputs = int_inputs(names, shape=(num_choices, None))
        for name in GRAPH_INPUTS:
            inputs.update(int_inputs([name], shape=(num_choices,) + GRAPH_INPUT_SHAPES[name]))
        folded = self.fold(inputs)
        statement = first_token_vector(backbone({n: folded[n] for n in names}), pooled=True)
        graph = self.graph_encoder(statement, {n: folded[n] for n in GRAPH_INPUTS})
        features = self.output_dropout(ops.concatenate([statement, graph], axis=-1))
        scores = self.score(self.score_hidden(features))  # [B*C, 1]
        logits = ops.squeeze(self.unfold(scores), axis=-1)
        super().__init__(inputs=inputs, outputs=logits, **kwargs)

        # === Config ===
        self.num_choices = num_choices
        self.num_concepts, self.num_relations = int(num_concepts), int(num_relations)
        self.concept_dim, self.graph_dim, self.gcn_layers = int(concept_dim), graph_dim, gcn_layers
        self.path_dim, self.pair_dim, self.dropout = path_dim, pair_dim, dropout

        # === Metrics ===
        self.loss_tracker = keras.metrics.Mean(name="loss")
        self.accuracy = keras.metrics.SparseCategoricalAccuracy(name="accuracy")

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        loss = sentence_objective(y, y_pred, self.loss_tracker, self.accuracy)
        return with_regularization(self, loss)

    def initialize_from_kg(self, entity_embeddings, relation_embeddings=None):
        """§3.2: the concept embeddings start as the KG's TransE entity embeddings, the
        relation embeddings as its relation embeddings (an inverse relation as -r)."""
        encoder = self.graph_encoder
        entity_embeddings = np.asarray(entity_embeddings)
        expected = (encoder.num_concepts, encoder.concept_dim)
        if entity_embeddings.shape != expected:
            raise ValueError(f"KagNet: the KG embeddings are {entity_embeddings.shape}, the "
                             f"concept embedding table {expected} (num_concepts, "
                             f"concept_dim must be the KG's entity count and TransE dim)")
        encoder.concept_embedding.embeddings.assign(entity_embeddings)
        if relation_embeddings is not None:
            relation_embeddings = np.asarray(relation_embeddings)
            both = np.concatenate([relation_embeddings, -relation_embeddings])
            if both.shape != (encoder.num_relations, encoder.concept_dim):
                raise ValueError(f"KagNet: {relation_embeddings.shape} relation embeddings "
                                 f"for {encoder.num_relations // 2} relations of width "
                                 f"{encoder.concept_dim}")
            encoder.relation_embedding.embeddings.assign(both)

    def synthetic_inputs(self, batch_size, seed=0, concepts=6, hops=2, paths=2,
                               pairs=4):
        """Random well-formed graph inputs (the conformance harness asks a head for the inputs it cannot make): per row
        a chain
        of concepts, paths over it, and an empty row (no concept, no path) last."""
        rng = np.random.default_rng(seed)
        C, E = self.num_choices, self.num_concepts
        shape = (batch_size, C)
        ids = -np.ones(shape + (concepts,), np.int32)
        ids[..., :concepts] = np.sort(rng.choice(E, size=concepts, replace=False))
        edges = -np.ones(shape + (pairs * paths * hops, 2), np.int32)
        edges[..., :concepts - 1, 0] = np.arange(concepts - 1)
        edges[..., :concepts - 1, 1] = np.arange(1, concepts)
        pair_nodes = -np.ones(shape + (pairs, 2), np.int32)
        pair_nodes[..., 0, :] = (0, hops)
        path_nodes = -np.ones(shape + (pairs, paths, hops + 1), np.int32)
        path_nodes[..., 0, 0, :] = np.arange(hops + 1)
        relations = -np.ones(shape + (pairs, paths, hops), np.int32)
        relations[..., 0, 0, :] = rng.integers(0, self.num_relations, hops)
        for array in (ids, edges, pair_nodes, path_nodes, relations):
            array[-1, -1] = -1  # the last choice of the last question: no graph at all
        return {"concept_ids": ids, "edges": edges, "pair_nodes": pair_nodes,
                "path_nodes": path_nodes, "path_relations": relations}

    def get_config(self):
        config = super().get_config()
        config.update({"num_choices": self.num_choices, "num_concepts": self.num_concepts,
                       "num_relations": self.num_relations, "concept_dim": self.concept_dim,
                       "graph_dim": self.graph_dim, "gcn_layers": self.gcn_layers,
                       "path_dim": self.path_dim, "pair_dim": self.pair_dim,
                       "dropout": self.dropout})
        return config


def knowledge_init(task_model, entity_embeddings, relation_embeddings=None):
    """The registry's ``knowledge_init``: TransE initialisation of a KagNet head (other
    task models of the architecture, e.g. its pretrainer, hold no KG tables)."""
    if isinstance(task_model, KagNetMultipleChoice):
        task_model.initialize_from_kg(entity_embeddings, relation_embeddings)


__all__ = ["GRAPH_INPUT_SHAPES", "KagNetMultipleChoice", "TEXT_INPUTS", "knowledge_init"]
