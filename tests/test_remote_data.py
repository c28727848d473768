"""A gs:// data path without Google Cloud credentials fails at once, in one line
naming the recipe field, instead of hanging in the storage client's retries. The tests send
no traffic off the machine: the metadata server is pointed at a closed local port."""

import pytest

from lmfactory.pipelines import remote_data
from lmfactory.pipelines.pipeline import create_components
from lmfactory.recipe import RecipeError, load_recipe


@pytest.fixture
def no_credentials(monkeypatch, tmp_path):
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))  # no gcloud login
    monkeypatch.setenv("GCE_METADATA_HOST", "127.0.0.1:9")
    monkeypatch.setenv("GCE_METADATA_IP", "127.0.0.1:9")
    monkeypatch.setenv("GCE_METADATA_TIMEOUT", "1")
    # google-auth reads the metadata host and timeout when first imported; an earlier test
    # may have imported it already, so point the loaded module at the closed port as well.
    from google.auth.compute_engine import _metadata

    monkeypatch.setattr(_metadata, "_GCE_METADATA_HOST", "127.0.0.1:9")
    monkeypatch.setattr(_metadata, "_METADATA_DEFAULT_TIMEOUT", 1)


def test_remote_paths_name_their_fields():
    recipe = {"data": {"corpus": {"path": "gs://b/corpus.txt"},
                       "task": {"splits": {"train": "/local/train.tsv",
                                           "eval": "gs://b/dev.tsv"}}}}
    assert list(remote_data.remote_paths(recipe)) == [
        ("data.corpus.path", "gs://b/corpus.txt"), ("data.task.splits.eval", "gs://b/dev.tsv")]


def test_gs_path_without_credentials_fails_in_one_line(no_credentials, tmp_path):
    recipe = load_recipe("bert_tiny_sst2", ["data.corpus.path=gs://no-such-bucket/c.txt"])
    with pytest.raises(RecipeError) as error:
        create_components(recipe, str(tmp_path / "serving"))
    assert error.value.field == "data.corpus.path"
    message = str(error.value)
    assert "no Google Cloud credentials" in message and "\n" not in message


def test_local_data_needs_no_credentials(no_credentials):
    remote_data.check_credentials(load_recipe("bert_tiny_sst2"))  # no lookup, no error
