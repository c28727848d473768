"""TF Serving's server-side batching, ready to switch on: ``batching_parameters.pbtxt``.

With ``--enable_batching --batching_parameters_file=<file>`` the model server merges the
requests that arrive within ``batch_timeout_micros`` into one Session run of at most
``max_batch_size`` rows: on a CPU a batch of 32 sentences costs far less than 32 runs of
one (docs/benchmarks/report.md, "Serving latency and throughput": BERT-tiny at length 32
serves 515 sentences/s one by one and 3,494 in batches of 32). The file is a
``BatchingParameters`` text proto (tensorflow_serving/servables/tensorflow/
session_bundle_config.proto); the Pusher writes it beside the pushed versions,
``<base>/batching_parameters.pbtxt`` (the model server ignores a file there: versions are
numeric folders).

The server batches every signature of the model along dimension 0, so every input of every
signature must have one: a model with a scalar input (a generator's ``max_length``,
``temperature``, ...) cannot be batched, and the Pusher says so instead of writing the file.
Rows are concatenated, not padded: requests batched together must agree on every other
dimension (multiple choice: the number of choices).
"""

from __future__ import annotations

import dataclasses
import logging
import os

from tfx.dsl.io import fileio

FILE_NAME = "batching_parameters.pbtxt"


@dataclasses.dataclass(frozen=True)
class BatchingParameters:
    """The values written. ``max_batch_size``: the serving benchmark's batch (32), where
    the CPU's throughput has mostly levelled off; ``batch_timeout_micros``: about one
    batch-1 request of BERT-tiny at length 32 (1.9 ms p50), so a lone request waits at most
    twice its own time; ``num_batch_threads``: batches run at once (set it to the server's
    cores); ``max_enqueued_batches``: the queue beyond which the server answers
    UNAVAILABLE instead of letting latency grow without bound."""
    max_batch_size: int = 32
    batch_timeout_micros: int = 2000
    num_batch_threads: int = 4
    max_enqueued_batches: int = 100

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"BatchingParameters.{field.name} must be a positive "
                                 f"integer, got {value!r}")

    def to_pbtxt(self) -> str:
        """The ``BatchingParameters`` text proto (its fields are ``Int64Value`` wrappers)."""
        return "".join(f"{field.name} {{ value: {getattr(self, field.name)} }}\n"
                       for field in dataclasses.fields(self))


def unbatchable_inputs(signature_defs: dict, requests: list) -> list:
    """``"<signature>.<input>"`` of every input without a dimension 0 to batch along: one
    declared as a scalar, or sent as a scalar by the model's own warm-up ``requests`` (the
    string inputs are declared with an unknown rank, so the declaration alone does not
    tell). A signature without a warm-up request whose inputs are not all declared with a
    dimension 0 is named ``"<signature>.*"``: nothing shows how it is called."""
    sent = {}
    for request in requests:
        name = request.model_spec.signature_name or "serving_default"
        sent.setdefault(name, {}).update(
            {key: len(proto.tensor_shape.dim) for key, proto in request.inputs.items()})
    found = []
    for name, signature in sorted(signature_defs.items()):
        shapes = {key: info.tensor_shape for key, info in signature.inputs.items()}
        if name not in sent and any(shape.unknown_rank for shape in shapes.values()):
            found.append(f"{name}.*")
            continue
        for key, shape in sorted(shapes.items()):
            declared_scalar = not shape.unknown_rank and not shape.dim
            if declared_scalar or sent.get(name, {}).get(key, 1) == 0:
                found.append(f"{name}.{key}")
    return found


def write_batching_parameters(base: str, signature_defs: dict, requests: list,
                              parameters: BatchingParameters = BatchingParameters()
                              ) -> str | None:
    """Writes ``<base>/batching_parameters.pbtxt`` (atomically) when every signature input
    can be batched (`unbatchable_inputs`); returns its path, or None (logged) when the
    model cannot be batched."""
    unbatchable = unbatchable_inputs(signature_defs, requests)
    if unbatchable:
        logging.info("Pusher: no %s for %s: TF Serving cannot batch the inputs %s (no "
                     "batch dimension)", FILE_NAME, base, ", ".join(unbatchable))
        return None
    path = os.path.join(base, FILE_NAME)
    staging = path + ".incomplete"
    with fileio.open(staging, "w") as f:
        f.write(parameters.to_pbtxt())
    fileio.rename(staging, path, overwrite=True)
    return path


__all__ = ["BatchingParameters", "FILE_NAME", "unbatchable_inputs",
           "write_batching_parameters"]
