"""Tests of lmfactory.models.roberta: RoBERTa backbone, MLM pretrainer, classifier, converter."""

import gc
import json
import math
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

import parity
from lmfactory import models
from lmfactory.models import registry
from lmfactory.models.roberta import (RobertaBackbone, RobertaClassifier,
                                      RobertaPositionEmbedding, RobertaPretrainer,
                                      from_huggingface, pretrainer_from_huggingface)

VOCAB = 1000  # tiny vocabulary keeps the tiny preset fast
BATCH, SEQ, PREDS = 3, 12, 4
H = 128  # the tiny preset's hidden size
MASK_ID = 4


# --------------------------------------------------------------------------- helpers


def _log_softmax(z):
    z = z.astype(np.float64)
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def _inputs(seed=0, lengths=(12, 7, 9)):
    rng = np.random.default_rng(seed)
    token_ids = rng.integers(5, VOCAB, (BATCH, SEQ)).astype("int32")
    padding_mask = (np.arange(SEQ)[None, :] < np.array(lengths)[:, None]).astype("int32")
    token_ids = np.where(padding_mask == 1, token_ids, 1).astype("int32")  # <pad> = 1
    return {"token_ids": token_ids, "padding_mask": padding_mask}


def _mlm_batch(seed=0):
    """A batch in the `mlm` objective's format (CONTRACTS §3): x with all-zero segment_ids,
    masked positions holding the mask token, y = the original ids, weights 0 on padding
    predictions."""
    rng = np.random.default_rng(seed)
    x = _inputs(seed)
    positions = np.stack([rng.choice(np.arange(1, 7), PREDS, replace=False)
                          for _ in range(BATCH)]).astype("int32")
    labels = np.take_along_axis(x["token_ids"], positions, axis=1).astype("int64")
    np.put_along_axis(x["token_ids"], positions, MASK_ID, axis=1)
    x["segment_ids"] = np.zeros_like(x["token_ids"])
    x["mask_positions"] = positions
    weights = np.array([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]], dtype="float32")
    return x, {"mlm": labels}, {"mlm": weights}


def _assert_outputs_equal(a, b, atol=0.0):
    if isinstance(a, dict):
        assert set(a) == set(b)
        for key in a:
            _assert_outputs_equal(a[key], b[key], atol)
    else:
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0, atol=atol)


def _roberta_param_formula(V, L, H, I, T=512):
    """Token embedding, T + 2 position rows, embedding LayerNorm, L post-LN blocks."""
    block = 4 * (H * H + H) + (H * I + I) + (I * H + H) + 2 * 2 * H
    return V * H + (T + 2) * H + 2 * H + L * block


@pytest.fixture(scope="module", autouse=True)
def _seed():
    keras.utils.set_random_seed(1234)


@pytest.fixture(scope="module")
def roberta():
    return models.build("roberta", "tiny", vocabulary_size=VOCAB)


# --------------------------------------------------------------------------- registry


def test_registry_record():
    arch = models.get("roberta")
    assert isinstance(arch, registry.Architecture)
    assert (arch.family, arch.tokenizer_kind, arch.objectives, arch.segment_layout) == (
        "encoder", "bpe", ("mlm",), "roberta")
    assert (arch.backbone_cls, arch.pretrainer("mlm"), arch.head("classification"),
            arch.has_head("causal_lm")) == (RobertaBackbone, RobertaPretrainer,
                                            RobertaClassifier, False)
    assert arch.special_tokens == {"cls": "<s>", "pad": "<pad>", "sep": "</s>", "unk": "<unk>",
                                   "mask": "<mask>"}
    assert arch.converter("huggingface") is from_huggingface
    assert registry.find_by_hf_model_type("roberta") == [arch]
    assert "Liu" in arch.paper and "RoBERTa" in arch.paper
    with pytest.raises(ValueError, match=r"does not train objective 'bert_mlm_nsp'.*mlm"):
        arch.pretrainer("bert_mlm_nsp")
    presets = models.presets("roberta")
    assert set(presets) == {"tiny", "base", "large"}
    assert {p["vocabulary_size"] for p in presets.values()} == {50265}
    assert [presets[p]["num_layers"] for p in ("tiny", "base", "large")] == [2, 12, 24]
    assert presets["base"]["hidden_dim"] == 768 and presets["large"]["num_heads"] == 16
    assert registry.find_by_backbone(RobertaBackbone) is arch


def test_bad_arguments_fail_clearly():
    with pytest.raises(ValueError, match="divisible"):
        models.build("roberta", "tiny", vocabulary_size=VOCAB, num_heads=3)
    with pytest.raises(ValueError, match="num_classes"):
        RobertaClassifier(models.build("roberta", "tiny", vocabulary_size=VOCAB, num_layers=1),
                          num_classes=0)


# --------------------------------------------------------------------------- backbone


def test_inputs_and_no_pooler(roberta):
    # Shapes, dtypes and variable lengths: the conformance harness (check_forward).
    outputs = roberta(_inputs())
    assert set(outputs) == {"sequence_output"}  # no NSP pooler (§4.2)
    assert set(roberta.input) == {"token_ids", "padding_mask"}


def test_extra_inputs_are_ignored(roberta):
    """The `mlm` records and the sentence-pair packer carry segment_ids; Keras would
    otherwise match the dict to the inputs by sorted position and feed them as token ids."""
    inputs = _inputs()
    extra = dict(inputs, segment_ids=np.ones_like(inputs["token_ids"]))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        a, b = roberta(inputs), roberta(extra)
    _assert_outputs_equal(a, b)
    assert not [w for w in caught if "structure of `inputs`" in str(w.message)]
    with pytest.raises(ValueError, match="padding_mask"):
        roberta({"token_ids": inputs["token_ids"]})
    with pytest.raises(ValueError, match=r"missing \['padding_mask'\]"):
        roberta.call_with_states({"token_ids": inputs["token_ids"]})


def test_architecture_details(roberta):
    block = roberta.transformer_layers[0]
    assert block.normalize_first is False  # post-LN, as BERT
    assert block.layer_norm_epsilon == 1e-5 and roberta.embeddings_layer_norm.epsilon == 1e-5
    assert block.intermediate_dim == 4 * H and block.dropout == 0.1
    x = np.linspace(-3, 3, 7).astype("float32")
    exact = 0.5 * x * (1 + np.vectorize(math.erf)(x / np.sqrt(2)))
    np.testing.assert_allclose(np.asarray(block.activation(x)), exact, atol=1e-6)
    # 512 positions + the padding row + the row below it.
    assert tuple(roberta.position_embedding.position_embeddings.shape) == (514, H)
    assert roberta.token_embedding.embeddings.shape == (VOCAB, H)
    assert not any("segment" in w.path or "pooler" in w.path for w in roberta.weights)
    # TruncatedNormal(0.02): bounded by 2 stddev, std a bit below 0.02.
    for kernel in (block._feedforward_intermediate_dense.kernel,
                   roberta.token_embedding.embeddings,
                   roberta.position_embedding.position_embeddings):
        values = kernel.numpy()
        assert np.abs(values).max() <= 0.04 + 1e-6, kernel.path
        assert 0.015 < values.std() < 0.02, kernel.path


def test_position_ids_count_real_tokens():
    layer = RobertaPositionEmbedding(sequence_length=8, embedding_dim=4)
    mask = np.array([[1, 1, 1, 0, 0], [0, 0, 1, 1, 1], [1, 1, 1, 1, 1]], dtype="int32")
    ids = np.asarray(layer.position_ids(mask))
    np.testing.assert_array_equal(ids, [[2, 3, 4, 1, 1], [1, 1, 2, 3, 4], [2, 3, 4, 5, 6]])
    out = np.asarray(layer(mask))
    table = layer.position_embeddings.numpy()
    assert table.shape == (10, 4)
    np.testing.assert_allclose(out, table[ids])
    clone = RobertaPositionEmbedding.from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()
    with pytest.raises(ValueError, match="longer than the 8 positions"):
        layer(np.ones((1, 9), dtype="int32"))


def test_padding_invariance(roberta):
    """A padded row gives the same outputs on its real tokens as the unpadded sequence,
    padded on the right or on the left (position ids count real tokens only)."""
    inputs = _inputs()
    lengths = inputs["padding_mask"].sum(axis=1)
    right = np.asarray(roberta(inputs)["sequence_output"])
    for row, n in enumerate(lengths):
        alone = {"token_ids": inputs["token_ids"][row:row + 1, :n],
                 "padding_mask": np.ones((1, n), dtype="int32")}
        unpadded = np.asarray(roberta(alone)["sequence_output"])[0]
        np.testing.assert_allclose(right[row, :n], unpadded, atol=1e-5)
        # The same tokens padded on the left, with other ids on the padding.
        left = {"token_ids": np.full((1, SEQ), 7, dtype="int32"),
                "padding_mask": np.zeros((1, SEQ), dtype="int32")}
        left["token_ids"][0, SEQ - n:] = alone["token_ids"][0]
        left["padding_mask"][0, SEQ - n:] = 1
        shifted = np.asarray(roberta(left)["sequence_output"])[0, SEQ - n:]
        np.testing.assert_allclose(shifted, unpadded, atol=1e-5)
    # Sanity: the output does depend on the position (same tokens, other positions).
    repeated = {"token_ids": np.full((1, 4), 9, dtype="int32"),
                "padding_mask": np.ones((1, 4), dtype="int32")}
    out = np.asarray(roberta(repeated)["sequence_output"])[0]
    assert not np.allclose(out[0], out[1], atol=1e-4)


def test_call_with_states(roberta):
    inputs = _inputs()
    states = roberta.call_with_states(inputs)
    assert set(states) == {"sequence_output", "hidden_states", "attention_scores"}
    np.testing.assert_allclose(np.asarray(states["sequence_output"]),
                               np.asarray(roberta(inputs)["sequence_output"]), atol=1e-5)
    assert len(states["hidden_states"]) == roberta.num_layers + 1
    assert all(tuple(h.shape) == (BATCH, SEQ, H) for h in states["hidden_states"])
    np.testing.assert_array_equal(np.asarray(states["hidden_states"][-1]),
                                  np.asarray(states["sequence_output"]))
    # The embedding output is LayerNorm(token + position embeddings).
    emb = (roberta.token_embedding.embeddings.numpy()[inputs["token_ids"]]
           + roberta.position_embedding.position_embeddings.numpy()[
               np.asarray(roberta.position_embedding.position_ids(inputs["padding_mask"]))])
    mean, var = emb.mean(-1, keepdims=True), emb.var(-1, keepdims=True)
    ln = roberta.embeddings_layer_norm
    expected = (emb - mean) / np.sqrt(var + 1e-5) * ln.gamma.numpy() + ln.beta.numpy()
    np.testing.assert_allclose(np.asarray(states["hidden_states"][0]), expected, atol=1e-5)
    assert len(states["attention_scores"]) == roberta.num_layers
    real = inputs["padding_mask"].astype(bool)
    for scores in states["attention_scores"]:
        scores = np.asarray(scores)
        assert scores.shape == (BATCH, roberta.num_heads, SEQ, SEQ)
        np.testing.assert_allclose(scores.sum(-1), 1.0, atol=1e-5)
        # No attention on padding keys.
        assert np.abs(scores * ~real[:, None, None, :]).max() < 1e-6
    # Extra entries are ignored here too.
    again = roberta.call_with_states(dict(inputs, segment_ids=np.ones_like(real, "int32")))
    np.testing.assert_allclose(np.asarray(again["sequence_output"]),
                               np.asarray(states["sequence_output"]), atol=1e-6)


def test_config_epsilon_and_no_segments(roberta):
    # The config, checkpoint folder and .keras round trips: the conformance harness
    # (check_config_round_trip, check_checkpoint_round_trip).
    config = roberta.get_config()
    assert config["layer_norm_epsilon"] == 1e-5 and "num_segments" not in config


# --------------------------------------------------------------------------- pretrainer


def test_pretrainer_outputs_and_tied_weights(roberta):
    pretrainer = RobertaPretrainer(roberta)
    x, _, _ = _mlm_batch()
    outputs = pretrainer(x)  # x carries the mlm records' segment_ids
    assert set(outputs) == {"mlm"}
    assert tuple(outputs["mlm"].shape) == (BATCH, PREDS, VOCAB)
    assert set(pretrainer.input) == {"token_ids", "padding_mask", "mask_positions"}
    head = pretrainer.masked_lm_head
    assert head.token_embedding is roberta.token_embedding
    assert head.layer_norm_epsilon == 1e-5
    # Tied: the head adds only dense + LayerNorm + output bias.
    assert pretrainer.count_params() == roberta.count_params() + (H * H + H) + 2 * H + VOCAB
    seq = np.asarray(roberta(x)["sequence_output"])
    gathered = np.take_along_axis(seq, x["mask_positions"][..., None], axis=1)
    h = np.asarray(head._intermediate_layer_norm(head._intermediate_dense(gathered)))
    expected = h @ roberta.token_embedding.embeddings.numpy().T + head._bias.numpy()
    np.testing.assert_allclose(np.asarray(outputs["mlm"]), expected, atol=1e-4)
    without_segments = {k: v for k, v in x.items() if k != "segment_ids"}
    _assert_outputs_equal(outputs, pretrainer(without_segments))


def test_pretrainer_loss_matches_numpy(roberta):
    pretrainer = RobertaPretrainer(roberta)
    x, y, sample_weight = _mlm_batch()
    y_pred = pretrainer(x)
    loss = float(pretrainer.compute_loss(x, y, y_pred, sample_weight, training=False))
    w = sample_weight["mlm"].astype(np.float64)
    nll = -np.take_along_axis(_log_softmax(np.asarray(y_pred["mlm"])),
                              y["mlm"][..., None], axis=-1)[..., 0]
    expected = (w * nll).sum() / (w.sum() + 1e-5)
    assert loss == pytest.approx(expected, rel=1e-5)
    assert float(pretrainer.mlm_loss_tracker.result()) == pytest.approx(expected, rel=1e-5)
    correct = np.asarray(y_pred["mlm"]).argmax(-1) == y["mlm"]
    assert float(pretrainer.mlm_accuracy.result()) == pytest.approx(
        (w * correct).sum() / w.sum(), abs=1e-6)
    # Zero-weight predictions do not count.
    y2 = {"mlm": y["mlm"].copy()}
    y2["mlm"][w == 0] = 5
    assert float(pretrainer.compute_loss(x, y2, y_pred, sample_weight, training=False)) == (
        pytest.approx(loss, rel=1e-6))


def test_pretrainer_fit_reduces_loss():
    keras.utils.set_random_seed(7)
    pretrainer = RobertaPretrainer(models.build("roberta", "tiny", vocabulary_size=VOCAB))
    x, y, sample_weight = _mlm_batch()

    def loss_now():
        return float(pretrainer.compute_loss(x, y, pretrainer(x), sample_weight,
                                             training=False))

    before = loss_now()
    pretrainer.compile(optimizer=keras.optimizers.Adam(1e-3))
    dataset = tf.data.Dataset.from_tensors((x, y, sample_weight)).repeat(10)
    history = pretrainer.fit(dataset, epochs=1, verbose=0)
    assert {"loss", "mlm_loss", "mlm_accuracy"} <= set(history.history)
    after = loss_now()
    assert after < before - 0.5, (before, after)


# --------------------------------------------------------------------------- classifier


def test_classifier(roberta):
    classifier = RobertaClassifier(roberta, num_classes=3)
    inputs = _inputs()
    logits = classifier(dict(inputs, segment_ids=np.zeros_like(inputs["token_ids"])))
    # Logits shape: the conformance harness (check_head classification).
    assert set(classifier.input) == {"token_ids", "padding_mask"}
    assert classifier.backbone is roberta
    assert classifier.count_params() == roberta.count_params() + (H * H + H) + (H * 3 + 3)
    # dense(tanh) then dense(K) on the first token <s> (dropout is off at inference).
    first = np.asarray(roberta(inputs)["sequence_output"])[:, 0]
    pooled = np.tanh(first @ classifier.pooler_dense.kernel.numpy()
                     + classifier.pooler_dense.bias.numpy())
    expected = pooled @ classifier.output_dense.kernel.numpy() + classifier.output_dense.bias.numpy()
    np.testing.assert_allclose(np.asarray(logits), expected, atol=1e-5)
    config = classifier.get_config()
    assert config["num_classes"] == 3 and config["dropout"] == 0.1
    clone = RobertaClassifier.from_config(json.loads(json.dumps(config)))
    assert clone.get_config() == config
    assert isinstance(clone.backbone, RobertaBackbone) and clone.backbone is not roberta


def test_tasks_keras_save_load(roberta, tmp_path):
    x, _, _ = _mlm_batch()
    restored = {}
    for model, inputs in ((RobertaPretrainer(roberta), x),
                          (RobertaClassifier(roberta, num_classes=2), _inputs())):
        path = tmp_path / f"{type(model).__name__}.keras"
        model.save(path)
        restored[type(model)] = keras.models.load_model(path)
        assert type(restored[type(model)]) is type(model)
        _assert_outputs_equal(model(inputs), restored[type(model)](inputs))
    pretrainer = restored[RobertaPretrainer]
    assert pretrainer.masked_lm_head.token_embedding is pretrainer.backbone.token_embedding
    assert isinstance(pretrainer.backbone.position_embedding, RobertaPositionEmbedding)


# --------------------------------------------------------------------------- Hugging Face


def test_huggingface_parity():
    inputs, expected, folder = parity.load_fixture("roberta")
    assert models.checkpoint_format(folder) == "huggingface"
    backbone = models.load_checkpoint("roberta", folder)
    assert isinstance(backbone, RobertaBackbone)
    assert backbone.max_sequence_length == 64  # 66 rows = 64 + padding row + row 0
    assert backbone.layer_norm_epsilon == 1e-12  # read from the fixture's config
    x = {"token_ids": inputs["input_ids"], "padding_mask": inputs["attention_mask"]}
    mask = inputs["attention_mask"]
    assert (inputs["input_ids"][mask == 0] == 1).all()  # padded with <pad> = 1
    out = backbone(x)
    errors = {"last_hidden_state": parity.assert_close_on_tokens(
        out["sequence_output"], expected["last_hidden_state"], mask)}
    states = backbone.call_with_states(x)
    for i, hidden in enumerate(states["hidden_states"]):
        errors[f"hidden_states[{i}]"] = parity.assert_close_on_tokens(
            hidden, expected["hidden_states"][i], mask)

    pretrainer = pretrainer_from_huggingface(str(folder))
    seq_len = x["token_ids"].shape[1]
    positions = np.tile(np.arange(seq_len, dtype="int32"), (len(mask), 1))
    logits = pretrainer(dict(x, mask_positions=positions))["mlm"]
    errors["head_logits"] = parity.assert_close_on_tokens(logits, expected["head_logits"], mask)
    print("RoBERTa parity max abs errors:", errors)


def _write_hf_folder(folder, weights, config):
    from safetensors.numpy import save_file

    folder.mkdir()
    save_file({k: np.ascontiguousarray(v) for k, v in weights.items()},
              str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(config))
    return str(folder)


def test_huggingface_converter_variants_and_errors(tmp_path):
    from lmfactory.models import hf_utils

    inputs, expected, folder = parity.load_fixture("roberta")
    weights = hf_utils.read_weights(str(folder))
    config = hf_utils.read_config(str(folder))
    x = {"token_ids": inputs["input_ids"], "padding_mask": inputs["attention_mask"]}

    # A bare RobertaModel: names without the "roberta." prefix, plus a pooler (skipped).
    bare = {k[len("roberta."):]: v for k, v in weights.items() if k.startswith("roberta.")}
    bare["pooler.dense.weight"] = np.zeros((32, 32), "float32")
    bare["pooler.dense.bias"] = np.zeros((32,), "float32")
    backbone = from_huggingface(_write_hf_folder(tmp_path / "bare", bare, config))
    parity.assert_close_on_tokens(backbone(x)["sequence_output"],
                                  expected["last_hidden_state"], inputs["attention_mask"])
    # A bare model has no masked-LM head to load.
    with pytest.raises(KeyError, match="lm_head.dense.weight"):
        pretrainer_from_huggingface(str(tmp_path / "bare"))

    # A backbone weight the converter does not know is an error, not silently dropped.
    extra = dict(weights)
    extra["roberta.encoder.layer.0.attention.self.rotary.weight"] = np.zeros((2,), "float32")
    with pytest.raises(ValueError, match="did not read.*rotary"):
        from_huggingface(_write_hf_folder(tmp_path / "extra", extra, config))

    # An untied decoder matrix cannot be represented.
    untied = dict(weights)
    untied["lm_head.decoder.weight"] = weights["roberta.embeddings.word_embeddings.weight"] + 1
    with pytest.raises(ValueError, match="decoder.weight differs"):
        pretrainer_from_huggingface(_write_hf_folder(tmp_path / "untied", untied, config))

    for field, value, message in (("model_type", "bert", "Not a RoBERTa checkpoint"),
                                  ("type_vocab_size", 2, "type_vocab_size"),
                                  ("position_embedding_type", "relative_key",
                                   "position_embedding_type")):
        bad = dict(config, **{field: value})
        with pytest.raises(ValueError, match=message):
            from_huggingface(_write_hf_folder(tmp_path / f"bad_{field}", weights, bad))


# --------------------------------------------------------------------------- sizes


@pytest.fixture
def zero_init(monkeypatch):
    """Parameter counts do not depend on initial values; zeros are much faster to draw."""
    def zeros(self, shape, dtype=None):
        return keras.ops.zeros(shape, dtype=dtype)

    monkeypatch.setattr(keras.initializers.TruncatedNormal, "__call__", zeros)


def test_param_count_formula_matches_tiny_model(roberta):
    assert roberta.count_params() == _roberta_param_formula(VOCAB, 2, 128, 512)


def test_parameter_counts(zero_init):
    counts = {}
    for preset in ("base", "large"):
        backbone = models.build("roberta", preset)
        counts[preset] = backbone.count_params()
        del backbone
        gc.collect()
    assert counts["base"] == _roberta_param_formula(50265, 12, 768, 3072) == 124_054_272
    assert counts["large"] == _roberta_param_formula(50265, 24, 1024, 4096) == 354_309_120
    # Hugging Face's RobertaModel counts 124,645,632 / 355,359,744: the same network plus
    # the NSP-style pooler (H*H + H) and the single token-type row (H) that our converter
    # folds into the position table.
    assert counts["base"] + (768 * 768 + 768) + 768 == 124_645_632
    assert counts["large"] + (1024 * 1024 + 1024) + 1024 == 355_359_744
