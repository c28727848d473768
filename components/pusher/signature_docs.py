"""docs/SERVING.md, generated: every task kind's serving signature with REST and gRPC
request examples, the ``models.config`` of several models and versions, and the docker
command of the matching TF Serving release.

``python -m lmfactory.components.pusher.signature_docs`` rewrites docs/SERVING.md (``--check``
exits 1 when the committed file differs). `SIGNATURES` describes each signature's inputs and
outputs; tests/test_serving_docs.py checks every description against the signature the
kind really exports (names and dtypes) and runs every REST body and gRPC request of the
committed file through it, so the page cannot drift from the code.

`rest_tensors` turns a REST ``:predict`` body into the signature's input tensors the way
the model server's REST API does (tensorflow_serving/util/json_tensor.cc): the row format
(``"instances"``: a list of objects, one per example, each value stacked along a new
batch axis; every instance names every input) or the columnar format (``"inputs"``: an
object of whole tensors, scalars allowed); a bare value stands for a signature's single
input; a string is UTF-8 text, ``{"b64": ...}`` base64 bytes; the dtype is the signature's.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import json
import os
import sys

from lmfactory.components.pusher.op_audit import TF_SERVING_VERSION
from lmfactory.components.pusher.warmup import ASSETS_EXTRA, WARMUP_FILE

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOC_PATH = os.path.join(ROOT, "docs", "SERVING.md")
MODELS_CONFIG = os.path.join(ROOT, "serving", "models.config")
REST_PORT, GRPC_PORT = 8501, 8500
REST_MARK = "<!-- rest {id} -->"
GRPC_MARK = "<!-- grpc {id} -->"


@dataclasses.dataclass(frozen=True)
class Port:
    """A signature input or output: name, dtype (a tf.DType name), shape, meaning."""

    name: str
    dtype: str
    shape: str
    meaning: str


@dataclasses.dataclass(frozen=True)
class SignatureDoc:
    """One signature of one task kind's SavedModel, and the request examples of the page.

    ``variant`` names the task record the example model has (``pair``: two text features,
    ``single``: one, ``labelled``: with a ``label_vocabulary``); ``columnar``: the REST
    example uses the columnar ``inputs`` format (needed when an input is a scalar, which the
    row format cannot batch)."""

    id: str
    kind: str
    title: str
    model_name: str
    signature: str
    inputs: tuple
    outputs: tuple
    example: dict
    variant: str = ""
    columnar: bool = False
    note: str = ""


_TEXT = "string"
SIGNATURES = (
    SignatureDoc(
        "classification-single", "classification", "Classification, one text feature (SST-2)",
        "sst2", "serving_default",
        (Port("sentence", _TEXT, "[B]", "one input per recipe `finetuning.text_features`, "
              "named like it"),),
        (Port("probabilities", "float32", "[B, C]", "softmax over the C classes"),
         Port("label", "int64", "[B]", "the most probable class id")),
        {"sentence": ["a gripping, funny and moving film", "a dull, lifeless mess"]},
        variant="single"),
    SignatureDoc(
        "classification-pair", "classification",
        "Classification, sentence pairs with word labels (MNLI, RTE, QNLI)", "mnli",
        "serving_default",
        (Port("sentence1", _TEXT, "[B]", "the first text feature (premise)"),
         Port("sentence2", _TEXT, "[B]", "the second text feature (hypothesis)")),
        (Port("probabilities", "float32", "[B, C]", "softmax over the C classes"),
         Port("label", "int64", "[B]", "the most probable class id"),
         Port("label_name", _TEXT, "[B]", "its word from the task's `label_vocabulary` "
              "(only tasks with word labels)")),
        {"sentence1": ["A man is playing a guitar on stage."],
         "sentence2": ["A person is performing music."]},
        variant="pair_labelled"),
    SignatureDoc(
        "regression", "regression", "Regression, sentence pairs (STS-B)", "stsb",
        "serving_default",
        (Port("sentence1", _TEXT, "[B]", "the first text feature"),
         Port("sentence2", _TEXT, "[B]", "the second text feature")),
        (Port("score", "float32", "[B]", "the predicted score (STS-B: similarity 0-5)"),),
        {"sentence1": ["A plane is taking off."], "sentence2": ["An air plane is taking off."]},
        variant="pair"),
    SignatureDoc(
        "relation-classification", "relation_classification",
        "Relation classification between two marked entities (ERNIE, FB15k-237 relations)",
        "relations", "serving_default",
        (Port("text", _TEXT, "[B]", "the sentence"),
         Port("head", _TEXT, "[B]", "the head entity's mention, as written in the sentence "
              "(its first occurrence is marked)"),
         Port("tail", _TEXT, "[B]", "the tail entity's mention")),
        (Port("probabilities", "float32", "[B, C]", "softmax over the C relations"),
         Port("label", "int64", "[B]", "the most probable relation id"),
         Port("label_name", _TEXT, "[B]", "its name (e.g. a Freebase relation path)")),
        {"text": ["paris is the capital of france"], "head": ["paris"],
         "tail": ["france"]}),
    SignatureDoc(
        "entity-typing", "entity_typing",
        "Entity typing of a marked mention, multi-label (ERNIE, FB15k-237 types)", "typing",
        "serving_default",
        (Port("text", _TEXT, "[B]", "the sentence"),
         Port("mention", _TEXT, "[B]", "the entity's mention, as written in the sentence "
              "(its first occurrence is marked)")),
        (Port("probabilities", "float32", "[B, K]", "a sigmoid per type (K types)"),
         Port("labels", _TEXT, "[B]", "the names of the types above 0.5, most probable "
              "first, separated by spaces (\"\" when none is)")),
        {"text": ["paris is the capital of france"], "mention": ["paris"]}),
    SignatureDoc(
        "tagging", "tagging", "Token tagging (NER, WNUT-17 / CoNLL)", "ner", "serving_default",
        (Port("sentences", _TEXT, "[B]", "sentences; words are split on whitespace"),),
        (Port("tags", _TEXT, "[B, W]", "one tag per word, rows padded with \"\""),
         Port("words", _TEXT, "[B, W]", "the words the tags belong to, padded with \"\""),
         Port("lengths", "int32", "[B]", "each sentence's number of words")),
        {"sentences": ["Paris is the capital of France", "I met John in Berlin"]}),
    SignatureDoc(
        "span-qa", "span_qa", "Extractive question answering (SQuAD 1.1 / 2.0)", "squad",
        "serving_default",
        (Port("question", _TEXT, "[B]", "the questions"),
         Port("context", _TEXT, "[B]", "the passage of each question")),
        (Port("answer", _TEXT, "[B]", "the answer text; \"\" when the model abstains "
              "(SQuAD 2.0: `null_margin` above the tuned threshold)"),
         Port("span", _TEXT, "[B]", "the best span whatever the threshold"),
         Port("score", "float32", "[B]", "its start + end logit score"),
         Port("null_margin", "float32", "[B]", "no-answer score minus the span's score")),
        {"question": ["What is the capital of France?"],
         "context": ["Paris is the capital and largest city of France."]}),
    SignatureDoc(
        "multiple-choice", "multiple_choice", "Multiple choice (CommonsenseQA, SWAG)",
        "commonsenseqa", "serving_default",
        (Port("context", _TEXT, "[B]", "the question (stem)"),
         Port("choices", _TEXT, "[B, C]", "C candidate answers per question (C = the "
              "task's `num_choices`)")),
        (Port("probabilities", "float32", "[B, C]", "softmax over the choices"),
         Port("label", "int64", "[B]", "the index of the chosen answer")),
        {"context": ["Where would you put a plate after washing it?"],
         "choices": [["cupboard", "restaurant", "table", "floor", "oven"]]}),
    SignatureDoc(
        "generation", "language_model", "Text generation, every setting (causal LMs)",
        "gpt2", "serving_default",
        (Port("prompt", _TEXT, "[B]", "the prompts (may be empty)"),
         Port("max_length", "int32", "scalar", "tokens per output, prompt included"),
         Port("sampler", _TEXT, "scalar", "greedy, top_k, top_p, beam or random"),
         Port("temperature", "float32", "scalar", "> 0, divides the logits"),
         Port("k", "int32", "scalar", "top_k's k (read by top_k only)"),
         Port("p", "float32", "scalar", "top_p's nucleus mass (read by top_p only)")),
        (Port("generated_text", _TEXT, "[B]", "the prompt followed by its continuation"),
         Port("num_generated_tokens", "int32", "[B]", "tokens decoded after the prompt")),
        {"prompt": ["The meaning of life is"], "max_length": 16, "sampler": "top_k",
         "temperature": 0.8, "k": 40, "p": 0.9},
        columnar=True,
        note="Scalar inputs have no batch axis, so the REST request uses the columnar "
             "`inputs` format (the row format batches every input)."),
    SignatureDoc(
        "generation-default", "language_model",
        "Text generation with the recipe's settings (causal LMs)", "gpt2", "generate_default",
        (Port("prompt", _TEXT, "[B]", "the prompts"),),
        (Port("generated_text", _TEXT, "[B]", "the prompt followed by its continuation"),
         Port("num_generated_tokens", "int32", "[B]", "tokens decoded after the prompt")),
        {"prompt": ["Once upon a time", ""]},
        note="The settings are the recipe's `serving.generation` block."),
    SignatureDoc(
        "translation", "translation", "Translation (RNNsearch, Transformer)", "en_de",
        "serving_default",
        (Port("text", _TEXT, "[B]", "source sentences"),),
        (Port("translation", _TEXT, "[B]", "beam-search translations"),),
        {"text": ["A little girl climbing into a wooden playhouse ."]}),
    SignatureDoc(
        "text-to-text", "text_to_text", "Text to text (T5)", "t5_sst2", "serving_default",
        (Port("text", _TEXT, "[B]", "prompts: the task prefix, then the text"),),
        (Port("output", _TEXT, "[B]", "the generated text (a label word for "
              "classification tasks)"),),
        {"text": ["sst2 sentence: a gripping, funny and moving film"]}),
    SignatureDoc(
        "word-vectors", "word_vectors", "Word vectors (word2vec)", "word2vec",
        "serving_default",
        (Port("words", _TEXT, "[N]", "words"),),
        (Port("vectors", "float32", "[N, d]", "the vectors (zeros for an unknown word)"),
         Port("known", "bool", "[N]", "whether the string is one vocabulary word"),
         Port("ids", "int32", "[N]", "its vocabulary id, -1 when unknown")),
        {"words": ["king", "queen", "not-a-word"]}),
    SignatureDoc(
        "nearest-neighbours", "word_vectors", "Nearest neighbours (word2vec)", "word2vec",
        "nearest_neighbours",
        (Port("words", _TEXT, "[N]", "words"),),
        (Port("neighbours", _TEXT, "[N, k]", "the k most similar words (cosine)"),
         Port("scores", "float32", "[N, k]", "their cosine similarities"),
         Port("known", "bool", "[N]", "whether the string is one vocabulary word")),
        {"words": ["king", "paris"]}),
)


# --------------------------------------------------------------------------- requests


def rest_body(doc: SignatureDoc) -> dict:
    """The REST ``:predict`` body of ``doc``'s example (row or columnar format)."""
    if doc.columnar:
        return {"signature_name": doc.signature, "inputs": dict(doc.example)}
    names = list(doc.example)
    rows = zip(*(doc.example[name] for name in names))
    return {"signature_name": doc.signature,
            "instances": [dict(zip(names, row)) for row in rows]}


def _python(value) -> str:
    return json.dumps(value, ensure_ascii=False)


def grpc_snippet(doc: SignatureDoc) -> str:
    """Python building the gRPC ``PredictRequest`` of ``doc``'s example (``tf`` and
    ``predict_pb2`` imported)."""
    lines = ["request = predict_pb2.PredictRequest()",
             f'request.model_spec.name = "{doc.model_name}"',
             f'request.model_spec.signature_name = "{doc.signature}"']
    dtypes = {port.name: port.dtype for port in doc.inputs}
    for name, value in doc.example.items():
        lines.append(f'request.inputs["{name}"].CopyFrom(\n'
                     f'    tf.make_tensor_proto({_python(value)}, tf.{dtypes[name]}))')
    return "\n".join(lines)


def _json_value(value, name: str):
    if isinstance(value, dict):
        if set(value) != {"b64"}:
            raise ValueError(f"input {name!r}: an object value must be {{\"b64\": ...}}")
        return base64.b64decode(value["b64"])
    if isinstance(value, list):
        return [_json_value(item, name) for item in value]
    return value.encode("utf-8") if isinstance(value, str) else value


def _tensor(value, spec, name: str):
    import numpy as np
    import tensorflow as tf

    value = _json_value(value, name)
    array = np.array(value, dtype=object if spec.dtype == tf.string else
                     spec.dtype.as_numpy_dtype)
    if array.dtype == object and spec.dtype != tf.string:
        raise ValueError(f"input {name!r}: rows of different lengths")
    if spec.dtype == tf.string and any(isinstance(v, list) for v in array.ravel()):
        raise ValueError(f"input {name!r}: rows of different lengths")
    return tf.constant(array, dtype=spec.dtype)


def rest_tensors(body: dict, input_specs: dict) -> dict:
    """The input tensors of a REST ``:predict`` body for a signature whose inputs are
    ``input_specs`` (name -> TensorSpec), as the model server reads them (module
    docstring). Raises ValueError for a body the server would reject."""
    if ("instances" in body) == ("inputs" in body):
        raise ValueError('a predict body holds exactly one of "instances" and "inputs"')
    names = list(input_specs)
    if "inputs" in body:
        columns = body["inputs"]
        if not isinstance(columns, dict):
            if len(names) != 1:
                raise ValueError(f"a bare value needs a single-input signature, not {names}")
            columns = {names[0]: columns}
    else:
        instances = body["instances"]
        if not isinstance(instances, list) or not instances:
            raise ValueError('"instances" must be a non-empty list')
        if all(isinstance(row, dict) and "b64" not in row for row in instances):
            keys = {frozenset(row) for row in instances}
            if len(keys) != 1:
                raise ValueError("every instance must name the same inputs")
            columns = {name: [row[name] for row in instances] for name in instances[0]}
        elif len(names) == 1:
            columns = {names[0]: instances}
        else:
            raise ValueError(f"instances of a signature with inputs {names} must be objects")
    unknown = sorted(set(columns) - set(names))
    missing = sorted(set(names) - set(columns))
    if unknown or missing:
        raise ValueError(f"inputs not in the signature: {unknown}; missing: {missing}")
    return {name: _tensor(columns[name], input_specs[name], name) for name in names}


# --------------------------------------------------------------------------- page


def _table(ports) -> list:
    lines = ["| name | dtype | shape | meaning |", "|---|---|---|---|"]
    lines += [f"| `{p.name}` | {p.dtype} | {p.shape} | {p.meaning} |" for p in ports]
    return lines


def read_models_config() -> str:
    with open(MODELS_CONFIG, encoding="utf-8") as f:
        return f.read()


def render() -> str:
    """The whole of docs/SERVING.md."""
    out = [
        "# Serving pushed models with TF Serving",
        "",
        "<!-- Generated by `python -m lmfactory.components.pusher.signature_docs`; do not "
        "edit. -->",
        "",
        "The Pusher copies a blessed SavedModel to `<serving_dir>/<serving.model_name>/"
        "<version>/` (`runs/<recipe>/serving/...` for local runs). Each SavedModel takes raw "
        "UTF-8 strings: tokenization runs in the graph with TensorFlow and tensorflow_text "
        f"ops, which is exactly the op set of `tensorflow/serving:{TF_SERVING_VERSION}` "
        "(the release built on TensorFlow 2.16). The Pusher refuses a model holding any "
        "other op (components/pusher/op_audit.py; tests/test_serving_ops.py audits every "
        "architecture and task kind).",
        "",
        "A request costs what its sentences need, not the packed length: the signatures of "
        "encoder models (classification, regression, relation classification, entity "
        "typing, tagging, span QA, multiple choice) pack the request as training did, then "
        "run the model only up to the batch's longest row, rounded up to a multiple of 8, "
        "and pad per-position results back (models/request_length.py). The answers are "
        "those of the full packed length (at most 1e-5); batching requests of similar "
        "lengths together saves the most.",
        "",
        f"Every exported model carries `{ASSETS_EXTRA}/{WARMUP_FILE}`: one `PredictionLog` "
        "per signature built from the task's first eval examples, run through the "
        "signature at export and logged with the response it gave (the outputs two calls "
        "agree on: a sampler's draw is left out; components/pusher/warmup.py). The model "
        "server replays the requests when it loads a version, before the version takes "
        "traffic, and ignores the responses.",
        "",
        "Before a push, the Pusher loads the model the way the model server does: "
        "TensorFlow's C API (`TF_LoadSessionFromSavedModel`, then `TF_SessionRun` by the "
        "SignatureDefs' tensor names) in a process without TensorFlow's Python package, "
        "tensorflow_text's kernels registered with `TF_LoadLibrary`. Every warm-up request "
        "runs there and its outputs must equal the recorded response (at most 1e-5, strings "
        "equal; a sampled output by dtype and batch size); a model that fails is refused in "
        "one line naming the signature (components/pusher/loader_check.py, the job TFX's "
        "InfraValidator does with a real server in Docker). `saved_model_cli run` also loads "
        "the MetaGraph into a Session and restores the variables with the saver's op:",
        "",
        "```sh",
        "python -c 'import sys, tensorflow_text; from tensorflow.python.tools import "
        "saved_model_cli; sys.argv[0] = \"saved_model_cli\"; saved_model_cli.main()' \\",
        "  run --dir runs/bert_tiny_sst2/serving/bert_tiny_sst2/<version> --tag_set serve \\",
        "  --signature_def serving_default --input_exprs 'sentence=[\"a gorgeous, witty film\"]'",
        "```",
        "",
        "## Running the model server",
        "",
        "One model, its pushed versions (the newest is served):",
        "",
        "```sh",
        f"docker run --rm -p {GRPC_PORT}:{GRPC_PORT} -p {REST_PORT}:{REST_PORT} \\",
        "  -v \"$PWD/runs/bert_tiny_sst2/serving/bert_tiny_sst2:/models/sst2\" \\",
        f"  -e MODEL_NAME=sst2 tensorflow/serving:{TF_SERVING_VERSION}",
        "```",
        "",
        "Server-side batching: the Pusher writes `batching_parameters.pbtxt` beside the "
        "versions of a model whose every signature input has a batch dimension (not a "
        "generator's, whose settings are scalars; components/pusher/batching.py). With it the "
        "server merges requests arriving within 2 ms into one run of up to 32 rows "
        "(`num_batch_threads`: set it to the server's cores):",
        "",
        "```sh",
        f"docker run --rm -p {GRPC_PORT}:{GRPC_PORT} -p {REST_PORT}:{REST_PORT} \\",
        "  -v \"$PWD/runs/bert_tiny_sst2/serving/bert_tiny_sst2:/models/sst2\" \\",
        f"  -e MODEL_NAME=sst2 tensorflow/serving:{TF_SERVING_VERSION} \\",
        "  --enable_batching --batching_parameters_file=/models/sst2/batching_parameters.pbtxt",
        "```",
        "",
        "Several models and versions: mount the serving folder and give a `models.config` "
        "(`serving/models.config` of this repository, below):",
        "",
        "```sh",
        f"docker run --rm -p {GRPC_PORT}:{GRPC_PORT} -p {REST_PORT}:{REST_PORT} \\",
        "  -v \"$PWD/serving:/models\" \\",
        f"  tensorflow/serving:{TF_SERVING_VERSION} \\",
        "  --model_config_file=/models/models.config \\",
        "  --model_config_file_poll_wait_seconds=60 \\",
        "  --allow_version_labels_for_unavailable_models",
        "```",
        "",
        "```protobuf",
        read_models_config().rstrip("\n"),
        "```",
        "",
        "`specific` serves exactly the listed versions (the labels `stable` / `canary` "
        "address them: `/v1/models/sst2/labels/canary:predict`, gRPC "
        "`model_spec.version_label`), `latest` the newest N, `all` every version found. "
        "Version folders are the Pusher's Unix-time names; a push appears atomically, so "
        "the server never loads a half-copied version.",
        "",
        "## Calling a model",
        "",
        f"REST: `POST http://localhost:{REST_PORT}/v1/models/<name>[/versions/<v>]:predict` "
        "with one of the JSON bodies below (`curl -d @body.json ...`). The row format "
        "(`instances`, one object per example) answers `{\"predictions\": [...]}`, the "
        "columnar format (`inputs`, whole tensors) `{\"outputs\": {...}}`. Strings are "
        "UTF-8 JSON strings.",
        "",
        f"gRPC (port {GRPC_PORT}), with the `tensorflow-serving-api` package:",
        "",
        "```python",
        "import grpc",
        "import tensorflow as tf",
        "from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc",
        "",
        f'stub = prediction_service_pb2_grpc.PredictionServiceStub(grpc.insecure_channel('
        f'"localhost:{GRPC_PORT}"))',
        "# ... build `request` as in a section below, then:",
        "response = stub.Predict(request, timeout=30.0)",
        "outputs = {name: tf.make_ndarray(proto) for name, proto in response.outputs.items()}",
        "```",
        "",
        "A request of the wrong shape or dtype fails with INVALID_ARGUMENT; most signatures "
        "name the input in the message (e.g. `serving_default: 'sentences' must be a 1-D "
        "batch of UTF-8 strings`). B is the batch size.",
    ]
    for doc in SIGNATURES:
        out += ["", f"### {doc.title}: `{doc.signature}`", "",
                f"Task kind `{doc.kind}`."
                + (f" {doc.note}" if doc.note else ""), "", "Inputs:", ""]
        out += _table(doc.inputs) + ["", "Outputs:", ""] + _table(doc.outputs)
        out += ["", f"REST (`/v1/models/{doc.model_name}:predict`):", "",
                REST_MARK.format(id=doc.id), "```json",
                json.dumps(rest_body(doc), indent=2, ensure_ascii=False), "```", "",
                "gRPC request:", "", GRPC_MARK.format(id=doc.id), "```python",
                grpc_snippet(doc), "```"]
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when docs/SERVING.md differs from the generated page")
    parser.add_argument("--output", default=DOC_PATH)
    args = parser.parse_args(argv)
    page = render()
    if args.check:
        with open(args.output, encoding="utf-8") as f:
            same = f.read() == page
        print(f"{args.output}: {'up to date' if same else 'differs; regenerate it'}")
        return 0 if same else 1
    with open(args.output, "w", encoding="utf-8") as f:
        f.write(page)
    print(f"Wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
