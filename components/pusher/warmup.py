"""TF Serving warm-up records: ``<SavedModel>/assets.extra/tf_serving_warmup_requests``.

The model server replays these requests when it loads a version, before the version serves
traffic, so the first user request does not pay for graph optimisation and kernel set-up
(TF Serving's "SavedModel Warmup" guide). The file is a TFRecord of ``PredictionLog``
protos (tensorflow_serving/apis/prediction_log.proto) whose ``predict_log.request`` is a
``PredictRequest`` naming a signature. A request that fails makes the model server refuse
the whole version, so `write_warmup_requests` runs every request through the exported
signature first and keeps only those that succeed (the others are logged and counted).

Each log's ``predict_log.response`` holds what the signature answered in Python: the
outputs two calls on the same request agree on (a sampler's draw differs between calls and
is left out). The model server reads only the request; the Pusher's loader check
(loader_check.py) compares what TF Serving's loader answers with these responses, so it
needs no second load of the model in Python.

The requests are built from the task's eval examples: the first ``count`` records, read
as their formats say (CONTRACTS §1, §3), mapped to each signature's inputs by
`raw_inputs`:

* an input named like a string feature of the records takes it (classification and
  regression text features, span QA's ``question`` / ``context``, multiple choice's
  ``context`` and its ``choices`` list as a [B, C] matrix);
* ``sentences`` (the tagger): a CoNLL record's ``tokens`` joined by spaces;
* ``text``: a parallel record's ``source`` sentence (translation); the task prefix
  followed by the text features when the task record has a ``prefix`` (text-to-text,
  the prompt its training used); otherwise the decoded ids of a pretraining record;
* ``prompt`` (generation): the first tokens of a pretraining record, decoded;
* ``words`` (word vectors): each record's centre word (or its first ids), decoded;
* a scalar input named like a ``serving.generation`` setting (``max_length``, ``sampler``,
  ``temperature``, ``k``, ``p``) takes the model's setting.
"""

from __future__ import annotations

import logging
import os

import numpy as np
import tensorflow as tf

from lmfactory.models.saved_model import SavedSignatures

ASSETS_EXTRA = "assets.extra"
WARMUP_FILE = "tf_serving_warmup_requests"
DEFAULT_COUNT = 3  # raw examples per request; one request per signature
PROMPT_TOKENS = 8  # tokens of a pretraining record a generation prompt keeps
_ID_FEATURES = ("centre_id", "input_ids", "token_ids", "inputs")


def warmup_path(export_dir: str) -> str:
    return os.path.join(export_dir, ASSETS_EXTRA, WARMUP_FILE)


def read_examples(file_pattern: str, count: int = DEFAULT_COUNT) -> list[dict]:
    """The first ``count`` records of the GZIP TFRecord files matching ``file_pattern``, as
    ``{feature: [values]}`` (bytes decoded to str; int64 and float lists as given)."""
    files = sorted(tf.io.gfile.glob(file_pattern))
    if not files:
        raise FileNotFoundError(f"No eval records match {file_pattern!r}")
    examples = []
    for serialized in tf.data.TFRecordDataset(files, compression_type="GZIP").take(count):
        example = tf.train.Example.FromString(serialized.numpy())
        parsed = {}
        for name, feature in example.features.feature.items():
            kind = feature.WhichOneof("kind")
            values = list(getattr(feature, kind).value) if kind else []
            if kind == "bytes_list":
                values = [value.decode("utf-8", errors="replace") for value in values]
            parsed[name] = values
        examples.append(parsed)
    return examples


def _strings(examples: list, name: str):
    """The feature ``name`` of every example as [B] (one value each) or [B, n]; None when
    an example lacks it, holds no string or the rows differ in length."""
    rows = [example.get(name) for example in examples]
    if not rows or any(not row or not isinstance(row[0], str) for row in rows):
        return None
    if all(len(row) == 1 for row in rows):
        return np.array([row[0] for row in rows], dtype=object)
    if len({len(row) for row in rows}) == 1:
        return np.array(rows, dtype=object)
    return None


def _ids(example: dict):
    for name in _ID_FEATURES:
        values = example.get(name)
        if values and isinstance(values[0], int):
            return name, values
    return None, None


def _decoded(examples: list, vocab_dir: str | None, what: str):
    """Strings decoded from the ids of pretraining records (``what``: prompt, text, words)."""
    if not vocab_dir or not examples or any(_ids(e)[0] is None for e in examples):
        return None
    from lmfactory.models.tokenizers import load_tokenizer, read_tokenizer_config

    tokenizer = load_tokenizer(vocab_dir)
    specials = set(read_tokenizer_config(vocab_dir).get("special_tokens", {}).values())
    special_ids = {tokenizer.token_to_id(token) for token in specials} - {None}
    size = tokenizer.vocabulary_size()

    def decode(ids):
        ids = [i for i in ids if 0 <= i < size and i not in special_ids]
        if not ids:
            return ""
        text = tokenizer.detokenize(tf.constant([ids], tf.int32))
        text = np.asarray(text.numpy() if hasattr(text, "numpy") else text, dtype=object)
        text = text.ravel()[0] if text.ndim else text.item()
        if isinstance(text, bytes):
            text = text.decode("utf-8", errors="replace")
        return str(text).strip()

    values = []
    for example in examples:
        name, ids = _ids(example)
        if what == "words":
            values.extend(decode([i]) for i in ids[:2] if i not in special_ids)
        else:
            values.append(decode(ids[:PROMPT_TOKENS] if what == "prompt" else ids))
    values = [value for value in values if value] or values
    return np.array(values, dtype=object) if values else None


def _prompt_of_task(examples: list, task: dict):
    """Text-to-text prompts: the task prefix, then the text features (``name: value`` each
    when there are two), as the kind's training built them."""
    features = task.get("text_features") or []
    columns = [_strings(examples, name) for name in features]
    if not features or any(column is None or column.ndim != 1 for column in columns):
        return None
    if len(features) == 1:
        bodies = list(columns[0])
    else:
        bodies = [" ".join(f"{name}: {value}" for name, value in zip(features, row))
                  for row in zip(*columns)]
    return np.array([f"{task['prefix']} {body}".strip() for body in bodies], dtype=object)


def raw_inputs(input_specs: dict, examples: list, model_config: dict,
               vocab_dir: str | None = None) -> dict:
    """``{input name: numpy value}`` of one signature (``input_specs``: name -> TensorSpec)
    from the examples (see the module docstring). Raises ValueError naming an input none of
    the rules fills."""
    from lmfactory.components.tasks.language_model_serving import generation_settings

    task = model_config.get("task") or {}
    settings = generation_settings(model_config.get("generation"))
    inputs = {}
    for name, spec in input_specs.items():
        value = None
        if spec.dtype == tf.string:
            value = _strings(examples, name)
            if value is None and name == "sentences" and all("tokens" in e for e in examples):
                value = np.array([" ".join(e["tokens"]) for e in examples], dtype=object)
            if value is None and name == "text":
                value = _strings(examples, "source")
                if value is None and task.get("prefix") is not None:
                    value = _prompt_of_task(examples, task)
            if value is None and name in ("text", "prompt", "words"):
                value = _decoded(examples, vocab_dir, name)
        if value is None and name in settings and settings[name] is not None:
            value = np.array(settings[name], dtype=spec.dtype.as_numpy_dtype)
        if value is None:
            raise ValueError(f"No warm-up value for input {name!r} ({spec.dtype.name}) from "
                             f"records with features {sorted(examples[0]) if examples else []}")
        inputs[name] = value
    return inputs


def predict_request(signature_name: str, inputs: dict, model_name: str = ""):
    """A ``tensorflow.serving.PredictRequest`` of ``inputs`` (numpy values)."""
    from tensorflow_serving.apis import predict_pb2

    request = predict_pb2.PredictRequest()
    request.model_spec.signature_name = signature_name
    if model_name:
        request.model_spec.name = model_name
    for name, value in inputs.items():
        request.inputs[name].CopyFrom(tf.make_tensor_proto(value))
    return request


def request_tensors(request) -> dict:
    """The inputs of a PredictRequest as tensors, as the model server feeds them."""
    return {name: tf.constant(tf.make_ndarray(proto)) for name, proto in
            request.inputs.items()}


def read_warmup_logs(export_dir: str) -> list:
    """The ``PredictLog`` (request and recorded response) of every ``PredictionLog`` in the
    warm-up file."""
    from tensorflow_serving.apis import prediction_log_pb2

    return [prediction_log_pb2.PredictionLog.FromString(record.numpy()).predict_log
            for record in tf.data.TFRecordDataset(warmup_path(export_dir))]


def read_warmup_requests(export_dir: str) -> list:
    """The ``PredictRequest`` of every ``PredictionLog`` in the warm-up file."""
    return [log.request for log in read_warmup_logs(export_dir)]


def signature_outputs(signature, request) -> dict:
    """``{output: numpy value}`` of ``signature`` called on ``request`` as the model server
    feeds it (bfloat16 as float32)."""
    outputs = signature(**request_tensors(request))
    return {key: (tf.cast(tensor, tf.float32) if tensor.dtype == tf.bfloat16 else tensor)
            .numpy() for key, tensor in outputs.items()}


def recorded_response(signature, request):
    """The ``PredictResponse`` of the outputs that two calls of ``signature`` on ``request``
    agree on (a sampled output is left out)."""
    from tensorflow_serving.apis import predict_pb2

    first = signature_outputs(signature, request)
    second = signature_outputs(signature, request)
    response = predict_pb2.PredictResponse()
    response.model_spec.CopyFrom(request.model_spec)
    for key in sorted(first):
        if first[key].shape == second[key].shape and np.array_equal(first[key], second[key]):
            response.outputs[key].CopyFrom(tf.make_tensor_proto(first[key]))
    return response


def write_warmup_requests(export_dir: str, file_pattern: str, model_config: dict,
                          vocab_dir: str | None = None, count: int = DEFAULT_COUNT,
                          loaded=None) -> dict:
    """Writes the warm-up file of the SavedModel in ``export_dir``: one request per
    signature, built from the first ``count`` records of ``file_pattern``, each run through
    the signature and logged with its response (`recorded_response`). ``loaded``: what
    holds the signatures, if at hand: the model already loaded by ``tf.saved_model.load``,
    or the functions just saved (`models.saved_model.take_saved_signatures`); otherwise the
    SavedModel is loaded. Returns ``{"requests": n, "signatures": [...],
    "skipped": {signature: reason}}``; writes nothing when no request is usable."""
    import tensorflow_text  # noqa: F401  (the SavedModel's tokenizer ops)
    from tensorflow_serving.apis import prediction_log_pb2

    examples = read_examples(file_pattern, count)
    loaded = loaded if loaded is not None else tf.saved_model.load(export_dir)
    logs, skipped, failed_runs = [], {}, 0
    for name in sorted(loaded.signatures):
        signature = loaded.signatures[name]
        request = None
        try:
            inputs = raw_inputs(signature.structured_input_signature[1], examples,
                                model_config, vocab_dir)
            request = predict_request(name, inputs)
            response = recorded_response(signature, request)
        except (ValueError, tf.errors.OpError) as error:
            failed_runs += request is not None  # built, but the signature failed on it
            skipped[name] = str(error).strip().splitlines()[0][:300]
            logging.error("Warm-up request for signature %s left out: %s", name, skipped[name])
            continue
        logs.append(prediction_log_pb2.PredictionLog(
            predict_log=prediction_log_pb2.PredictLog(request=request, response=response)))
    if failed_runs and isinstance(loaded, SavedSignatures):
        # The functions just traced failed (e.g. a tokenizer resource another model has
        # since released): the SavedModel, loaded afresh, decides what is kept.
        logging.warning("Warm-up of %s: the traced signatures failed (%s); loading the "
                        "SavedModel to run the requests", export_dir, skipped)
        return write_warmup_requests(export_dir, file_pattern, model_config, vocab_dir,
                                     count, loaded=tf.saved_model.load(export_dir))
    if logs:
        tf.io.gfile.makedirs(os.path.join(export_dir, ASSETS_EXTRA))
        with tf.io.TFRecordWriter(warmup_path(export_dir)) as writer:
            for log in logs:
                writer.write(log.SerializeToString())
    summary = {"requests": len(logs), "signatures": [log.predict_log.request.model_spec
                                                     .signature_name for log in logs],
               "skipped": skipped}
    logging.info("Warm-up requests of %s: %s", export_dir, summary)
    return summary


__all__ = ["ASSETS_EXTRA", "WARMUP_FILE", "predict_request", "raw_inputs", "read_examples",
           "read_warmup_logs", "read_warmup_requests", "recorded_response",
           "signature_outputs", "request_tensors", "warmup_path", "write_warmup_requests"]
