"""``lmfactory predict MODEL [TEXT ...]``: calls a pushed model's serving signature on raw text
and prints one JSON line per input.

The inputs are whatever the SavedModel's signature declares (the exporters in
components/trainer/*serving*.py and components/tasks write them: ``sentence`` or
``sentence1``/``sentence2`` for classifiers and regression, ``sentences`` for taggers,
``question``/``context`` for span QA, ``context``/``choices`` for multiple choice, ``prompt``
for generators, ``text`` for translation and text-to-text models, ``words`` for word vectors),
read from the signature itself, so every task kind works without a table to keep in step.

One input (an argument, a line of ``--file`` or of stdin) is one example:

* plain text: the value of the signature's only per-example input (tabs included);
* tab-separated fields: the inputs in ``--fields`` order (default: the input names sorted, as
  the SavedModel lists them); surplus fields all go to the last input as one list (e.g.
  ``--fields context,choices`` and ``question<TAB>choice 1<TAB>choice 2 ...``);
* a JSON object: input name -> value (a list for a row input such as ``choices``); a line
  that starts with ``{`` but is not JSON is plain text for a model of one text input, and an
  error for a model of several.

Inputs that are settings rather than examples (a generator's ``max_length``, ``sampler``,
``temperature``, ``k``, ``p``) are given once with ``--set NAME=VALUE``. Without
``--signature``, ``serving_default`` is called when the examples and ``--set`` fill all its
inputs, else the first signature they do fill (a generator's ``generate_default``, which
takes only ``prompt`` and uses the recipe's generation settings).

Output: one JSON object per input, in input order: the signature's outputs for that example
(strings decoded as UTF-8; a padded row of strings, such as a tagger's ``tags`` / ``words``,
without its trailing padding; floats rounded to 6 decimals).
"""

from __future__ import annotations

import json
import os
import re
import sys

DEFAULT_SIGNATURE = "serving_default"
PROGRESS_EVERY = 20  # batches between progress lines on stderr (long inputs only)


class PredictError(ValueError):
    """Bad inputs or a model that cannot take them; the message is one line for the user."""


# --------------------------------------------------------------------------- reading inputs


def read_inputs(texts: list[str], file: str | None, stdin=None) -> tuple[list[str], int]:
    """The raw examples: ``texts`` (each one, even empty: an empty prompt is valid), then the
    lines of ``file`` (``-`` = stdin), or of stdin when neither is given and it is not a
    terminal. Returns them and the number of blank file / stdin lines skipped."""
    lines = []
    stream = stdin or sys.stdin  # None when the process was started with stdin closed
    if file is not None:
        if file == "-":
            if stream is None:
                raise PredictError("--file -: stdin is closed")
            lines = stream.read().splitlines()
        else:
            try:
                with open(file, encoding="utf-8") as f:
                    lines = f.read().splitlines()
            except (OSError, UnicodeDecodeError) as error:
                raise PredictError(f"cannot read --file {file!r}: {error}") from None
    elif not texts:
        if stream is None:
            raise PredictError("no input: give TEXT arguments or --file FILE (stdin is "
                               "closed)")
        if stream.isatty():
            raise PredictError("no input: give TEXT arguments, --file FILE or lines on stdin")
        lines = stream.read().splitlines()
    kept = [line for line in lines if line.strip()]
    examples = list(texts) + kept
    if not examples:
        raise PredictError("no input: every given line is empty")
    return examples, len(lines) - len(kept)


def parse_example(line: str, inputs: list[str], number: int) -> dict:
    """One raw input -> {input name: str or list of str} for the per-example ``inputs`` (in
    field order)."""
    stripped = line.strip()
    record, problem = _json_object(stripped, number) if stripped.startswith("{") else (None, "")
    if record is None and problem and len(inputs) > 1 and "\t" not in line:
        # not text for one input, nor tab-separated fields: broken JSON
        raise PredictError(f"input {number}: not valid JSON ({problem})")
    if record is not None:
        missing = [name for name in inputs if name not in record]
        unknown = sorted(set(record) - set(inputs))
        if missing or unknown:
            raise PredictError(f"input {number}: the model takes {inputs}; "
                               f"missing {missing}, unknown {unknown}")
        return {name: record[name] for name in inputs}
    if len(inputs) == 1:  # the whole line, tabs included
        return {inputs[0]: line}
    fields = line.split("\t")
    if len(fields) < len(inputs):
        raise PredictError(
            f"input {number}: {len(fields)} tab-separated field(s) for the model's "
            f"{len(inputs)} inputs {inputs} (field order: --fields; or give a JSON object)")
    if len(fields) == len(inputs):
        return dict(zip(inputs, fields))
    head = dict(zip(inputs[:-1], fields[:len(inputs) - 1]))
    head[inputs[-1]] = fields[len(inputs) - 1:]
    return head


def _json_object(text: str, number: int) -> tuple[dict | None, str]:
    """``(the JSON object text holds, "")``, or ``(None, why it is not JSON)``: plain text
    that starts with ``{`` is an example like any other for a model of one text input.
    PredictError for JSON nested too deeply to read."""
    try:
        record = json.loads(text)
    except json.JSONDecodeError as error:
        return None, error.msg
    except RecursionError:
        raise PredictError(f"input {number}: JSON nested too deeply") from None
    return (record, "") if isinstance(record, dict) else (None, "not an object")


def _parse_settings(settings: list[str]) -> dict:
    parsed = {}
    for setting in settings:
        name, sep, value = setting.partition("=")
        if not sep or not name:
            raise PredictError(f"--set takes NAME=VALUE, got {setting!r}")
        parsed[name.strip()] = value
    return parsed


# --------------------------------------------------------------------------- the signature


def signature_inputs(function) -> dict:
    """Input name -> tf.DType of a loaded signature."""
    return {name: spec.dtype for name, spec in function.structured_input_signature[1].items()}


def choose_signature(signatures, requested: str | None, settings: dict,
                     fields: list[str] | None):
    """``(name, function, per-example inputs in field order)``: the requested signature, or
    ``serving_default``, or the first other one (by name) whose inputs the examples (text:
    string inputs only) and ``settings`` fill."""
    names = [requested] if requested else (
        [DEFAULT_SIGNATURE] + sorted(n for n in signatures.keys() if n != DEFAULT_SIGNATURE))
    described = []
    for name in names:
        if name not in signatures:
            raise PredictError(f"the model has no signature {name!r}; it has "
                               f"{sorted(signatures.keys())}")
        function = signatures[name]
        inputs = signature_inputs(function)
        example_inputs = sorted(set(inputs) - set(settings))
        fillable = (example_inputs and set(settings) <= set(inputs)
                    and all(inputs[n].name == "string" for n in example_inputs)
                    and (not fields or set(fields) == set(example_inputs)))
        if fillable:
            return name, function, list(fields) if fields else example_inputs
        described.append(f"{name}({', '.join(sorted(inputs))})")
    raise PredictError(f"no signature takes these inputs: {'; '.join(described)} "
                       f"(per-example text fills string inputs, --set NAME=VALUE the others; "
                       f"--fields names the per-example ones)")


def _batch_tensors(examples: list[dict], inputs: dict, example_inputs: list[str],
                   settings: dict) -> dict:
    import tensorflow as tf

    tensors = {}
    for name in example_inputs:
        values = [example[name] for example in examples]
        rows = [isinstance(v, list) for v in values]
        if any(rows) and not all(rows):
            raise PredictError(f"input {name!r} is a list in some examples and not in others")
        if any(rows) and len({len(v) for v in values}) > 1:
            raise PredictError(f"input {name!r}: every example needs the same number of "
                               f"values, got {sorted({len(v) for v in values})}")
        try:
            tensors[name] = tf.constant(values, dtype=inputs[name])
        except (TypeError, ValueError) as error:
            raise PredictError(f"input {name!r}: {error}") from None
    for name, value in settings.items():
        dtype = inputs[name]
        try:
            scalar = _cast(value, dtype)
        except ValueError as error:
            reason = str(error) if "range" in str(error) else f"not a {dtype.name}"
            raise PredictError(f"--set {name}={value!r}: {reason}") from None
        tensors[name] = tf.constant(scalar, dtype=dtype)
    return tensors


def _cast(value: str, dtype):
    if dtype.is_integer:
        number = int(value)
        if not dtype.min <= number <= dtype.max:  # tf.constant would wrap it silently
            raise ValueError(f"{number} is outside {dtype.name}'s range")
        return number
    if dtype.is_floating:
        return float(value)
    if dtype.is_bool:
        if value.lower() not in ("true", "false", "1", "0"):
            raise ValueError(value)
        return value.lower() in ("true", "1")
    return value


def _plain(value):
    """A numpy value -> JSON: UTF-8 strings, floats to 6 decimals, padded string rows
    without their trailing empty strings."""
    import numpy as np

    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, np.ndarray):
        items = [_plain(v) for v in value]
        if value.dtype.kind in "SOU":
            while items and items[-1] == "":
                items.pop()
        return items
    if isinstance(value, (np.floating, float)):
        return round(float(value), 6)
    if isinstance(value, (np.integer, np.bool_)):
        return value.item()
    return value


def rows_of(outputs: dict, batch_size: int) -> list[dict]:
    """The per-example rows of a signature's outputs."""
    arrays = {name: tensor.numpy() for name, tensor in outputs.items()}
    rows = []
    for index in range(batch_size):
        row = {}
        for name in sorted(arrays):
            array = arrays[name]
            per_example = array.ndim >= 1 and array.shape[0] == batch_size
            row[name] = _plain(array[index] if per_example else array)
        rows.append(row)
    return rows


_NOT_THE_MESSAGE = ("Graph execution error", "Detected at node", "<stack traces", "[[",
                    "File ")


def error_line(error: Exception) -> str:
    """The line of a failed signature call that says what is wrong: the message of the
    graph's failed assertion (the serving modules check their inputs with messages naming
    them), else the first line that is not TensorFlow's node / stack bookkeeping."""
    message = getattr(error, "message", None) or str(error)
    asserted = re.search(r"assertion failed: \[(.*?)\]", message, flags=re.S)
    if asserted:
        return asserted.group(1).replace("\\'", "'").strip().rstrip(". ")
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    useful = [line for line in lines if not line.startswith(_NOT_THE_MESSAGE)]
    return (useful or lines or [type(error).__name__])[0]


def load_signatures(model_dir: str):
    """The signatures of the SavedModel in ``model_dir``; PredictError in one line when it
    does not load (a garbage, empty or truncated saved_model.pb, missing variables)."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tokenizer ops the SavedModels use)

    try:
        return tf.saved_model.load(model_dir).signatures
    except Exception as error:  # noqa: BLE001  (TF raises many kinds; each is one line here)
        lines = [line for line in str(error).strip().splitlines() if line.strip()]
        detail = lines[0][:300] if lines else type(error).__name__
        reason = _graph_file_problem(model_dir) or f"{type(error).__name__}: {detail}"
        raise PredictError(f"the SavedModel {model_dir} does not load: {reason}") from None


def _graph_file_problem(model_dir: str) -> str | None:
    """Of a SavedModel that failed to load: what is wrong with ``saved_model.pb`` when it
    holds no graph at all (an empty file, or bytes that parse as a SavedModel without a
    MetaGraph): TensorFlow's own message then speaks of missing tag-sets, which misleads.
    None when it holds one (or when it does not parse: TensorFlow's message says so)."""
    import tensorflow as tf
    from tensorflow.core.protobuf import saved_model_pb2

    path = os.path.join(model_dir, "saved_model.pb")
    if not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path, "rb") as f:
        data = f.read()
    if not data:
        return "its saved_model.pb is empty (0 bytes)"
    graph_file = saved_model_pb2.SavedModel()
    try:
        graph_file.ParseFromString(data)
    except Exception:  # noqa: BLE001  (garbage: TensorFlow's message names the parse error)
        return None
    if not graph_file.meta_graphs:
        return (f"its saved_model.pb ({len(data):,} bytes) holds no graph: truncated, or not "
                f"a SavedModel")
    return None


def predict(model_dir: str, lines: list[str], signature: str | None = None,
            settings: list[str] = (), fields: list[str] | None = None, batch_size: int = 32,
            out=None, signatures=None) -> int:
    """Writes one JSON line per input line to ``out``; returns the number written."""
    import tensorflow as tf

    out = out or sys.stdout
    settings = _parse_settings(list(settings))
    signatures = signatures if signatures is not None else load_signatures(model_dir)
    _, function, example_inputs = choose_signature(signatures, signature, settings, fields)
    inputs = signature_inputs(function)
    examples = [parse_example(line, example_inputs, number)
                for number, line in enumerate(lines, 1)]
    written = 0
    batches = -(-len(examples) // batch_size)
    for number, start in enumerate(range(0, len(examples), batch_size), 1):
        if batches > PROGRESS_EVERY and number % PROGRESS_EVERY == 0:
            print(f"lmfactory: {written:,} of {len(examples):,} inputs predicted",
                  file=sys.stderr, flush=True)
        batch = examples[start:start + batch_size]
        tensors = _batch_tensors(batch, inputs, example_inputs, settings)
        try:
            outputs = function(**tensors)
        except (tf.errors.InvalidArgumentError, ValueError, TypeError) as error:
            raise PredictError(f"inputs {start + 1}-{start + len(batch)}: "
                               f"{error_line(error)}") from None
        for row in rows_of(outputs, len(batch)):
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
            written += 1
        out.flush()
    return written
