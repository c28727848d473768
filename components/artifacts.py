"""Artifact types of this project that TFX's standard types do not cover.

Everything else flows as a standard type: ``Examples`` (raw text records and pretraining
records alike), ``Model``, ``ModelRun``, ``ModelEvaluation``, ``ModelBlessing``, ``PushedModel``.
"""

from tfx.types import artifact
from tfx.types import standard_artifacts  # noqa: F401  (re-exported for convenience)


class Vocabulary(artifact.Artifact):
    """A learned sub-word vocabulary: a folder with ``tokenizer.json`` and its vocabulary files.

    ``tokenizer.json`` says which kind it is (``wordpiece``, ``bpe``, ``sentencepiece`` or
    ``byte``) and how to build the
    tokenizer; :func:`lmfactory.models.tokenizers.load_tokenizer` turns the folder into a
    keras-nlp tokenizer, the same object used for example generation, training and serving.
    """

    # On Vertex AI / Kubeflow v2 the container entrypoint (tfx kubeflow_v2_entrypoint_utils.
    # _parse_raw_artifact) imports the class named by the type's schema title, which the
    # compiler restricts to ``module.Class`` (one dot): the package exports this class as
    # ``lmfactory.Vocabulary`` for that (lmfactory/__init__.py; test_vertex_spec runs it).
    TYPE_NAME = "lmfactory.Vocabulary"


class KnowledgeGraph(artifact.Artifact):
    """A knowledge graph read from triple files (KnowledgeGraphGen, components/knowledge_graph):
    a folder with ``entities.tsv`` (index, id, surface forms joined by ``|``),
    ``relations.tsv`` (index, id), ``triples-<split>.npy`` (int32 [N, 3]: head, relation,
    tail indices) and ``counts.json`` (what was read, dropped and why). CONTRACTS
    "Knowledge graphs"."""

    TYPE_NAME = "lmfactory.KnowledgeGraph"


class KGEmbeddings(artifact.Artifact):
    """Entity and relation embeddings trained on a KnowledgeGraph (KGEmbeddingTrainer, e.g.
    TransE): ``entity_embeddings.npy`` float32 [E, d] in the graph's entity order,
    ``relation_embeddings.npy`` [R, d], ``metrics.json`` (filtered link-prediction metrics on
    the test split) and a copy of the graph's ``entities.tsv``."""

    TYPE_NAME = "lmfactory.KGEmbeddings"
