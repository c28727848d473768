"""Reading Hugging Face checkpoints without PyTorch, and writing their weights into Keras.

A Hugging Face folder holds ``config.json`` and ``model.safetensors`` (or shards listed in
``model.safetensors.index.json``); :func:`read_weights` reads them with the ``safetensors``
numpy API. PyTorch ``nn.Linear`` stores its weight as ``[out, in]``; Keras ``Dense`` kernels
are ``[in, out]`` and keras-nlp's attention projections are ``EinsumDense`` kernels of shape
``[hidden, heads, head_dim]`` (query/key/value) and ``[heads, head_dim, hidden]`` (output).
The ``set_*`` helpers do these reshapes and check every shape, so a converter reads as a
list of "this reference weight goes there".

Each architecture's converter (``models/<arch>/<arch>_converters.py``) builds its backbone
from the reference config, then copies weights with a :class:`WeightReader`, which fails on a
missing name and lets the converter check that nothing of the backbone was left unread.
"""

from __future__ import annotations

import contextlib
import json
import os

import numpy as np

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
WEIGHTS_INDEX_FILE = "model.safetensors.index.json"


def read_config(path: str) -> dict:
    """The ``config.json`` of the Hugging Face folder ``path``."""
    config_path = os.path.join(path, CONFIG_FILE)
    if not os.path.exists(config_path):
        raise FileNotFoundError(f"No {CONFIG_FILE} in Hugging Face folder {path!r}")
    with open(config_path, encoding="utf-8") as f:
        return json_object(f.read(), config_path)


def json_object(text: str, path: str) -> dict:
    """``text`` (the contents of ``path``) as a JSON object; ValueError in one line naming
    the file when it is not JSON or not an object."""
    try:
        config = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not valid JSON ({error.msg}, line {error.lineno})") from None
    if not isinstance(config, dict):
        raise ValueError(f"{path}: must hold a JSON object, got a {type(config).__name__}")
    return config


def positive_int(config: dict, key: str, source: str, default=None) -> int:
    """``config[key]`` (``default`` when absent) as a positive integer; ValueError naming
    the field otherwise."""
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{source}: config.json field {key!r} must be a positive integer, "
                         f"got {value!r}")
    return value


def check_config(config: dict, source: str, *, required_keys, what: str, model_type: str,
                 converter: str, default_model_type: str | None = None) -> None:
    """Fails (ValueError naming ``source``) when the Hugging Face ``config`` lacks one of
    ``required_keys`` (``what``: the model's name in the message) or its ``model_type``
    (``default_model_type`` when absent) is not ``model_type``, the one the ``converter``
    (its name in the message) reads."""
    missing = [key for key in required_keys if key not in config]
    if missing:
        raise ValueError(f"{source}: {what} config lacks {missing}")
    found = config.get("model_type", default_model_type)
    if found != model_type:
        raise ValueError(f"{source}: model_type is {found!r}, the {converter} converter "
                         f"reads '{model_type}' checkpoints only")


def bert_layout_dimensions(config: dict) -> dict:
    """The backbone constructor kwargs of a BERT-layout Hugging Face encoder config (BERT,
    ELECTRA): sizes, number of segments, and one dropout rate for embeddings, attention
    probabilities and sub-layer outputs (the published configs set hidden_dropout_prob =
    attention_probs_dropout_prob = 0.1)."""
    source = "Hugging Face config"
    return {
        "vocabulary_size": positive_int(config, "vocab_size", source),
        "num_layers": positive_int(config, "num_hidden_layers", source),
        "num_heads": positive_int(config, "num_attention_heads", source),
        "hidden_dim": positive_int(config, "hidden_size", source),
        "intermediate_dim": positive_int(config, "intermediate_size", source),
        "dropout": float(config.get("hidden_dropout_prob", 0.1)),
        "max_sequence_length": positive_int(config, "max_position_embeddings", source, 512),
        "num_segments": positive_int(config, "type_vocab_size", source, 2),
    }


def read_weights(path: str) -> dict:
    """Every tensor of the folder's safetensors file(s), as numpy arrays by name, in their
    stored dtype (`WeightReader` checks and casts each one a converter reads: a checkpoint
    also holds integer buffers, such as BERT's ``position_ids``, that no weight takes)."""
    from safetensors.numpy import load_file

    index_path = os.path.join(path, WEIGHTS_INDEX_FILE)
    if os.path.exists(index_path):
        with open(index_path, encoding="utf-8") as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    elif os.path.exists(os.path.join(path, WEIGHTS_FILE)):
        files = [WEIGHTS_FILE]
    else:
        raise FileNotFoundError(
            f"No {WEIGHTS_FILE} (or {WEIGHTS_INDEX_FILE}) in {path!r}; only safetensors "
            f"checkpoints are read (convert a pytorch_model.bin with safetensors first)")
    weights = {}
    for name in files:
        for key, value in load_file(os.path.join(path, name)).items():
            weights[key] = value
    return weights


def as_float32_weight(name: str, value: np.ndarray) -> np.ndarray:
    """``value`` as float32; ValueError naming the tensor when it is not floating point (an
    integer or boolean tensor would be cast silently) or holds a value float32 cannot carry
    (NaN, inf, or beyond float32's range, which the cast would turn into inf)."""
    value = np.asarray(value)
    if value.dtype.kind != "f":
        raise ValueError(f"Checkpoint tensor {name!r} is {value.dtype}, where a floating-point "
                         f"weight is expected")
    if value.dtype != np.float32:
        with np.errstate(over="ignore"):
            value = value.astype(np.float32)
    if not np.isfinite(value).all():
        raise ValueError(f"Checkpoint tensor {name!r} holds non-finite values (NaN, inf or "
                         f"beyond float32's range)")
    return value


class WeightReader:
    """Hands out reference weights by name and remembers which were read.

    ``prefixes``: tried in order before each name, so one converter reads both a bare model
    (``embeddings.word_embeddings.weight``) and a task model that nests it
    (``bert.embeddings.word_embeddings.weight``).
    """

    def __init__(self, weights: dict, prefixes=("",)):
        self.weights = weights
        self.prefixes = tuple(prefixes)
        self.read = set()

    def has(self, name: str) -> bool:
        return any(prefix + name in self.weights for prefix in self.prefixes)

    def __call__(self, name: str) -> np.ndarray:
        for prefix in self.prefixes:
            if prefix + name in self.weights:
                self.read.add(prefix + name)
                return as_float32_weight(prefix + name, self.weights[prefix + name])
        stem = name.split(".")[0]
        similar = sorted(k for k in self.weights if stem in k)[:8]
        raise KeyError(f"Checkpoint has no weight {name!r} (prefixes tried: "
                       f"{list(self.prefixes)}); similar names: {similar}")

    def unread(self, ignore_prefixes=()) -> list:
        """Names never read, except those under ``ignore_prefixes`` (e.g. task heads)."""
        return sorted(k for k in self.weights if k not in self.read
                      and not any(k.startswith(p) for p in ignore_prefixes))


def assign(variable, value: np.ndarray, what: str) -> None:
    """Assigns the array ``value`` to ``variable`` after checking the shapes match (the
    error names ``what`` and the variable's path)."""
    value = np.asarray(value)
    if tuple(variable.shape) != tuple(value.shape):
        raise ValueError(f"Shape mismatch for {what} ({variable.path}): the model has "
                         f"{tuple(variable.shape)}, the checkpoint {tuple(value.shape)}")
    variable.assign(value)


def set_embedding(layer, table: np.ndarray) -> None:
    """A ``keras.layers.Embedding`` (or keras-nlp ``ReversibleEmbedding``) from ``[V, E]``,
    or a keras-nlp ``PositionEmbedding`` (table ``position_embeddings``) from ``[T, E]``."""
    variable = getattr(layer, "embeddings", None)
    if variable is None:
        variable = getattr(layer, "position_embeddings", None)
    if variable is None:
        raise TypeError(f"set_embedding: {type(layer).__name__} {layer.name!r} has no "
                        f"embedding table")
    assign(variable, table, "embedding table")


def set_dense(layer, weight: np.ndarray, bias: np.ndarray | None = None) -> None:
    """A ``keras.layers.Dense`` from a torch ``nn.Linear`` weight ``[out, in]`` and bias."""
    assign(layer.kernel, np.asarray(weight).T, "dense kernel")
    if bias is not None:
        assign(layer.bias, bias, "dense bias")


def set_layer_norm(layer, gamma: np.ndarray, beta: np.ndarray) -> None:
    assign(layer.gamma, gamma, "layer norm gamma")
    assign(layer.beta, beta, "layer norm beta")


def set_attention(attention, query, key, value, output) -> None:
    """A ``keras.layers.MultiHeadAttention`` (what keras-nlp's blocks use) from four torch
    Linear ``(weight, bias)`` pairs: query/key/value ``[H, H]`` and the output projection."""
    heads = attention.num_heads
    head_dim = attention.key_dim
    for layer, (weight, bias) in ((attention.query_dense, query), (attention.key_dense, key),
                                  (attention.value_dense, value)):
        weight = np.asarray(weight)
        assign(layer.kernel, weight.T.reshape(weight.shape[1], heads, head_dim),
                "attention projection kernel")
        assign(layer.bias, np.asarray(bias).reshape(heads, head_dim),
                "attention projection bias")
    weight, bias = output
    weight = np.asarray(weight)
    assign(attention.output_dense.kernel, weight.T.reshape(heads, head_dim, weight.shape[0]),
            "attention output kernel")
    assign(attention.output_dense.bias, bias, "attention output bias")


def set_transformer_encoder(block, *, query, key, value, attention_output,
                            attention_layer_norm, intermediate, output,
                            output_layer_norm) -> None:
    """A ``keras_nlp.layers.TransformerEncoder`` from reference weights: each projection a
    torch Linear ``(weight, bias)`` pair, each layer norm a ``(gamma, beta)`` pair.

    ``attention_layer_norm`` is the one around the attention sub-layer, ``output_layer_norm``
    the one around the feed-forward sub-layer (BERT's ``attention.output.LayerNorm`` and
    ``output.LayerNorm``); where they sit (post- or pre-LN) is the block's own setting.
    """
    set_attention(block._self_attention_layer, query, key, value, attention_output)
    set_layer_norm(block._self_attention_layer_norm, *attention_layer_norm)
    set_dense(block._feedforward_intermediate_dense, *intermediate)
    set_dense(block._feedforward_output_dense, *output)
    set_layer_norm(block._feedforward_layer_norm, *output_layer_norm)


def set_encoder_layer(block, read: WeightReader, prefix: str, names: dict) -> None:
    """`set_transformer_encoder` from the reference layer ``prefix``: ``names`` maps each of
    its arguments to the name of that weight under ``prefix`` (a torch Linear for the
    projections, a LayerNorm for ``attention_layer_norm`` / ``output_layer_norm``); the
    checkpoint formats differ only in these names."""
    set_transformer_encoder(block, **{
        role: (layer_norm if role.endswith("layer_norm") else linear)(read, prefix + name)
        for role, name in names.items()
    })


# The weight names of a BERT layer: BERT and the models that keep its encoder (RoBERTa,
# ELECTRA).
BERT_LAYER_NAMES = {
    "query": "attention.self.query",
    "key": "attention.self.key",
    "value": "attention.self.value",
    "attention_output": "attention.output.dense",
    "attention_layer_norm": "attention.output.LayerNorm",
    "intermediate": "intermediate.dense",
    "output": "output.dense",
    "output_layer_norm": "output.LayerNorm",
}


def set_bert_layer(block, read: WeightReader, prefix: str) -> None:
    """A ``keras_nlp.layers.TransformerEncoder`` from the reference BERT layer ``prefix``
    (e.g. ``encoder.layer.0``): ``attention.self.{query,key,value}``,
    ``attention.output.{dense,LayerNorm}``, ``intermediate.dense``, ``output.{dense,
    LayerNorm}``; the layout of BERT and of the models that keep BERT's encoder (RoBERTa,
    ELECTRA)."""
    set_encoder_layer(block, read, f"{prefix}.", BERT_LAYER_NAMES)


def set_masked_lm_head(head, *, dense, layer_norm, bias) -> None:
    """A keras-nlp ``MaskedLMHead`` from reference weights: its transform from the torch
    Linear ``dense`` ``(weight, bias)`` and the LayerNorm ``layer_norm`` ``(gamma, beta)``,
    and its output ``bias`` [V]. The output projection is tied to the token embedding and
    is loaded with it."""
    set_dense(head._intermediate_dense, *dense)
    set_layer_norm(head._intermediate_layer_norm, *layer_norm)
    assign(head._bias, bias, "masked-LM output bias")


@contextlib.contextmanager
def reading(source: str):
    """Converts the errors of reading a checkpoint (a missing weight: KeyError, a shape
    mismatch: ValueError) into ValueErrors naming the checkpoint ``source``."""
    try:
        yield
    except KeyError as error:
        raise ValueError(f"{source}: {error.args[0]}") from error
    except ValueError as error:
        raise ValueError(f"{source}: {error}") from error


def linear(read: WeightReader, name: str) -> tuple:
    """``(weight, bias)`` of the torch Linear ``name`` (``name.weight``, ``name.bias``)."""
    return read(f"{name}.weight"), read(f"{name}.bias")


def layer_norm(read: WeightReader, name: str) -> tuple:
    """``(gamma, beta)`` of the LayerNorm ``name`` (``.weight``/``.bias``, or the old
    ``.gamma``/``.beta`` names of some published checkpoints)."""
    if read.has(f"{name}.weight"):
        return read(f"{name}.weight"), read(f"{name}.bias")
    return read(f"{name}.gamma"), read(f"{name}.beta")
