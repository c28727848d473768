"""Cloud Storage data paths need credentials before anything lists them.

Building the pipeline lists every data file (the ingestion fingerprint), and TensorFlow's and
Beam's GCS clients retry a request without credentials for minutes, silently. So
before any component is built, a recipe with ``gs://`` data paths asks google-auth for the
default credentials once (environment, gcloud's application-default login, the metadata
server) and fails in one line naming the recipe field when there are none.
"""

from __future__ import annotations

from typing import Iterator

from lmfactory.recipe import RecipeError

DATA_SECTIONS = ("corpus", "target_corpus", "task")
PATH_KEYS = ("path", "dir", "data_dir")


def remote_paths(recipe: dict, scheme: str = "gs://") -> Iterator[tuple[str, str]]:
    """``(recipe field, path)`` of each data path under ``scheme``."""
    for section in DATA_SECTIONS:
        source = recipe.get("data", {}).get(section) or {}
        if not isinstance(source, dict):
            continue
        for key in PATH_KEYS:
            if isinstance(source.get(key), str) and source[key].startswith(scheme):
                yield f"data.{section}.{key}", source[key]
        for split, path in (source.get("splits") or {}).items():
            if isinstance(path, str) and path.startswith(scheme):
                yield f"data.{section}.splits.{split}", path


def check_credentials(recipe: dict) -> None:
    """RecipeError naming the first ``gs://`` data field when no Google Cloud credentials
    are found; nothing for a recipe with local data only."""
    remote = list(remote_paths(recipe))
    if not remote:
        return
    import google.auth
    from google.auth import exceptions

    try:
        google.auth.default()
    except exceptions.DefaultCredentialsError:
        field, path = remote[0]
        raise RecipeError(field, f"{path} is on Cloud Storage and no Google Cloud credentials "
                                 f"were found (set GOOGLE_APPLICATION_CREDENTIALS or run "
                                 f"`gcloud auth application-default login`)") from None
