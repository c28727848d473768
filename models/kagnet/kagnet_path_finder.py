"""KagNet's schema-graph construction in TensorFlow ops (Lin et al. 2019 §3.1).

`ConceptPathFinder` takes the grounded question concepts and answer concepts of each
(question, choice) row and returns the row's schema graph and pruned paths as fixed-size
int tensors, the inputs of `KagNetMultipleChoice`. It runs inside the exported SavedModel
(TF Serving cannot run Python, so no ``py_function``: gathers, ragged ranges, a
``tf.lookup`` hash table and sorts only) and in the Beam stage
(``components/concept_paths``), so training and serving see the same graphs.

§3.1 "Path finding": every path of at most ``max_hops`` edges between a question concept
and an answer concept on the undirected graph (``kagnet_graph.py``), simple (no concept
twice). The search meets in the middle: a 1-hop path is an edge (q, a); a 2-hop path
expands q's edges to x and checks the edge (x, a); a 3-hop path expands q to x and a to y
and checks (x, y). Expansion follows at most the graph's ``max_neighbours`` best-scored
edges of a concept (the "capped" search; edge checks see every edge).

§3.1 "Path pruning": a path's score is the product of its triples' TransE scores (the sum
of their log scores); paths scoring below ``min_path_score`` are dropped and at most
``max_paths_per_pair`` best-scored ones are kept per concept pair (ties: shorter first,
then the search order).

§3.1 "schema graph" (§3.2's input): the concepts of the row (question and answer concepts
and the inner concepts of the kept paths) and the edges of the kept paths.

Rows (B*C of them; example b's choice c is row b*C + c) get, with -1 as padding:
    ``concept_ids`` [N]: the schema graph's concepts, sorted by id (N = max_nodes);
    ``edges`` [M*K*H, 2]: positions in ``concept_ids`` of each kept path edge (once);
    ``pair_nodes`` [M, 2]: positions of the (question, answer) concept of pair m
        (M = max_question_concepts * max_answer_concepts; question concept i and answer
        concept j make pair ``i * max_answer_concepts + j``);
    ``path_nodes`` [M, K, H+1]: positions of the concepts of pair m's k-th path (the
        question concept first, the answer concept after its last hop);
    ``path_relations`` [M, K, H]: relation ids of its hops (r or r + R for an inverse
        hop), -1 after its last hop.
"""

from __future__ import annotations

import keras
import numpy as np

from lmfactory.models.backend import tf
from lmfactory.models.kagnet.kagnet_graph import ConceptGraph

GRAPH_INPUTS = ("concept_ids", "edges", "pair_nodes", "path_nodes", "path_relations")


def _ragged_expand(starts, lengths):
    """For rows with ``lengths`` items from ``starts``: (row of each item, flat index)."""
    offsets = tf.ragged.range(lengths)
    rows = offsets.value_rowids()
    return rows, tf.gather(starts, rows) + offsets.flat_values


def _rows_unique(rows, values, num_values):
    """Per-row unique values, first appearance first, of a flat (row, value) list whose
    rows are non-decreasing: (rows, values) of the kept items."""
    keys = tf.unique(rows * num_values + values).y  # first-appearance order
    return keys // num_values, keys % num_values


@keras.saving.register_keras_serializable(package="lmfactory")
class ConceptPathFinder(keras.layers.Layer):
    """Question and answer concepts -> schema graph and pruned paths (see the module).

    Written for KagNet: keras-nlp and tf-text have no graph search. Inputs (`call`):
    ``question_concepts`` and ``answer_concepts``, int ragged [rows, None] concept ids
    (a -1 or an id outside the graph is ignored); outputs: the dict of `GRAPH_INPUTS`.

    Args:
        graph_dir: a folder written by `ConceptGraph.save` (or pass ``graph``).
        max_hops: H, 1 to 3.
        max_paths_per_pair: K.
        max_question_concepts, max_answer_concepts: grounded concepts kept per row (the
            first ones in the text); M = their product.
        min_path_score: paths scoring below it are pruned (0 keeps every path).
        graph: a `ConceptGraph` (not serialised: the config holds ``graph_dir``).
    """

    def __init__(self, graph_dir=None, max_hops=2, max_paths_per_pair=4,
                 max_question_concepts=8, max_answer_concepts=4, min_path_score=0.0,
                 graph=None, **kwargs):
        kwargs.setdefault("trainable", False)
        super().__init__(**kwargs)
        if not 1 <= int(max_hops) <= 3:
            raise ValueError(f"ConceptPathFinder: max_hops must be 1, 2 or 3, got {max_hops}")
        if graph is None:
            if graph_dir is None:
                raise ValueError("ConceptPathFinder needs graph_dir or graph")
            graph = ConceptGraph.load(graph_dir)
        self.graph_dir = graph_dir
        self.max_hops = int(max_hops)
        self.max_paths_per_pair = int(max_paths_per_pair)
        self.max_question_concepts = int(max_question_concepts)
        self.max_answer_concepts = int(max_answer_concepts)
        self.min_path_score = float(min_path_score)
        self.num_concepts = int(graph.num_concepts)
        self.num_relations = int(graph.num_relations)
        self.embedding_dim = graph.embedding_dim
        self.max_pairs = self.max_question_concepts * self.max_answer_concepts
        self.max_nodes = (self.max_question_concepts + self.max_answer_concepts
                          + self.max_pairs * self.max_paths_per_pair * (self.max_hops - 1))
        self.max_edges = self.max_pairs * self.max_paths_per_pair * self.max_hops
        splits = np.asarray(graph.row_splits, np.int64)
        capped = np.minimum(np.diff(splits), graph.max_neighbours)
        self._row_splits = tf.constant(splits)
        self._capped_lengths = tf.constant(capped.astype(np.int64))
        self._targets = tf.constant(np.asarray(graph.targets, np.int64))
        self._relations = tf.constant(np.asarray(graph.relations, np.int64))
        self._log_scores = tf.constant(np.asarray(graph.log_scores, np.float32))
        sources = np.repeat(np.arange(graph.num_concepts, dtype=np.int64), np.diff(splits))
        keys = sources * graph.num_concepts + np.asarray(graph.targets, np.int64)
        if len(keys):
            self._edge_table = tf.lookup.StaticHashTable(
                tf.lookup.KeyValueTensorInitializer(
                    tf.constant(keys), tf.range(len(keys), dtype=tf.int64)),
                default_value=-1)
        else:
            self._edge_table = None

    def output_shapes(self) -> dict:
        """Each output's shape after the row axis."""
        M, K, H = self.max_pairs, self.max_paths_per_pair, self.max_hops
        return {"concept_ids": (self.max_nodes,), "edges": (self.max_edges, 2),
                "pair_nodes": (M, 2), "path_nodes": (M, K, H + 1),
                "path_relations": (M, K, H)}

    # ------------------------------------------------------------------ path search

    def _edge(self, sources, targets):
        """Index of the edge sources -> targets, -1 where there is none."""
        if self._edge_table is None:
            return -tf.ones_like(sources)
        return self._edge_table.lookup(sources * self.num_concepts + targets)

    def _candidates(self, q, a):
        """Every simple path of <= H hops between q[p] and a[p]: (pair, concepts [n, H+1],
        relations [n, H], log score [n], hops [n])."""
        hops_max = self.max_hops
        pairs = tf.range(tf.size(q, out_type=tf.int64), dtype=tf.int64)
        found = []

        def add(pair, nodes, edges):
            relations = [tf.gather(self._relations, e) for e in edges]
            score = tf.add_n([tf.gather(self._log_scores, e) for e in edges])
            pad = -tf.ones_like(pair)
            nodes = nodes + [pad] * (hops_max + 1 - len(nodes))
            relations = relations + [pad] * (hops_max - len(relations))
            found.append((pair, tf.stack(nodes, 1), tf.stack(relations, 1), score,
                          tf.fill(tf.shape(pair), len(edges))))

        # 1 hop: the edge (q, a).
        e = self._edge(q, a)
        keep = e >= 0
        add(pairs[keep], [q[keep], a[keep]], [e[keep]])
        starts_q = tf.gather(self._row_splits, q)
        lengths_q = tf.gather(self._capped_lengths, q)
        if hops_max >= 2:  # q - x - a
            p, e1 = _ragged_expand(starts_q, lengths_q)
            x = tf.gather(self._targets, e1)
            qp, ap = tf.gather(q, p), tf.gather(a, p)
            e2 = self._edge(x, ap)
            keep = (e2 >= 0) & tf.not_equal(x, ap) & tf.not_equal(x, qp)
            add(p[keep], [qp[keep], x[keep], ap[keep]], [e1[keep], e2[keep]])
        if hops_max >= 3:  # q - x - y - a
            starts_a = tf.gather(self._row_splits, a)
            lengths_a = tf.gather(self._capped_lengths, a)
            p, k = _ragged_expand(tf.zeros_like(q), lengths_q * lengths_a)
            la = tf.maximum(tf.gather(lengths_a, p), 1)
            e1 = tf.gather(starts_q, p) + k // la
            ea = tf.gather(starts_a, p) + k % la
            x, y = tf.gather(self._targets, e1), tf.gather(self._targets, ea)
            qp, ap = tf.gather(q, p), tf.gather(a, p)
            e2, e3 = self._edge(x, y), self._edge(y, ap)
            distinct = (tf.not_equal(x, ap) & tf.not_equal(y, qp) & tf.not_equal(x, y)
                        & tf.not_equal(x, qp) & tf.not_equal(y, ap))
            keep = (e2 >= 0) & (e3 >= 0) & distinct
            add(p[keep], [qp[keep], x[keep], y[keep], ap[keep]],
                [e1[keep], e2[keep], e3[keep]])
        return [tf.concat(parts, 0) for parts in zip(*found)]

    def find_paths(self, q, a):
        """The pruned paths of flat concept pairs ``(q[p], a[p])``: (pair [n], rank within
        the pair [n], concepts [n, H+1], relations [n, H], log score [n]), sorted by pair
        then score (best first)."""
        q = tf.cast(q, tf.int64)
        a = tf.cast(a, tf.int64)
        pair, nodes, relations, score, hops = self._candidates(q, a)
        # Best first within a pair; ties: fewer hops, then search order (stable sorts).
        order = tf.argsort(hops, stable=True)
        order = tf.gather(order, tf.argsort(-tf.gather(score, order), stable=True))
        order = tf.gather(order, tf.argsort(tf.gather(pair, order), stable=True))
        pair, nodes, relations, score = (tf.gather(t, order) for t in
                                         (pair, nodes, relations, score))
        position = tf.range(tf.size(pair, out_type=tf.int64), dtype=tf.int64)
        first = tf.math.unsorted_segment_min(position, pair, tf.size(q, out_type=tf.int64))
        rank = position - tf.gather(first, pair)
        keep = rank < self.max_paths_per_pair
        if self.min_path_score > 0:
            keep &= score >= float(np.log(self.min_path_score))
        pair, nodes, relations, score = (tf.boolean_mask(t, keep) for t in
                                         (pair, nodes, relations, score))
        # Ranks again after the score threshold (it only drops a pair's worst paths).
        position = tf.range(tf.size(pair, out_type=tf.int64), dtype=tf.int64)
        first = tf.math.unsorted_segment_min(position, pair, tf.size(q, out_type=tf.int64))
        rank = position - tf.gather(first, pair)
        return pair, rank, nodes, relations, score

    # ------------------------------------------------------------------ schema graph

    def _concepts(self, concepts, cap):
        """Known concepts of each row, de-duplicated, the first ``cap``: ragged."""
        concepts = tf.cast(concepts, tf.int64)
        rows = concepts.value_rowids()
        values = concepts.flat_values
        known = (values >= 0) & (values < self.num_concepts)
        rows, values = tf.boolean_mask(rows, known), tf.boolean_mask(values, known)
        rows, values = _rows_unique(rows, values, self.num_concepts)
        ragged = tf.RaggedTensor.from_value_rowids(values, rows,
                                                   nrows=concepts.nrows(out_type=tf.int64))
        return ragged[:, :cap]

    def call(self, question_concepts, answer_concepts):
        if not isinstance(question_concepts, tf.RaggedTensor):
            question_concepts = tf.RaggedTensor.from_tensor(question_concepts, padding=-1)
        if not isinstance(answer_concepts, tf.RaggedTensor):
            answer_concepts = tf.RaggedTensor.from_tensor(answer_concepts, padding=-1)
        qc = self._concepts(question_concepts, self.max_question_concepts)
        ac = self._concepts(answer_concepts, self.max_answer_concepts)
        rows = qc.nrows(out_type=tf.int64)
        E = self.num_concepts
        # Pairs: question concept i x answer concept j of each row, slot i * A + j.
        lq, la = qc.row_lengths(), ac.row_lengths()
        pair_row, k = _ragged_expand(tf.zeros_like(lq), lq * la)
        la_p = tf.maximum(tf.gather(la, pair_row), 1)
        i, j = k // la_p, k % la_p
        pair_q = tf.gather(qc.flat_values, tf.gather(qc.row_splits, pair_row) + i)
        pair_a = tf.gather(ac.flat_values, tf.gather(ac.row_splits, pair_row) + j)
        pair_slot = i * self.max_answer_concepts + j
        path_pair, rank, nodes, relations, _ = self.find_paths(pair_q, pair_a)
        path_row = tf.gather(pair_row, path_pair)
        # Schema graph concepts: sorted unique (row, concept) keys.
        inner = nodes[:, 1:-1]
        inner_rows = tf.repeat(path_row, tf.shape(inner)[1])
        inner = tf.reshape(inner, [-1])
        inner_keep = inner >= 0
        keys = tf.concat([qc.value_rowids() * E + qc.flat_values,
                          ac.value_rowids() * E + ac.flat_values,
                          tf.boolean_mask(inner_rows * E + inner, inner_keep)], 0)
        keys = tf.sort(tf.unique(keys).y)
        node_rows = keys // E
        node_splits = tf.concat([[0], tf.cumsum(tf.math.bincount(
            node_rows, minlength=rows, maxlength=rows, dtype=tf.int64))], 0)

        def position(row, concept):  # -1 stays -1
            query = row * E + tf.maximum(concept, 0)
            found = tf.reshape(tf.searchsorted(keys, tf.reshape(query, [-1]), out_type=tf.int64),
                               tf.shape(query))
            return tf.where(concept >= 0, found - tf.gather(node_splits, row), -1)

        concept_ids = tf.RaggedTensor.from_row_splits(keys % E, node_splits).to_tensor(
            default_value=-1, shape=[None, self.max_nodes])
        path_pos = position(path_row[:, None], nodes)
        pair_pos = tf.stack([position(pair_row, pair_q), position(pair_row, pair_a)], 1)
        slot = tf.gather(pair_slot, path_pair)
        H = self.max_hops
        path_nodes = tf.scatter_nd(
            tf.stack([path_row, slot, rank], 1), path_pos + 1,
            tf.stack([rows, self.max_pairs, self.max_paths_per_pair, H + 1])) - 1
        path_relations = tf.scatter_nd(
            tf.stack([path_row, slot, rank], 1), relations + 1,
            tf.stack([rows, self.max_pairs, self.max_paths_per_pair, H])) - 1
        pair_nodes = tf.scatter_nd(tf.stack([pair_row, pair_slot], 1), pair_pos + 1,
                                   tf.stack([rows, self.max_pairs, 2])) - 1
        # Edges of the kept paths, each once per row (as an unordered pair).
        starts, ends = path_pos[:, :-1], path_pos[:, 1:]
        edge_rows = tf.repeat(path_row, H)
        starts, ends = tf.reshape(starts, [-1]), tf.reshape(ends, [-1])
        real = ends >= 0
        edge_rows, starts, ends = (tf.boolean_mask(t, real) for t in (edge_rows, starts, ends))
        low, high = tf.minimum(starts, ends), tf.maximum(starts, ends)
        n = self.max_nodes
        edge_keys = tf.sort(tf.unique((edge_rows * n + low) * n + high).y)
        edge_rows = edge_keys // (n * n)
        edges = tf.stack([(edge_keys // n) % n, edge_keys % n], 1)
        edges = tf.RaggedTensor.from_value_rowids(edges, edge_rows, nrows=rows).to_tensor(
            default_value=-1, shape=[None, self.max_edges, 2])
        outputs = {"concept_ids": concept_ids, "edges": edges, "pair_nodes": pair_nodes,
                   "path_nodes": path_nodes, "path_relations": path_relations}
        return {name: tf.cast(value, tf.int32) for name, value in outputs.items()}

    def get_config(self):
        config = super().get_config()
        config.update({"graph_dir": self.graph_dir, "max_hops": self.max_hops,
                       "max_paths_per_pair": self.max_paths_per_pair,
                       "max_question_concepts": self.max_question_concepts,
                       "max_answer_concepts": self.max_answer_concepts,
                       "min_path_score": self.min_path_score})
        return config


__all__ = ["ConceptPathFinder", "GRAPH_INPUTS"]
