"""Tests of ELECTRA (lmfactory.models.electra): discriminator backbone, generator sharing,
replaced-token-detection pretraining, classifier, Hugging Face parity, presets."""

import json
import shutil
import sys
import textwrap
from pathlib import Path

import keras
import keras_nlp
import numpy as np
import pytest
import tensorflow as tf

import forked_tasks
import lmfactory.models.electra  # noqa: F401  registers "electra"
import parity
from lmfactory import models
from lmfactory.models import registry
from lmfactory.models.electra import (
    ElectraBackbone,
    ElectraClassifier,
    ElectraGenerator,
    ElectraPretrainer,
    from_huggingface,
    pretrainer_from_huggingface,
)

VOCAB = 60
BATCH, SEQ, PREDS = 3, 12, 4
TINY = dict(vocabulary_size=VOCAB, num_layers=2, hidden_dim=32, num_heads=4,
            intermediate_dim=64, embedding_dim=16, max_sequence_length=SEQ)


def _backbone(**overrides):
    return models.build("electra", "tiny", **{**TINY, **overrides})


def _inputs(seed=0, lengths=(12, 7, 9)):
    rng = np.random.default_rng(seed)
    padding_mask = (np.arange(SEQ)[None, :] < np.array(lengths)[:, None]).astype("int32")
    token_ids = rng.integers(5, VOCAB, (BATCH, SEQ)).astype("int32") * padding_mask
    segment_ids = (np.arange(SEQ)[None, :] >= 4).astype("int32") * padding_mask
    return {"token_ids": token_ids, "padding_mask": padding_mask, "segment_ids": segment_ids}


def _batch(seed=0):
    """A masked batch as the `mlm` objective makes it: masked token_ids, mask_positions
    (padding predictions at position 0 with weight 0), original ids as targets."""
    rng = np.random.default_rng(seed)
    x = _inputs(seed)
    weights = np.array([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]], dtype="float32")
    positions = np.stack([rng.choice(np.arange(1, 7), PREDS, replace=False)
                          for _ in range(BATCH)]).astype("int32")
    positions = positions * (weights > 0)
    original = x["token_ids"].copy()
    x["token_ids"] = x["token_ids"].copy()
    for row in range(BATCH):
        for col in range(PREDS):
            if weights[row, col]:
                x["token_ids"][row, positions[row, col]] = 4  # [MASK]
    x["mask_positions"] = positions
    labels = np.take_along_axis(original, positions, axis=1) * (weights > 0)
    return x, {"mlm": labels.astype("int32")}, {"mlm": weights}, original


def _num_params(variables):
    return sum(int(np.prod(v.shape)) for v in variables)


# --------------------------------------------------------------------------- registry


def test_registry_entry():
    arch = models.get("electra")
    assert arch.family == "encoder"
    assert arch.backbone_cls is ElectraBackbone
    assert arch.pretrainer("mlm") is ElectraPretrainer
    assert arch.head("classification") is ElectraClassifier
    assert arch.tokenizer_kind == "wordpiece" and arch.segment_layout == "bert"
    assert arch.special_tokens == {"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]",
                                   "sep": "[SEP]", "mask": "[MASK]"}
    assert arch.converter("huggingface") is from_huggingface
    assert arch in registry.find_by_hf_model_type("electra")
    assert set(arch.presets) == {"tiny", "small", "base", "large"}
    assert "embedding_dim" in models.backbone_arguments("electra")
    with pytest.raises(ValueError, match="does not train objective"):
        arch.pretrainer("bert_mlm_nsp")


# --------------------------------------------------------------------------- backbone


def test_backbone_states_and_embedding_projection():
    # Output shapes: the conformance harness (check_forward).
    backbone = _backbone(dropout=0.0)
    x = _inputs()
    outputs = backbone(x)
    assert set(outputs) == {"sequence_output"}  # no pooler
    assert backbone.embeddings_projection is not None  # E=16 != H=32
    assert tuple(backbone.embed(x).shape) == (BATCH, SEQ, 16)
    assert isinstance(backbone.token_embedding, keras_nlp.layers.ReversibleEmbedding)

    states = backbone.call_with_states(x)
    assert len(states["hidden_states"]) == 3 and len(states["attention_scores"]) == 2
    for hidden in states["hidden_states"]:
        assert tuple(hidden.shape) == (BATCH, SEQ, 32)
    np.testing.assert_allclose(states["sequence_output"], outputs["sequence_output"],
                               atol=1e-6)
    np.testing.assert_allclose(states["hidden_states"][-1], outputs["sequence_output"],
                               atol=1e-6)
    for scores in states["attention_scores"]:
        scores = np.asarray(scores)
        assert scores.shape == (BATCH, 4, SEQ, SEQ)
        np.testing.assert_allclose(scores.sum(-1), 1.0, atol=1e-5)
        # No attention to padding keys (row 1 has 7 real tokens).
        assert np.abs(scores[1, :, :, 7:]).max() < 1e-6

    # E == H: no projection, embeddings feed the blocks directly.
    square = _backbone(embedding_dim=None)
    assert square.embeddings_projection is None and square.embedding_dim == 32
    with pytest.raises(ValueError, match="lack"):
        backbone.call_with_states({"token_ids": x["token_ids"]})
    with pytest.raises(ValueError, match="divisible"):
        _backbone(num_heads=5)


# --------------------------------------------------------------------------- parity


def test_huggingface_parity():
    inputs, expected, folder = parity.load_fixture("electra")
    x = {"token_ids": inputs["input_ids"], "padding_mask": inputs["attention_mask"],
         "segment_ids": inputs["token_type_ids"]}
    mask = inputs["attention_mask"]

    backbone = models.load_checkpoint("electra", folder)  # through the registry converter
    assert isinstance(backbone, ElectraBackbone)
    assert backbone.embedding_dim == 16 and backbone.hidden_dim == 32
    error = parity.assert_close_on_tokens(backbone(x)["sequence_output"],
                                          expected["last_hidden_state"], mask)
    states = backbone.call_with_states(x)
    state_errors = [parity.assert_close_on_tokens(ours, theirs, mask)
                    for ours, theirs in zip(states["hidden_states"],
                                            expected["hidden_states"])]
    assert len(state_errors) == expected["hidden_states"].shape[0]

    pretrainer = pretrainer_from_huggingface(str(folder))
    head_error = parity.assert_close_on_tokens(pretrainer.discriminate(x)[..., None],
                                               expected["head_logits"][..., None], mask)
    print(f"ELECTRA parity: last_hidden_state {error:.3g}, hidden_states "
          f"{max(state_errors):.3g}, discriminator head logits {head_error:.3g}")


def test_converter_errors(tmp_path):
    _, _, folder = parity.load_fixture("electra")
    for key, value, message in (("model_type", "bert", "Not an ELECTRA checkpoint"),
                                ("hidden_act", "relu", "hidden_act"),
                                ("position_embedding_type", "relative_key", "absolute")):
        bad = tmp_path / f"bad_{key}"
        shutil.copytree(folder, bad)
        config = json.loads((bad / "config.json").read_text())
        config[key] = value
        (bad / "config.json").write_text(json.dumps(config))
        with pytest.raises(ValueError, match=message):
            from_huggingface(str(bad))
    # A shape that does not fit the weights is named.
    bad = tmp_path / "bad_shape"
    shutil.copytree(folder, bad)
    config = json.loads((bad / "config.json").read_text())
    config["intermediate_size"] = 48
    (bad / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="Shape mismatch"):
        from_huggingface(str(bad))


# --------------------------------------------------------------------------- pretrainer


def test_generator_size_and_shared_embeddings():
    backbone = _backbone()
    pretrainer = ElectraPretrainer(backbone, generator_size=0.25)
    generator = pretrainer.generator
    assert isinstance(generator, ElectraGenerator)
    assert (generator.num_layers, generator.hidden_dim, generator.intermediate_dim,
            generator.num_heads) == (2, 8, 16, 1)
    # The tied output layer is the discriminator's token embedding: same variable object.
    assert generator.masked_lm_head.token_embedding is backbone.token_embedding
    shared = {id(v) for v in backbone.embeddings.weights + backbone.segment_embedding.weights
              + backbone.embeddings_layer_norm.weights}
    assert id(backbone.token_embedding.embeddings) in {id(v) for v in generator.weights}
    # E=16 != generator width 8: the generator has its own projection.
    assert generator.embeddings_projection is not None
    assert generator.embeddings_projection is not backbone.embeddings_projection

    # The generator's loss reaches every shared embedding variable (token, position,
    # segment, LayerNorm) and none of the discriminator's encoder.
    x, y, w, _ = _batch()
    with tf.GradientTape() as tape:
        losses = pretrainer.compute_losses(x, y, pretrainer(x), w)
    discriminator_only = [v for v in backbone.trainable_variables if id(v) not in shared]
    gradients = tape.gradient(losses["mlm_loss"], [v for v in backbone.trainable_variables
                                                   if id(v) in shared] + discriminator_only)
    shared_gradients = gradients[:len(shared)]
    assert all(g is not None and float(tf.reduce_max(tf.abs(g))) > 0
               for g in shared_gradients)
    assert all(g is None for g in gradients[len(shared):])

    # No duplicated variables: the model holds each shared table once.
    generator_own = [v for v in generator.trainable_variables
                     if id(v) not in {id(b) for b in backbone.trainable_variables}]
    head = pretrainer.rtd_dense.trainable_variables + pretrainer.rtd_logits.trainable_variables
    assert _num_params(pretrainer.trainable_variables) == (
        _num_params(backbone.trainable_variables) + _num_params(generator_own)
        + _num_params(head))

    # Table 6 generator sizes for the presets' shapes; 1/4 otherwise.
    assert ElectraPretrainer(backbone).generator_size == pytest.approx(0.25)
    with pytest.raises(ValueError, match="generator_size"):
        ElectraPretrainer(backbone, generator_size=1.5)


def test_generator_dimensions_follow_table_6():
    from lmfactory.models.electra.electra_pretrainer import generator_dimensions
    from lmfactory.models.electra.electra_presets import default_generator_size

    expected = {"small": (64, 256, 1), "base": (256, 1024, 4), "large": (256, 1024, 4)}
    for preset, (hidden, ffn, heads) in expected.items():
        config = models.presets("electra")[preset]

        class Shape:  # the attributes generator_dimensions reads, without building
            hidden_dim, intermediate_dim = config["hidden_dim"], config["intermediate_dim"]
            num_heads, num_layers = config["num_heads"], config["num_layers"]

            @staticmethod
            def get_config():
                return config

        size = default_generator_size(Shape)
        dims = generator_dimensions(Shape, size)
        assert (dims["hidden_dim"], dims["intermediate_dim"], dims["num_heads"]) == \
            (hidden, ffn, heads), preset
        assert dims["num_layers"] == config["num_layers"]


def test_no_discriminator_gradient_into_generator():
    backbone = _backbone(dropout=0.0)
    pretrainer = ElectraPretrainer(backbone, sampling_seed=1)
    x, y, w, _ = _batch()
    backbone_ids = {id(v) for v in backbone.trainable_variables}
    generator_only = [v for v in pretrainer.generator.trainable_variables
                      if id(v) not in backbone_ids]
    assert generator_only  # projection, blocks, MLM head transform and bias
    with tf.GradientTape(persistent=True) as tape:
        losses = pretrainer.compute_losses(x, y, pretrainer(x, training=True), w,
                                           training=True)
    rtd_gradients = tape.gradient(losses["rtd_loss"], generator_only)
    assert all(g is None or float(tf.reduce_max(tf.abs(g))) == 0.0 for g in rtd_gradients)
    # ... while the generator's own loss trains it, and the RTD loss trains D and its head.
    mlm_gradients = tape.gradient(losses["mlm_loss"], generator_only)
    assert all(g is not None for g in mlm_gradients)
    rtd_targets = backbone.transformer_layers[-1].trainable_variables + \
        pretrainer.rtd_logits.trainable_variables
    assert all(g is not None for g in tape.gradient(losses["rtd_loss"], rtd_targets))
    del tape


def test_corruption_replaces_only_masked_positions():
    backbone = _backbone()
    pretrainer = ElectraPretrainer(backbone, sampling_seed=3)
    x, y, w, original = _batch()
    real = w["mlm"] > 0

    # A generator certain of token 7 everywhere: every real masked position becomes 7.
    logits = np.full((BATCH, PREDS, VOCAB), -1e4, dtype="float32")
    logits[..., 7] = 0.0
    y_seven = {"mlm": np.where(real & (np.arange(PREDS) == 0), 7, y["mlm"]).astype("int32")}
    out = {k: np.asarray(v) for k, v in
           pretrainer.corrupt(x, y_seven["mlm"], w["mlm"], logits).items()}
    expected_original = original.copy()
    for row in range(BATCH):
        for col in range(PREDS):
            if real[row, col]:
                expected_original[row, x["mask_positions"][row, col]] = y_seven["mlm"][row, col]
    np.testing.assert_array_equal(out["original_ids"], expected_original)
    masked = np.zeros((BATCH, SEQ), dtype=bool)
    for row in range(BATCH):
        masked[row, x["mask_positions"][row][real[row]]] = True
    np.testing.assert_array_equal(out["corrupted_ids"][masked], 7)
    np.testing.assert_array_equal(out["corrupted_ids"][~masked], x["token_ids"][~masked])
    # Position 0 ([CLS], where the padding predictions point) is never touched.
    np.testing.assert_array_equal(out["corrupted_ids"][:, 0], x["token_ids"][:, 0])
    # A sample equal to the original counts as "original" (§2).
    expected_replaced = (masked & (out["corrupted_ids"] != expected_original)).astype("int32")
    np.testing.assert_array_equal(out["replaced"], expected_replaced)
    assert out["replaced"][0, x["mask_positions"][0, 0]] == 0

    # With a real generator's logits: replacements only ever at the real masked positions.
    for _ in range(5):
        out = pretrainer.corrupt(x, y["mlm"], w["mlm"], pretrainer(x)["mlm"])
        replaced = np.asarray(out["replaced"]).astype(bool)
        assert not (replaced & ~masked).any()
        changed = np.asarray(out["corrupted_ids"]) != x["token_ids"]
        assert not (changed & ~masked).any()


def test_sampling_is_seeded_and_advances():
    logits = tf.constant(np.zeros((BATCH, PREDS, VOCAB), dtype="float32"))
    first = ElectraPretrainer(_backbone(), sampling_seed=11)
    second = ElectraPretrainer(_backbone(), sampling_seed=11)
    a1, a2 = np.asarray(first.sample(logits)), np.asarray(first.sample(logits))
    b1 = np.asarray(second.sample(logits))
    np.testing.assert_array_equal(a1, b1)  # same seed, same draws
    assert (a1 != a2).any()  # the state advances between steps
    assert a1.dtype == np.int32 and a1.min() >= 0 and a1.max() < VOCAB
    # Inside a compiled function, too.
    compiled = tf.function(first.sample)
    assert tuple(compiled(logits).shape) == (BATCH, PREDS)


def test_losses_match_their_definition():
    pretrainer = ElectraPretrainer(_backbone(dropout=0.0), sampling_seed=5, rtd_weight=50)
    x, y, w, _ = _batch()
    y_pred = pretrainer(x)
    losses = pretrainer.compute_losses(x, y, y_pred, w)
    corruption = {k: np.asarray(v) for k, v in losses["corruption"].items()}

    logits = np.asarray(y_pred["mlm"], dtype="float64")
    log_probs = logits - logits.max(-1, keepdims=True)
    log_probs -= np.log(np.exp(log_probs).sum(-1, keepdims=True))
    nll = -np.take_along_axis(log_probs, y["mlm"][..., None], -1)[..., 0]
    mlm = (w["mlm"] * nll).sum() / (w["mlm"].sum() + 1e-5)

    rtd_logits = np.asarray(pretrainer.discriminate(
        {**x, "token_ids": corruption["corrupted_ids"]}), dtype="float64")
    labels = corruption["replaced"].astype("float64")
    bce = np.maximum(rtd_logits, 0) - rtd_logits * labels + np.log1p(np.exp(-np.abs(rtd_logits)))
    mask = x["padding_mask"].astype("float64")
    rtd = (mask * bce).sum() / (mask.sum() + 1e-6)
    accuracy = (mask * ((rtd_logits > 0) == labels)).sum() / mask.sum()
    real = w["mlm"] > 0
    replaced_fraction = (corruption["sampled"] != y["mlm"])[real].mean()

    assert float(losses["mlm_loss"]) == pytest.approx(mlm, rel=1e-5)
    assert float(losses["rtd_loss"]) == pytest.approx(rtd, rel=1e-5)
    assert float(losses["loss"]) == pytest.approx(mlm + 50 * rtd, rel=1e-5)
    assert float(losses["rtd_accuracy"]) == pytest.approx(accuracy, rel=1e-6)
    assert float(losses["replaced_fraction"]) == pytest.approx(replaced_fraction, rel=1e-6)
    with pytest.raises(ValueError, match="'mlm'"):
        pretrainer.compute_losses(x, y["mlm"], y_pred, w)


def test_pretraining_metrics_and_weighted_total():
    keras.utils.set_random_seed(0)
    pretrainer = ElectraPretrainer(_backbone(dropout=0.0), sampling_seed=2)
    pretrainer.compile(optimizer=keras.optimizers.Adam(3e-3))
    x, y, w, _ = _batch()
    data = tf.data.Dataset.from_tensors((x, y, w)).repeat()
    history = pretrainer.fit(data, epochs=12, steps_per_epoch=2, verbose=0).history
    print({k: (round(v[0], 4), round(v[-1], 4)) for k, v in history.items()})
    assert set(history) == {"loss", "mlm_loss", "rtd_loss", "rtd_accuracy",
                            "replaced_fraction"}
    # That the total loss falls: the conformance harness (check_pretraining_objective);
    # each of its two terms falls.
    assert history["mlm_loss"][-1] < history["mlm_loss"][0]
    assert history["rtd_loss"][-1] < history["rtd_loss"][0]
    assert all(0.0 <= value <= 1.0 for value in history["replaced_fraction"])
    # The total is L_MLM + 50 L_Disc (Keras averages each over the epoch's steps alike).
    for epoch in range(len(history["loss"])):
        assert history["loss"][epoch] == pytest.approx(
            history["mlm_loss"][epoch] + 50 * history["rtd_loss"][epoch], rel=1e-4)


def test_mixed_precision_pretrainer():
    backbone = _backbone(dtype="mixed_bfloat16")
    pretrainer = ElectraPretrainer(backbone, sampling_seed=0)
    assert pretrainer.generator.layers_dtype.name == "mixed_bfloat16"
    x, y, w, _ = _batch()
    with tf.GradientTape() as tape:
        y_pred = pretrainer(x, training=True)
        losses = pretrainer.compute_losses(x, y, y_pred, w, training=True)
    assert y_pred["mlm"].dtype == tf.bfloat16
    assert losses["loss"].dtype == tf.float32 and np.isfinite(float(losses["loss"]))
    gradients = tape.gradient(losses["loss"], pretrainer.trainable_variables)
    assert all(g is not None for g in gradients)
    config = pretrainer.generator.get_config()
    assert ElectraGenerator.from_config(config).layers_dtype.name == "mixed_bfloat16"


def test_pretrainer_config_and_keras_file(tmp_path):
    pretrainer = ElectraPretrainer(_backbone(), generator_size=0.5, rtd_weight=20.0,
                                   sampling_seed=4)
    config = pretrainer.get_config()
    assert (config["generator_size"], config["rtd_weight"], config["sampling_seed"]) == \
        (0.5, 20.0, 4)
    clone = ElectraPretrainer.from_config(config)
    assert clone.get_config() == config
    assert clone.generator.hidden_dim == 16

    x, _, _, _ = _batch()
    path = tmp_path / "electra_pretrainer.keras"
    pretrainer.save(path)
    loaded = keras.saving.load_model(path, compile=False)
    assert isinstance(loaded, ElectraPretrainer) and loaded.get_config() == config
    assert loaded.generator.masked_lm_head.token_embedding is loaded.backbone.token_embedding
    np.testing.assert_allclose(loaded(x)["mlm"], pretrainer(x)["mlm"], atol=1e-6)
    np.testing.assert_allclose(loaded.discriminate(x), pretrainer.discriminate(x), atol=1e-6)
    with pytest.raises(ValueError, match="mask_positions"):
        pretrainer({k: v for k, v in x.items() if k != "mask_positions"})


# --------------------------------------------------------------------------- classifier


def test_classifier_shapes_config_and_keras_file(tmp_path):
    backbone = _backbone()
    classifier = ElectraClassifier(backbone, num_classes=3)
    x = _inputs()
    logits = classifier(x)
    assert tuple(logits.shape) == (BATCH, 3)
    assert sorted(classifier.input) == ["padding_mask", "segment_ids", "token_ids"]
    assert classifier.pooled_dense.units == 32  # dense(H, gelu) on the first token
    # Padding positions do not reach the logits.
    padded = {**x, "token_ids": x["token_ids"].copy()}
    padded["token_ids"][1, 8:] = 9
    np.testing.assert_allclose(classifier(padded)[1], logits[1], atol=1e-5)

    config = classifier.get_config()
    assert ElectraClassifier.from_config(config).get_config() == config
    path = tmp_path / "electra_classifier.keras"
    classifier.save(path)
    loaded = keras.saving.load_model(path, compile=False)
    np.testing.assert_allclose(loaded(x), logits, atol=1e-6)
    with pytest.raises(ValueError, match="num_classes"):
        ElectraClassifier(backbone, num_classes=0)


# --------------------------------------------------------------------------- presets


def _discriminator_params(V, E, H, F, L, positions=512, segments=2):
    embeddings = (V + positions + segments) * E + 2 * E
    projection = (E * H + H) if E != H else 0
    block = 4 * (H * H + H) + 2 * (2 * H) + (H * F + F) + (F * H + H)
    return embeddings + projection + L * block


@pytest.mark.parametrize("preset,paper_millions", [("small", 14), ("base", 110)])
def test_preset_parameter_counts_match_the_paper(preset, paper_millions):
    backbone = models.build("electra", preset)
    config = models.presets("electra")[preset]
    count = backbone.count_params()
    assert count == _discriminator_params(
        config["vocabulary_size"], config["embedding_dim"], config["hidden_dim"],
        config["intermediate_dim"], config["num_layers"])
    # §3.1 / Table 1 give ELECTRA-Small 14M and ELECTRA-Base 110M parameters.
    assert abs(count / 1e6 - paper_millions) / paper_millions < 0.05, count
    del backbone


# --------------------------------------------------------------------------- distribution

MIRRORED_SCRIPT = textwrap.dedent("""
    import json, os
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    from lmfactory.components.trainer.strategy import split_cpu_into_logical_devices
    split_cpu_into_logical_devices(2)
    import numpy as np, tensorflow as tf
    from lmfactory import models
    import lmfactory.models.electra  # noqa: F401
    from lmfactory.components.trainer.optimization import make_optimizer

    B, T, P, V = 8, 16, 4, 50
    rng = np.random.default_rng(0)
    padding_mask = np.ones((B, T), "int32"); padding_mask[:, 12:] = 0; padding_mask[0, 8:] = 0
    weights = np.zeros((B, P), "float32")
    for row, count in enumerate([4, 4, 4, 4, 1, 2, 1, 1]):  # unequal per replica
        weights[row, :count] = 1
    positions = np.stack([rng.choice(np.arange(1, 8), P, replace=False) for _ in range(B)])
    x = {"token_ids": rng.integers(5, V, (B, T)).astype("int32") * padding_mask,
         "padding_mask": padding_mask, "segment_ids": np.zeros((B, T), "int32"),
         "mask_positions": (positions * (weights > 0)).astype("int32")}
    batch = (x, {"mlm": rng.integers(5, V, (B, P)).astype("int32")}, {"mlm": weights})

    def build():
        backbone = models.build("electra", "tiny", vocabulary_size=V, num_layers=2,
                                hidden_dim=32, num_heads=4, intermediate_dim=64,
                                embedding_dim=16, dropout=0.0, max_sequence_length=T)
        return models.get("electra").pretrainer("mlm")(backbone, sampling_seed=7)

    model = build()
    # A generator certain of token 9: the corruption is the same on any device layout.
    model.generator.masked_lm_head._bias.assign(
        np.where(np.arange(V) == 9, 50.0, 0.0).astype("float32"))
    initial = model.get_weights()

    def one_step(strategy):
        with strategy.scope():
            model = build()
            model.set_weights(initial)
            model.compile(optimizer=make_optimizer(1e-2, total_steps=10, warmup_fraction=0.0))
        history = model.fit(tf.data.Dataset.from_tensors(batch), epochs=1, verbose=0)
        return {k: float(v[0]) for k, v in history.history.items()}, model.get_weights()

    single, single_weights = one_step(tf.distribute.get_strategy())
    mirrored_strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    mirrored, mirrored_weights = one_step(mirrored_strategy)
    print("RESULT " + json.dumps({
        "replicas": mirrored_strategy.num_replicas_in_sync,
        "single": single, "mirrored": mirrored,
        "max_weight_difference": max(float(np.max(np.abs(a - b)))
                                     for a, b in zip(single_weights, mirrored_weights)),
        "max_weight_change": max(float(np.max(np.abs(a - b)))
                                 for a, b in zip(single_weights, initial))}))
""")


def test_mirrored_two_devices_matches_one_device(tmp_path):
    """In a process of its own (its logical devices), forked: tests/forked_tasks.py."""
    repo = Path(__file__).resolve().parent.parent
    status, output = forked_tasks.run([sys.executable, "-c", MIRRORED_SCRIPT],
                                      tmp_path / "mirrored.log", timeout=300, cwd=repo)
    lines = [line for line in output.splitlines() if line.startswith("RESULT ")]
    assert status == 0 and lines, output[-3000:]
    figures = json.loads(lines[-1][len("RESULT "):])
    assert figures["replicas"] == 2
    for name in ("loss", "mlm_loss", "rtd_loss", "rtd_accuracy", "replaced_fraction"):
        assert figures["mirrored"][name] == pytest.approx(figures["single"][name], rel=1e-5)
    assert figures["max_weight_change"] > 1e-4
    assert figures["max_weight_difference"] < 1e-5
