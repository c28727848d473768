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
