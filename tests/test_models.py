"""Tests of lmfactory.models: registry, BERT and GPT-2 backbones and tasks, checkpoints."""

import dataclasses
import gc
import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from lmfactory import models
from lmfactory.models import registry
from lmfactory.models.bert import BertBackbone, BertClassifier, BertPretrainer
from lmfactory.models.gpt2 import GPT2CausalLM

VOCAB = 1000  # tiny vocabulary keeps the tiny presets fast
BATCH, SEQ, PREDS = 3, 12, 4


# --------------------------------------------------------------------------- helpers


def _log_softmax(z):
    z = z.astype(np.float64)
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def _bert_inputs(seed=0, lengths=(12, 7, 9)):
    rng = np.random.default_rng(seed)
    token_ids = rng.integers(5, VOCAB, (BATCH, SEQ)).astype("int32")
    padding_mask = (np.arange(SEQ)[None, :] < np.array(lengths)[:, None]).astype("int32")
    token_ids = token_ids * padding_mask
    segment_ids = (np.arange(SEQ)[None, :] >= 4).astype("int32") * padding_mask
    return {"token_ids": token_ids, "padding_mask": padding_mask, "segment_ids": segment_ids}


def _bert_pretraining_batch(seed=0):
    rng = np.random.default_rng(seed)
    x = _bert_inputs(seed)
    x["mask_positions"] = rng.integers(1, 7, (BATCH, PREDS)).astype("int32")
    y = {"mlm": rng.integers(5, VOCAB, (BATCH, PREDS)).astype("int64"),
         "nsp": np.array([0, 1, 0], dtype="int64")}
    weights = np.array([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]], dtype="float32")
    return x, y, {"mlm": weights}


def _gpt2_inputs(seed=0):
    rng = np.random.default_rng(seed)
    return {"token_ids": rng.integers(1, VOCAB, (BATCH, SEQ)).astype("int32"),
            "padding_mask": np.ones((BATCH, SEQ), dtype="int32")}


def _assert_outputs_equal(a, b, atol=0.0):
    if isinstance(a, dict):
        assert set(a) == set(b)
        for key in a:
            _assert_outputs_equal(a[key], b[key], atol)
    else:
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0, atol=atol)


def _bert_param_formula(V, L, H, I, T=512, S=2):
    block = 4 * (H * H + H) + (H * I + I) + (I * H + H) + 2 * 2 * H
    return V * H + T * H + S * H + 2 * H + L * block + (H * H + H)


def _gpt2_param_formula(V, L, H, I, T=1024):
    block = 4 * (H * H + H) + (H * I + I) + (I * H + H) + 2 * 2 * H
    return V * H + T * H + L * block + 2 * H


@pytest.fixture(scope="module", autouse=True)
def _seed():
    keras.utils.set_random_seed(1234)


@pytest.fixture(scope="module")
def bert():
    return models.build("bert", "tiny", vocabulary_size=VOCAB)


@pytest.fixture(scope="module")
def gpt2():
    return models.build("gpt2", "tiny", vocabulary_size=VOCAB)


@pytest.fixture(scope="module")
def causal_lm(gpt2):
    return GPT2CausalLM(gpt2)


# --------------------------------------------------------------------------- registry


def test_registry_lists_both_architectures():
    assert {"bert", "gpt2"} <= set(models.names())
    bert_arch, gpt2_arch = models.get("bert"), models.get("gpt2")
    assert isinstance(bert_arch, registry.Architecture)
    assert (bert_arch.family, bert_arch.tokenizer_kind, bert_arch.objectives) == (
        "encoder", "wordpiece", ("bert_mlm_nsp",))
    assert (bert_arch.backbone_cls, bert_arch.pretrainer("bert_mlm_nsp"),
            bert_arch.head("classification"), bert_arch.has_head("causal_lm")) == (
        BertBackbone, BertPretrainer, BertClassifier, False)
    assert (gpt2_arch.family, gpt2_arch.tokenizer_kind, gpt2_arch.objectives) == (
        "decoder", "bpe", ("causal_lm",))
    assert gpt2_arch.head("causal_lm") is GPT2CausalLM
    assert not gpt2_arch.has_head("classification")
    assert "Devlin" in bert_arch.paper and "Radford" in gpt2_arch.paper
    assert set(models.presets("bert")) == {"tiny", "mini", "small", "medium", "base", "large"}
    assert set(models.presets("gpt2")) == {"tiny", "124M", "355M", "774M", "1558M"}
    assert models.presets("bert")["base"]["vocabulary_size"] == 30522
    assert models.presets("gpt2")["124M"]["vocabulary_size"] == 50257
    with pytest.raises(dataclasses.FrozenInstanceError):
        bert_arch.name = "other"


def test_unknown_architecture_lists_known():
    with pytest.raises(ValueError, match=r"'bart'.*bert.*gpt2"):
        models.get("bart")


def test_build_rejects_unknown_preset_and_override():
    with pytest.raises(ValueError, match=r"'huge'.*base.*tiny"):
        models.build("bert", "huge")
    with pytest.raises(ValueError, match=r"num_experts.*allowed.*vocabulary_size"):
        models.build("gpt2", "tiny", num_experts=8)


def test_build_applies_overrides():
    backbone = models.build("bert", "tiny", vocabulary_size=VOCAB, num_layers=1,
                            max_sequence_length=64)
    assert (backbone.num_layers, backbone.vocabulary_size, backbone.max_sequence_length,
            backbone.hidden_dim) == (1, VOCAB, 64, 128)
    assert len(backbone.transformer_layers) == 1


# --------------------------------------------------------------------------- BERT


def test_bert_pooled_output_is_tanh_dense_of_cls(bert):
    # Shapes, dtypes and variable lengths: the conformance harness (check_forward).
    outputs = bert(_bert_inputs())
    # Pooled output is tanh(Dense(h_[CLS])).
    pooled = np.asarray(outputs["pooled_output"])
    assert np.all(np.abs(pooled) <= 1.0)
    cls = np.asarray(outputs["sequence_output"])[:, 0]
    expected = np.tanh(cls @ bert.pooler_dense.kernel.numpy() + bert.pooler_dense.bias.numpy())
    np.testing.assert_allclose(pooled, expected, atol=1e-5)


def test_bert_architecture_details(bert):
    block = bert.transformer_layers[0]
    assert block.normalize_first is False
    assert block.layer_norm_epsilon == 1e-12 and bert.embeddings_layer_norm.epsilon == 1e-12
    assert block.intermediate_dim == 4 * 128 and block.dropout == 0.1
    x = np.linspace(-3, 3, 7).astype("float32")
    exact = 0.5 * x * (1 + np.vectorize(__import__("math").erf)(x / np.sqrt(2)))
    np.testing.assert_allclose(np.asarray(block.activation(x)), exact, atol=1e-6)
    assert bert.token_embedding is bert.embeddings.token_embedding
    assert tuple(bert.embeddings.position_embedding.position_embeddings.shape) == (512, 128)
    assert tuple(bert.segment_embedding.embeddings.shape) == (2, 128)
    # TruncatedNormal(0.02): bounded by 2 stddev, std a bit below 0.02.
    kernel = block._feedforward_intermediate_dense.kernel.numpy()
    assert np.abs(kernel).max() <= 0.04 + 1e-6
    assert 0.015 < kernel.std() < 0.02


def test_bert_pretrainer_outputs_and_tied_weights(bert):
    pretrainer = BertPretrainer(bert)
    x, _, _ = _bert_pretraining_batch()
    outputs = pretrainer(x)
    assert set(outputs) == {"mlm", "nsp"}
    assert tuple(outputs["mlm"].shape) == (BATCH, PREDS, VOCAB)
    assert tuple(outputs["nsp"].shape) == (BATCH, 2)
    assert set(pretrainer.input) == {"token_ids", "padding_mask", "segment_ids", "mask_positions"}
    head = pretrainer.masked_lm_head
    assert head.token_embedding is bert.token_embedding
    # Tied: the head adds only dense + LayerNorm + output bias; the NSP head Dense(2).
    H = 128
    assert pretrainer.count_params() == (bert.count_params() + (H * H + H) + 2 * H + VOCAB
                                         + (2 * H + 2))
    # The logits are the head's transform projected on the token embedding, plus bias.
    seq = np.asarray(bert({k: x[k] for k in ("token_ids", "padding_mask", "segment_ids")})
                     ["sequence_output"])
    gathered = np.take_along_axis(seq, x["mask_positions"][..., None], axis=1)
    h = np.asarray(head._intermediate_layer_norm(head._intermediate_dense(gathered)))
    expected = h @ bert.token_embedding.embeddings.numpy().T + head._bias.numpy()
    np.testing.assert_allclose(np.asarray(outputs["mlm"]), expected, atol=1e-4)


def test_bert_pretrainer_loss_matches_numpy(bert):
    pretrainer = BertPretrainer(bert)
    x, y, sample_weight = _bert_pretraining_batch()
    y_pred = pretrainer(x)
    loss = float(pretrainer.compute_loss(x, y, y_pred, sample_weight, training=False))

    w = sample_weight["mlm"].astype(np.float64)
    mlm_nll = -np.take_along_axis(_log_softmax(np.asarray(y_pred["mlm"])),
                                  y["mlm"][..., None], axis=-1)[..., 0]
    mlm = (w * mlm_nll).sum() / (w.sum() + 1e-5)
    nsp = -_log_softmax(np.asarray(y_pred["nsp"]))[np.arange(BATCH), y["nsp"]].mean()
    assert loss == pytest.approx(mlm + nsp, rel=1e-5)
    assert float(pretrainer.mlm_loss_tracker.result()) == pytest.approx(mlm, rel=1e-5)
    assert float(pretrainer.nsp_loss_tracker.result()) == pytest.approx(nsp, rel=1e-5)
    mlm_correct = np.asarray(y_pred["mlm"]).argmax(-1) == y["mlm"]
    assert float(pretrainer.mlm_accuracy.result()) == pytest.approx(
        (w * mlm_correct).sum() / w.sum(), abs=1e-6)
    nsp_correct = np.asarray(y_pred["nsp"]).argmax(-1) == y["nsp"]
    assert float(pretrainer.nsp_accuracy.result()) == pytest.approx(nsp_correct.mean(), abs=1e-6)
    # Zero-weight predictions do not count: changing their labels leaves the loss alone.
    y2 = {"mlm": y["mlm"].copy(), "nsp": y["nsp"]}
    y2["mlm"][w == 0] = 5
    loss2 = float(pretrainer.compute_loss(x, y2, y_pred, sample_weight, training=False))
    assert loss2 == pytest.approx(loss, rel=1e-6)


def test_bert_pretrainer_fit_reduces_loss():
    keras.utils.set_random_seed(7)
    pretrainer = BertPretrainer(models.build("bert", "tiny", vocabulary_size=VOCAB))
    x, y, sample_weight = _bert_pretraining_batch()

    def loss_now():
        return float(pretrainer.compute_loss(x, y, pretrainer(x), sample_weight,
                                             training=False))

    before = loss_now()
    pretrainer.compile(optimizer=keras.optimizers.Adam(1e-3))
    dataset = tf.data.Dataset.from_tensors((x, y, sample_weight)).repeat(10)
    history = pretrainer.fit(dataset, epochs=1, verbose=0)
    assert {"loss", "mlm_loss", "nsp_loss", "mlm_accuracy", "nsp_accuracy"} <= set(
        history.history)
    after = loss_now()
    assert after < before - 0.5, (before, after)


def test_bert_classifier(bert):
    classifier = BertClassifier(bert, num_classes=3)
    logits = classifier(_bert_inputs())
    assert tuple(logits.shape) == (BATCH, 3) and logits.dtype == tf.float32
    assert set(classifier.input) == {"token_ids", "padding_mask", "segment_ids"}
    assert classifier.backbone is bert
    assert classifier.count_params() == bert.count_params() + 128 * 3 + 3
    config = classifier.get_config()
    assert config["num_classes"] == 3 and config["dropout"] == 0.1
    clone = BertClassifier.from_config(json.loads(json.dumps(config)))
    assert clone.get_config() == config
    assert isinstance(clone.backbone, BertBackbone) and clone.backbone is not bert


def test_bert_tasks_keras_save_load(bert, tmp_path):
    x, _, _ = _bert_pretraining_batch()
    restored = {}
    for model, inputs in ((BertPretrainer(bert), x),
                          (BertClassifier(bert, num_classes=2),
                           {k: x[k] for k in ("token_ids", "padding_mask", "segment_ids")})):
        path = tmp_path / f"{type(model).__name__}.keras"
        model.save(path)
        restored[type(model)] = keras.models.load_model(path)
        assert type(restored[type(model)]) is type(model)
        _assert_outputs_equal(model(inputs), restored[type(model)](inputs))
    # The MLM output projection is still tied to the restored token embedding.
    pretrainer = restored[BertPretrainer]
    assert pretrainer.masked_lm_head.token_embedding is pretrainer.backbone.token_embedding


# --------------------------------------------------------------------------- GPT-2


def test_gpt2_tied_logits_and_parameter_count(gpt2, causal_lm):
    # Shapes and dtypes: the conformance harness (check_forward, check_head causal_lm).
    inputs = _gpt2_inputs()
    outputs = gpt2(inputs)
    assert set(outputs) == {"sequence_output"}  # no pooler
    assert set(gpt2.input) == {"token_ids", "padding_mask"}  # no segments
    logits = causal_lm(inputs)
    # Output layer tied to the token embedding.
    expected = np.asarray(outputs["sequence_output"]) @ gpt2.token_embedding.embeddings.numpy().T
    np.testing.assert_allclose(np.asarray(logits), expected, atol=1e-4)
    assert causal_lm.count_params() == gpt2.count_params()


def test_gpt2_architecture_details(gpt2):
    block = gpt2.transformer_layers[0]
    assert block.normalize_first is True and block._cross_attention_layer is None
    x = np.linspace(-3, 3, 7).astype("float32")
    tanh_gelu = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
    np.testing.assert_allclose(np.asarray(block.activation(x)), tanh_gelu, atol=1e-6)
    assert gpt2.layer_norm.epsilon == 1e-5
    assert tuple(gpt2.embeddings.position_embedding.position_embeddings.shape) == (512, 128)


def test_gpt2_residual_projection_init():
    keras.utils.set_random_seed(3)
    backbone = models.build("gpt2", "tiny", vocabulary_size=VOCAB, num_layers=4,
                            hidden_dim=256, num_heads=4, intermediate_dim=1024)
    residual = backbone.residual_projection_kernels()
    assert len(residual) == 2 * 4
    expected = 0.02 / np.sqrt(2 * 4)
    for kernel in residual:
        values = kernel.numpy()
        assert abs(values.mean()) < 1e-3
        assert values.std() == pytest.approx(expected, rel=0.05), kernel.path
    assert not np.allclose(residual[0].numpy(), residual[2].numpy())
    # Everything else keeps N(0, 0.02).
    block = backbone.transformer_layers[0]
    for kernel in (block._self_attention_layer._query_dense.kernel,
                   block._feedforward_intermediate_dense.kernel,
                   backbone.token_embedding.embeddings):
        assert kernel.numpy().std() == pytest.approx(0.02, rel=0.05), kernel.path


def test_gpt2_causal_lm_config_round_trip(causal_lm):
    # The backbone's round trip: the conformance harness (check_config_round_trip).
    lm_config = causal_lm.get_config()
    lm_clone = GPT2CausalLM.from_config(json.loads(json.dumps(lm_config)))
    assert lm_clone.get_config() == lm_config


def test_gpt2_causal_lm_keras_save_load(causal_lm, tmp_path):
    path = tmp_path / "causal_lm.keras"
    causal_lm.save(path)
    restored = keras.models.load_model(path)
    assert isinstance(restored, GPT2CausalLM)
    _assert_outputs_equal(causal_lm(_gpt2_inputs()), restored(_gpt2_inputs()))


def test_gpt2_loss_matches_numpy_and_fit_reports_nll():
    keras.utils.set_random_seed(11)
    lm = GPT2CausalLM(models.build("gpt2", "tiny", vocabulary_size=VOCAB))
    rng = np.random.default_rng(5)
    ids = rng.integers(1, 50, (BATCH, SEQ + 1)).astype("int32")
    weights = np.ones((BATCH, SEQ), dtype="float32")
    weights[1, 8:] = 0.0  # padding
    x = {"token_ids": ids[:, :-1], "padding_mask": (weights > 0).astype("int32")}
    y = ids[:, 1:]
    y_pred = lm(x)
    loss = float(lm.compute_loss(x, y, y_pred, weights, training=False))
    nll = -np.take_along_axis(_log_softmax(np.asarray(y_pred)), y[..., None], axis=-1)[..., 0]
    expected = (weights * nll).sum() / weights.sum()
    assert loss == pytest.approx(expected, rel=1e-5)
    assert float(lm.nll_tracker.result()) == pytest.approx(expected, rel=1e-5)

    lm.compile(optimizer=keras.optimizers.Adam(3e-3))
    history = lm.fit(tf.data.Dataset.from_tensors((x, y, weights)).repeat(8), verbose=0)
    assert "nll" in history.history
    # That training lowers the loss: the conformance harness (check_pretraining_objective).


# --------------------------------------------------------------------------- generation


def _greedy_by_full_recompute(lm, prompt, max_length):
    ids = list(prompt)
    while len(ids) < max_length:
        x = {"token_ids": np.array([ids], "int32"), "padding_mask": np.ones((1, len(ids)), "int32")}
        ids.append(int(np.asarray(lm(x))[0, -1].argmax()))
    return ids


# The 1-token prompt's reference pass attends over a single key, which Keras warns about.
@pytest.mark.filterwarnings("ignore:You are using a softmax over axis")
def test_cached_greedy_generation_matches_full_recompute(causal_lm):
    prompts = np.array([[11, 12, 13, 0, 0, 0], [21, 22, 23, 24, 25, 26], [31, 0, 0, 0, 0, 0]],
                       dtype="int32")
    lengths = np.array([3, 6, 1])
    max_length = 14
    out = causal_lm.generate_ids(prompts, prompt_lengths=lengths, max_length=max_length)
    token_ids = np.asarray(out["token_ids"])
    assert token_ids.shape == (3, max_length) and token_ids.dtype == np.int32
    assert np.asarray(out["padding_mask"]).all()
    for row in range(3):
        expected = _greedy_by_full_recompute(causal_lm, prompts[row, :lengths[row]], max_length)
        assert token_ids[row].tolist() == expected, row
    # A padding mask works like prompt lengths.
    mask = np.arange(6)[None, :] < lengths[:, None]
    by_mask = causal_lm.generate_ids(prompts, padding_mask=mask, max_length=max_length)
    np.testing.assert_array_equal(np.asarray(by_mask["token_ids"]), token_ids)

    # Inside a tf.function with unknown batch size and prompt length (serving).
    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32),
                                  tf.TensorSpec([None], tf.int32)])
    def serve(ids, prompt_lengths):
        return causal_lm.generate_ids(ids, prompt_lengths=prompt_lengths, max_length=max_length)

    traced = serve(tf.constant(prompts), tf.constant(lengths, tf.int32))
    np.testing.assert_array_equal(np.asarray(traced["token_ids"]), token_ids)


def test_generation_stops_at_end_token(causal_lm):
    prompts = np.array([[11, 12, 13, 0], [21, 22, 23, 24]], dtype="int32")
    lengths = np.array([3, 4])
    free = np.asarray(causal_lm.generate_ids(prompts, prompt_lengths=lengths,
                                             max_length=12)["token_ids"])
    end = int(free[0, 4])  # row 0's second generated token becomes the end token
    first_end = {row: next((i for i in range(lengths[row], 12) if free[row, i] == end), None)
                 for row in range(2)}
    out = causal_lm.generate_ids(prompts, prompt_lengths=lengths, max_length=12,
                                 end_token_id=end, pad_token_id=0)
    ids, mask = np.asarray(out["token_ids"]), np.asarray(out["padding_mask"])
    for row in range(2):
        stop = first_end[row]
        if stop is None:
            assert mask[row].all()
            np.testing.assert_array_equal(ids[row], free[row])
        else:
            assert mask[row, :stop + 1].all() and not mask[row, stop + 1:].any()
            np.testing.assert_array_equal(ids[row, :stop + 1], free[row, :stop + 1])
            assert (ids[row, stop + 1:] == 0).all()
    assert first_end[0] is not None and first_end[0] <= 4


@pytest.mark.parametrize("sampler,kwargs", [
    ("top_k", {"k": 5, "seed": 1, "temperature": 0.7}),
    ("top_p", {"p": 0.9, "seed": 1}),
    ("random", {"seed": 1, "temperature": 2.0}),
    ("beam", {"num_beams": 3}),
])
def test_other_samplers(causal_lm, sampler, kwargs):
    prompts = np.array([[11, 12, 13, 0], [21, 22, 23, 24]], dtype="int32")
    out = causal_lm.generate_ids(prompts, prompt_lengths=[3, 4], max_length=10,
                                 sampler=sampler, **kwargs)
    ids = np.asarray(out["token_ids"])
    assert ids.shape == (2, 10)
    np.testing.assert_array_equal(ids[0, :3], prompts[0, :3])
    np.testing.assert_array_equal(ids[1, :4], prompts[1])
    assert ((ids >= 0) & (ids < VOCAB)).all()


def test_generation_exports_in_saved_model(tmp_path):
    """generate_ids traced in a tf.function and saved as a SavedModel signature, with a
    random sampler whose seed variable must be tracked (what the serving export does)."""
    keras.utils.set_random_seed(5)
    lm = GPT2CausalLM(models.build("gpt2", "tiny", vocabulary_size=VOCAB, num_layers=1))
    num_weights = len(lm.weights)
    module = tf.Module()
    module.lm = lm

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32),
                                  tf.TensorSpec([None], tf.int64)])
    def generate(ids, lengths):
        return lm.generate_ids(ids, prompt_lengths=lengths, max_length=8, sampler="top_k",
                               k=3, temperature=0.8, end_token_id=2)

    tf.saved_model.save(module, str(tmp_path / "sm"),
                        signatures={"serving_default": generate.get_concrete_function()})
    assert len(lm.weights) == num_weights  # the sampler's seed is not a model weight
    served = tf.saved_model.load(str(tmp_path / "sm")).signatures["serving_default"](
        ids=tf.constant([[11, 12, 0], [21, 22, 23]]), lengths=tf.constant([2, 3], tf.int64))
    ids = served["token_ids"].numpy()
    assert ids.shape == (2, 8)
    np.testing.assert_array_equal(ids[:, :2], [[11, 12], [21, 22]])
    # The model still saves as .keras after a sampler was attached.
    lm.save(tmp_path / "lm.keras")
    restored = keras.models.load_model(tmp_path / "lm.keras")
    _assert_outputs_equal(lm(_gpt2_inputs()), restored(_gpt2_inputs()))


def test_generation_rejects_too_long(causal_lm):
    with pytest.raises(ValueError, match="max_sequence_length"):
        causal_lm.generate_ids(np.ones((1, 3), "int32"), max_length=10_000)


# --------------------------------------------------------------------------- checkpoints


@pytest.mark.parametrize("name", ["bert", "gpt2"])
def test_checkpoint_folder_and_wrong_architecture(name, bert, gpt2, tmp_path):
    # The restored outputs and config: the conformance harness (check_checkpoint_round_trip).
    backbone = {"bert": bert, "gpt2": gpt2}[name]
    models.save_checkpoint(backbone, tmp_path / "ckpt", preset="tiny")
    config = json.loads((tmp_path / "ckpt" / "config.json").read_text())
    assert config["architecture"] == name and config["preset"] == "tiny"
    assert (tmp_path / "ckpt" / "model.weights.h5").exists()
    other = "gpt2" if name == "bert" else "bert"
    with pytest.raises(ValueError, match=name):
        models.load_checkpoint(other, tmp_path / "ckpt")


def test_load_checkpoint_rejects_formats_without_a_converter(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(
        {"model_type": "bert", "hidden_size": 312, "num_hidden_layers": 4}))
    assert models.checkpoint_format(tmp_path) == "huggingface"
    # TinyBERT's published students are plain BERT checkpoints: load them as "bert".
    with pytest.raises(ValueError, match="'tinybert' has no converter for 'huggingface'"):
        models.load_checkpoint("tinybert", tmp_path)
    with pytest.raises(FileNotFoundError, match="missing"):
        models.load_checkpoint("bert", tmp_path / "missing")
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ValueError, match="not a checkpoint folder"):
        models.load_checkpoint("bert", tmp_path)


# --------------------------------------------------------------------------- sizes


@pytest.fixture
def zero_init(monkeypatch):
    """Parameter counts do not depend on initial values; drawing ~1B random numbers on a
    2-core machine takes most of a minute, so the size tests fill weights with zeros."""
    def zeros(self, shape, dtype=None):
        return keras.ops.zeros(shape, dtype=dtype)

    monkeypatch.setattr(keras.initializers.TruncatedNormal, "__call__", zeros)
    monkeypatch.setattr(keras.initializers.RandomNormal, "__call__", zeros)


def test_param_count_formulas_match_tiny_models(bert, gpt2):
    assert bert.count_params() == _bert_param_formula(VOCAB, 2, 128, 512)
    assert gpt2.count_params() == _gpt2_param_formula(VOCAB, 2, 128, 512, T=512)


def _count(name, preset):
    backbone = models.build(name, preset)
    count = backbone.count_params()
    del backbone
    gc.collect()
    return count


def test_bert_parameter_counts(zero_init):
    base, large = _count("bert", "base"), _count("bert", "large")
    assert base == _bert_param_formula(30522, 12, 768, 3072)
    assert 108e6 <= base <= 111e6
    assert large == _bert_param_formula(30522, 24, 1024, 4096)
    assert 335e6 <= large <= 340e6


def test_gpt2_parameter_counts(zero_init):
    small, medium = _count("gpt2", "124M"), _count("gpt2", "355M")
    assert small == _gpt2_param_formula(50257, 12, 768, 3072)
    assert 123e6 <= small <= 125e6
    assert medium == _gpt2_param_formula(50257, 24, 1024, 4096)
    assert 353e6 <= medium <= 356e6
    # The two largest by formula only (building them needs ~3 and ~6 GB).
    presets = models.presets("gpt2")
    for preset, low, high in (("774M", 772e6, 776e6), ("1558M", 1555e6, 1560e6)):
        c = presets[preset]
        count = _gpt2_param_formula(c["vocabulary_size"], c["num_layers"], c["hidden_dim"],
                                    c["intermediate_dim"], c["max_sequence_length"])
        assert low <= count <= high, (preset, count)
