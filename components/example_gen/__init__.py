"""TextExampleGen: raw text, TSV/CSV, JSONL or TFDS data -> a TFX Examples artifact."""

from lmfactory.components.example_gen.component import TextExampleGen
from lmfactory.components.example_gen.component import TextExampleGenSpec
from lmfactory.components.example_gen.executor import Executor
from lmfactory.components.example_gen.executor import fingerprint_inputs
from lmfactory.components.example_gen.executor import ingest
from lmfactory.components.example_gen.executor import parse_input_config

__all__ = [
    "Executor",
    "TextExampleGen",
    "TextExampleGenSpec",
    "fingerprint_inputs",
    "ingest",
    "parse_input_config",
]
