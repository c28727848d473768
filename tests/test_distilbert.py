"""DistilBERT (Sanh et al. 2019): backbone, Hugging Face parity, student initialisation from a
BERT teacher, the distillation losses and training, the classifier, serialisation."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from lmfactory import models
from lmfactory.models import registry
from lmfactory.models.bert import BertBackbone, BertPretrainer
from lmfactory.models.distilbert import (DISTILBERT_PRESETS, DistilBertBackbone,
                                         DistilBertClassifier, DistilBertDistiller)
from lmfactory.models.distilbert.distilbert_converters import (
    convert_huggingface, load_huggingface_masked_lm_head)
from lmfactory.models.distilbert.distilbert_distiller import default_teacher_layers
import parity

VOCAB = 100
BATCH, SEQ, PREDS = 3, 10, 4
TINY = dict(vocabulary_size=VOCAB, num_heads=4, hidden_dim=32, intermediate_dim=64,
            max_sequence_length=32)


@pytest.fixture(scope="module", autouse=True)
def _seed():
    keras.utils.set_random_seed(1234)


def _batch(seed=0, lengths=(10, 6, 8)):
    rng = np.random.default_rng(seed)
    padding_mask = (np.arange(SEQ)[None, :] < np.array(lengths)[:, None]).astype("int32")
    token_ids = rng.integers(5, VOCAB, (BATCH, SEQ)).astype("int32") * padding_mask
    x = {"token_ids": token_ids, "padding_mask": padding_mask,
         "segment_ids": np.zeros((BATCH, SEQ), "int32"),
         "mask_positions": rng.integers(1, 6, (BATCH, PREDS)).astype("int32")}
    y = {"mlm": rng.integers(5, VOCAB, (BATCH, PREDS)).astype("int64")}
    weights = np.array([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]], dtype="float32")
    return x, y, {"mlm": weights}


def _teacher(num_layers=2):
    teacher = BertPretrainer(BertBackbone(num_layers=num_layers, dropout=0.0, **TINY))
    # A peaked output distribution, as a trained teacher has (a random one is near uniform).
    bias = teacher.masked_lm_head._bias
    bias.assign(np.random.default_rng(7).normal(0.0, 2.0, bias.shape).astype("float32"))
    return teacher


def _student(num_layers=1, **overrides):
    return DistilBertBackbone(num_layers=num_layers, **{**TINY, "dropout": 0.0, **overrides})


def _log_softmax(z):
    z = np.asarray(z, "float64")
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


# --------------------------------------------------------------------------- registry, sizes


def test_registered_architecture():
    arch = models.get("distilbert")
    assert arch.family == "encoder" and arch.tokenizer_kind == "wordpiece"
    assert arch.backbone_cls is DistilBertBackbone
    assert arch.pretrainers == {"mlm": DistilBertDistiller}
    assert DistilBertDistiller.needs_teacher
    assert arch.head("classification") is DistilBertClassifier
    assert arch.hf_model_types == ("distilbert",)
    assert set(arch.converters) == {"huggingface"}
    assert arch.special_tokens["mask"] == "[MASK]" and arch.segment_layout == "bert"
    assert registry.find_by_hf_model_type("distilbert") == [arch]
    assert registry.find_by_backbone(_student()) is arch


def test_base_preset_has_66m_parameters():
    V, L, H, I, T = 30522, 6, 768, 3072, 512
    block = 4 * (H * H + H) + (H * I + I) + (I * H + H) + 2 * 2 * H
    formula = V * H + T * H + 2 * H + L * block  # no token types, no pooler
    backbone = DistilBertBackbone(**DISTILBERT_PRESETS["base"])
    assert backbone.count_params() == formula == 66_362_880
    assert set(backbone.input) == {"token_ids", "padding_mask"}
    assert set(backbone.output) == {"sequence_output"}


# --------------------------------------------------------------------------- parity


def test_huggingface_parity_backbone_and_masked_lm_head():
    inputs, expected, folder = parity.load_fixture("distilbert")
    backbone = models.load_checkpoint("distilbert", folder)  # through the registry
    assert isinstance(backbone, DistilBertBackbone)
    assert backbone.num_layers == 2 and backbone.hidden_dim == 32
    x = {"token_ids": inputs["input_ids"], "padding_mask": inputs["attention_mask"]}
    mask = inputs["attention_mask"]
    out = backbone(x)
    error = parity.assert_close_on_tokens(out["sequence_output"],
                                          expected["last_hidden_state"], mask)
    states = backbone.call_with_states(x)
    for ours, theirs in zip(states["hidden_states"], expected["hidden_states"]):
        parity.assert_close_on_tokens(ours, theirs, mask)
    print(f"distilbert last_hidden_state max abs error {error:.3g}")

    teacher = BertPretrainer(BertBackbone(vocabulary_size=backbone.vocabulary_size,
                                          num_layers=1, num_heads=4, hidden_dim=32,
                                          intermediate_dim=64, max_sequence_length=64))
    distiller = DistilBertDistiller(backbone, teacher=teacher)
    load_huggingface_masked_lm_head(distiller.masked_lm_head, str(folder))
    positions = np.tile(np.arange(mask.shape[1], dtype="int32")[None], (mask.shape[0], 1))
    logits = distiller({**x, "mask_positions": positions})["mlm"]
    head_error = parity.assert_close_on_tokens(logits, expected["head_logits"], mask)
    print(f"distilbert masked-LM logits max abs error {head_error:.3g}")


def test_converter_rejects_other_checkpoints():
    with pytest.raises(ValueError, match="Not a DistilBERT checkpoint"):
        convert_huggingface(str(parity.fixture_dir("bert")))


def test_sinusoidal_positions_match_the_reference_formula():
    backbone = _student(sinusoidal_positions=True)
    table = np.asarray(backbone.position_embedding(np.zeros((1, SEQ, 32), "float32")))[0]
    position = np.arange(SEQ)[:, None]
    j = np.arange(32)[None, :]
    angle = position / np.power(10000.0, 2 * (j // 2) / 32)
    reference = np.where(j % 2 == 0, np.sin(angle), np.cos(angle))
    np.testing.assert_allclose(table, reference, atol=1e-5)
    assert not backbone.position_embedding.weights  # fixed, not learned


# --------------------------------------------------------------------------- backbone


def test_call_with_states_shares_the_forward_pass():
    backbone = _student(num_layers=2)
    x, _, _ = _batch()
    x = {k: x[k] for k in ("token_ids", "padding_mask")}
    states = backbone.call_with_states(x)
    np.testing.assert_allclose(states["sequence_output"], backbone(x)["sequence_output"],
                               atol=1e-6)
    assert len(states["hidden_states"]) == 3 and len(states["attention_scores"]) == 2
    probabilities = np.asarray(states["attention_scores"][0])
    assert probabilities.shape == (BATCH, 4, SEQ, SEQ)
    np.testing.assert_allclose(probabilities.sum(-1), 1.0, atol=1e-5)
    keys_padded = x["padding_mask"][:, None, None, :] == 0
    assert np.all(np.where(keys_padded, probabilities, 0.0) < 1e-6)
    with pytest.raises(ValueError, match="padding_mask"):
        backbone.call_with_states({"token_ids": x["token_ids"]})


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="divisible"):
        DistilBertBackbone(VOCAB, 1, 3, 32, 64)
    with pytest.raises(ValueError, match="num_classes"):
        DistilBertClassifier(_student(), num_classes=0)


# --------------------------------------------------------------------------- initialisation


def _same(a, b):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_initialize_student_takes_one_teacher_layer_out_of_two():
    assert default_teacher_layers(12, 6) == [0, 2, 4, 6, 8, 10]
    assert default_teacher_layers(4, 4) == [0, 1, 2, 3]
    teacher = BertBackbone(num_layers=4, **TINY)
    student = DistilBertBackbone(num_layers=2, **{**TINY, "max_sequence_length": 16})
    copied = DistilBertDistiller.initialize_student(student, teacher)
    assert copied == [0, 2]
    _same(student.token_embedding.embeddings, teacher.token_embedding.embeddings)
    _same(student.position_embedding.position_embeddings,
          teacher.embeddings.position_embedding.position_embeddings[:16])
    for ours, theirs in zip(student.embeddings_layer_norm.weights,
                            teacher.embeddings_layer_norm.weights):
        _same(ours, theirs)
    for student_block, teacher_index in zip(student.transformer_layers, copied):
        teacher_block = teacher.transformer_layers[teacher_index]
        assert len(student_block.weights) == len(teacher_block.weights) == 16
        for ours, theirs in zip(student_block.weights, teacher_block.weights):
            _same(ours, theirs)
    # ... and not the other blocks.
    assert not np.array_equal(
        np.asarray(student.transformer_layers[1]._feedforward_output_dense.kernel),
        np.asarray(teacher.transformer_layers[1]._feedforward_output_dense.kernel))

    DistilBertDistiller.initialize_student(student, teacher, teacher_layers=[1, 3])
    _same(student.transformer_layers[1]._feedforward_output_dense.kernel,
          teacher.transformer_layers[3]._feedforward_output_dense.kernel)


def test_tiny_preset_is_half_of_a_bert_mini_teacher():
    teacher = BertPretrainer(models.build("bert", "mini", vocabulary_size=VOCAB))
    student = models.build("distilbert", "tiny", vocabulary_size=VOCAB)
    assert DistilBertDistiller.initialize_student(student, teacher.backbone) == [0, 2]
    distiller = DistilBertDistiller(student, teacher=teacher)
    x, y, weights = _batch()
    assert float(distiller.compute_loss(x, y, distiller(x), weights)) > 0


def test_initialize_student_refuses_mismatched_teachers():
    teacher = BertBackbone(num_layers=2, **TINY)
    wide = DistilBertBackbone(num_layers=1, **{**TINY, "hidden_dim": 64})
    with pytest.raises(ValueError, match="hidden_dim must match: student 64, teacher 32"):
        DistilBertDistiller.initialize_student(wide, teacher)
    with pytest.raises(ValueError, match="more blocks"):
        DistilBertDistiller.initialize_student(_student(num_layers=3), teacher)
    with pytest.raises(ValueError, match="0-indexed"):
        DistilBertDistiller.initialize_student(_student(), teacher, teacher_layers=[2])
    with pytest.raises(ValueError, match="intermediate_dim"):
        DistilBertDistiller.initialize_student(_student(intermediate_dim=128), teacher)


# --------------------------------------------------------------------------- losses


def _twin(teacher):
    """A student equal to the teacher network: every teacher block, the teacher's head, and
    segment embedding 0 (which DistilBERT lacks) set to zero in the teacher."""
    segment = teacher.backbone.segment_embedding.embeddings
    segment.assign(np.zeros(segment.shape, "float32"))
    student = _student(num_layers=teacher.backbone.num_layers)
    DistilBertDistiller.initialize_student(student, teacher.backbone)
    return DistilBertDistiller(student, teacher=teacher)


def test_losses_vanish_when_the_student_is_the_teacher():
    teacher = _teacher()
    distiller = _twin(teacher)
    x, y, weights = _batch()
    y_pred = distiller(x, training=False)
    np.testing.assert_allclose(y_pred["mlm"], y_pred["teacher_mlm"], atol=1e-4)
    losses = distiller.distillation_losses(x, y, y_pred, weights)
    assert abs(float(losses["ce"])) < 1e-5
    assert abs(float(losses["cos"])) < 1e-5
    # L_mlm is then the teacher's own masked-LM loss (BertPretrainer's computation).
    teacher.compute_loss(x, {"mlm": y["mlm"], "nsp": np.zeros(BATCH, "int64")},
                         teacher(x, training=False), weights)
    np.testing.assert_allclose(float(losses["mlm"]),
                               float(teacher.mlm_loss_tracker.result()), rtol=1e-5)


def test_loss_terms_match_an_independent_computation():
    teacher = _teacher()
    student = _student()
    DistilBertDistiller.initialize_student(student, teacher.backbone)
    distiller = DistilBertDistiller(student, teacher=teacher, temperature=2.0,
                                    initialize_head_from_teacher=False)
    x, y, weights = _batch(seed=3)
    y_pred = {k: np.asarray(v, "float64") for k, v in distiller(x, training=False).items()}
    losses = distiller.distillation_losses(x, y, y_pred, weights)
    w = weights["mlm"]
    t = 2.0
    p_teacher = np.exp(_log_softmax(y_pred["teacher_mlm"] / t))
    kl = (p_teacher * (_log_softmax(y_pred["teacher_mlm"] / t)
                       - _log_softmax(y_pred["mlm"] / t))).sum(-1)
    expected_ce = (w * kl).sum() / w.sum() * t * t
    log_p = _log_softmax(y_pred["mlm"])
    nll = -np.take_along_axis(log_p, y["mlm"][..., None], -1)[..., 0]
    expected_mlm = (w * nll).sum() / w.sum()
    s, h = y_pred["sequence_output"], y_pred["teacher_sequence_output"]
    cos = (s * h).sum(-1) / (np.linalg.norm(s, axis=-1) * np.linalg.norm(h, axis=-1))
    real = x["padding_mask"].astype(bool)
    expected_cos = (1 - cos)[real].mean()
    np.testing.assert_allclose(float(losses["ce"]), expected_ce, rtol=1e-4)
    np.testing.assert_allclose(float(losses["mlm"]), expected_mlm, rtol=1e-4)
    np.testing.assert_allclose(float(losses["cos"]), expected_cos, rtol=1e-4)
    assert expected_ce > 1e-3 and expected_cos > 1e-3  # not trivially zero
    total = distiller.compute_loss(x, y, distiller(x, training=False), weights)
    np.testing.assert_allclose(float(total), 5.0 * expected_ce + 2.0 * expected_mlm
                               + 1.0 * expected_cos, rtol=1e-4)


# --------------------------------------------------------------------------- training


def test_training_decreases_the_loss_and_leaves_the_teacher_alone():
    teacher = _teacher()
    student = _student()  # random: every loss term starts far from its minimum
    distiller = DistilBertDistiller(student, teacher=teacher,
                                    initialize_head_from_teacher=False)
    teacher_before = [np.array(v) for v in teacher.weights]
    teacher_ids = {id(v) for v in teacher.weights}
    assert teacher.trainable_weights == []
    assert not teacher_ids & {id(v) for v in distiller.trainable_weights}
    assert {id(v) for v in student.trainable_weights} <= {
        id(v) for v in distiller.trainable_weights}

    x, y, weights = _batch(seed=1)
    # Watched explicitly: a frozen variable is not watched by default, so only the
    # stop_gradient on the teacher's outputs keeps these gradients None.
    teacher_values = [v.value for v in teacher.weights]
    with tf.GradientTape() as tape:
        tape.watch(teacher_values)
        loss = distiller.compute_loss(x, y, distiller(x, training=True), weights)
    gradients = tape.gradient(loss, [*[v.value for v in student.trainable_weights],
                                     *teacher_values])
    assert all(g is None for g in gradients[len(student.trainable_weights):])
    assert all(g is not None for g in gradients[:len(student.trainable_weights)])

    distiller.compile(optimizer=keras.optimizers.Adam(3e-3))
    history = distiller.fit(x, y, sample_weight=weights, epochs=8, verbose=0).history
    # That the total loss falls: the conformance harness (check_pretraining_objective).
    assert history["loss_mlm"][-1] < history["loss_mlm"][0]
    assert set(history) >= {"loss_ce", "loss_mlm", "loss_cos", "mlm_accuracy"}
    # The teacher's random targets and the labels disagree; without L_mlm, the two
    # distillation terms fall too.
    distiller.alpha_mlm = 0.0
    distiller.compile(optimizer=keras.optimizers.Adam(3e-3))
    only_distillation = distiller.fit(x, y, sample_weight=weights, epochs=8, verbose=0).history
    for term in ("loss_ce", "loss_cos"):
        values = only_distillation[term]
        assert values[-1] < 0.9 * values[0], (term, values)
    for before, after in zip(teacher_before, teacher.weights):
        np.testing.assert_array_equal(before, np.asarray(after))
    print(f"distilbert distillation loss {history['loss'][0]:.4f} -> {history['loss'][-1]:.4f}")


def test_missing_inputs_and_bad_teachers_are_refused():
    teacher = _teacher()
    distiller = DistilBertDistiller(_student(), teacher=teacher)
    x, _, _ = _batch()
    with pytest.raises(ValueError, match="mask_positions"):
        distiller({k: x[k] for k in ("token_ids", "padding_mask")})
    with pytest.raises(TypeError, match="masked_lm_head"):
        DistilBertDistiller(_student(), teacher=teacher.backbone)
    with pytest.raises(ValueError, match="vocabulary"):
        DistilBertDistiller(_student(vocabulary_size=VOCAB + 1), teacher=teacher)
    with pytest.raises(ValueError, match="labels"):
        distiller.distillation_losses(x, None, distiller(x), None)


# --------------------------------------------------------------------------- classifier


def test_classifier_head_on_the_first_token():
    backbone = _student()
    classifier = DistilBertClassifier(backbone, num_classes=3)
    assert set(classifier.input) == {"token_ids", "padding_mask"}
    x, _, _ = _batch()
    x = {k: x[k] for k in ("token_ids", "padding_mask")}
    logits = np.asarray(classifier(x, training=False))
    first = np.asarray(backbone(x)["sequence_output"])[:, 0, :]
    hidden = np.maximum(first @ np.asarray(classifier.pre_classifier.kernel)
                        + np.asarray(classifier.pre_classifier.bias), 0.0)
    expected = hidden @ np.asarray(classifier.output_dense.kernel) + np.asarray(
        classifier.output_dense.bias)
    np.testing.assert_allclose(logits, expected, atol=1e-5)
    assert logits.shape == (BATCH, 3)


# --------------------------------------------------------------------------- serialisation


def test_config_round_trip_and_keras_files(tmp_path):
    backbone = _student(sinusoidal_positions=True)
    clone = DistilBertBackbone.from_config(backbone.get_config())
    assert clone.get_config() == backbone.get_config()

    teacher = _teacher()
    student = _student()
    DistilBertDistiller.initialize_student(student, teacher.backbone)
    distiller = DistilBertDistiller(student, teacher=teacher, alpha_ce=4.0, temperature=3.0)
    config = distiller.get_config()
    assert config["alpha_ce"] == 4.0 and config["temperature"] == 3.0
    x, _, _ = _batch()
    path = str(tmp_path / "distiller.keras")
    distiller.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded, DistilBertDistiller) and loaded.temperature == 3.0
    for key, value in distiller(x, training=False).items():
        np.testing.assert_allclose(loaded(x, training=False)[key], value, atol=1e-5)
    assert loaded.teacher.trainable_weights == []

    classifier = DistilBertClassifier(student, num_classes=2)
    path = str(tmp_path / "classifier.keras")
    classifier.save(path)
    loaded = keras.saving.load_model(path)
    inputs = {k: x[k] for k in ("token_ids", "padding_mask")}
    np.testing.assert_allclose(loaded(inputs), classifier(inputs), atol=1e-5)
