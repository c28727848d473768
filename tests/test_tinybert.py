"""TinyBERT (Jiao et al. 2020): student sizes, the layer mapping g(m), the unnormalised
attention matrices, the general and task-specific distillation losses and training,
serialisation."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from lmfactory import models
from lmfactory.models import registry
from lmfactory.models.bert import BertBackbone, BertClassifier, BertPretrainer
from lmfactory.models.tinybert import (TINYBERT_PRESETS, TinyBertBackbone,
                                       TinyBertGeneralDistiller, TinyBertTaskDistiller)
from lmfactory.models.tinybert.tinybert_distiller import (attention_logits,
                                                          resolve_layer_mapping,
                                                          uniform_layer_mapping)

VOCAB = 100
BATCH, SEQ = 3, 10
LENGTHS = (10, 6, 8)
TEACHER = dict(vocabulary_size=VOCAB, num_layers=4, num_heads=4, hidden_dim=48,
               intermediate_dim=96, max_sequence_length=32, dropout=0.0)
STUDENT = dict(vocabulary_size=VOCAB, num_layers=2, num_heads=4, hidden_dim=32,
               intermediate_dim=64, max_sequence_length=32, dropout=0.0)
CLASSIFIER_INPUTS = ("token_ids", "padding_mask", "segment_ids")


@pytest.fixture(scope="module", autouse=True)
def _seed():
    keras.utils.set_random_seed(1234)


def _batch(seed=0):
    rng = np.random.default_rng(seed)
    padding_mask = (np.arange(SEQ)[None, :] < np.array(LENGTHS)[:, None]).astype("int32")
    token_ids = rng.integers(5, VOCAB, (BATCH, SEQ)).astype("int32") * padding_mask
    segment_ids = (np.arange(SEQ)[None, :] >= 4).astype("int32") * padding_mask
    return {"token_ids": token_ids, "padding_mask": padding_mask, "segment_ids": segment_ids,
            "mask_positions": rng.integers(1, 6, (BATCH, 3)).astype("int32")}


def _classifier_inputs(x):
    return {name: x[name] for name in CLASSIFIER_INPUTS}


def _bert_param_formula(V, L, H, I, T=512, S=2):
    block = 4 * (H * H + H) + (H * I + I) + (I * H + H) + 2 * 2 * H
    return V * H + T * H + S * H + 2 * H + L * block + (H * H + H)


def _identity_projections(distiller):
    for projection in (distiller.embedding_projection, distiller.hidden_projection):
        size = projection.kernel.shape[0]
        projection.kernel.assign(np.eye(size, dtype="float32"))
        projection.bias.assign(np.zeros(size, "float32"))


def _twin_student(teacher_backbone):
    """A TinyBERT student identical to the teacher's backbone."""
    config = {k: v for k, v in teacher_backbone.get_config().items()
              if k not in ("name", "trainable")}
    student = TinyBertBackbone(**config)
    student.set_weights(teacher_backbone.get_weights())
    return student


# --------------------------------------------------------------------------- registry, sizes


def test_registered_architecture():
    arch = models.get("tinybert")
    assert arch.family == "encoder" and arch.tokenizer_kind == "wordpiece"
    assert arch.backbone_cls is TinyBertBackbone
    assert arch.pretrainers == {"mlm": TinyBertGeneralDistiller}
    assert TinyBertGeneralDistiller.needs_teacher and TinyBertTaskDistiller.needs_teacher
    assert arch.head("classification") is BertClassifier
    assert arch.special_tokens["cls"] == "[CLS]" and arch.segment_layout == "bert"
    # The subclass tells the registry a TinyBERT student from a BERT model.
    assert registry.find_by_backbone(TinyBertBackbone(**STUDENT)) is arch
    assert registry.find_by_backbone(BertBackbone(**STUDENT)) is models.get("bert")


def test_presets_and_the_14_5m_tinybert_4():
    preset = TINYBERT_PRESETS["4L-312"]
    assert (preset["num_layers"], preset["hidden_dim"], preset["intermediate_dim"],
            preset["num_heads"]) == (4, 312, 1200, 12)
    backbone = models.build("tinybert", "4L-312")
    assert isinstance(backbone, TinyBertBackbone)
    count = backbone.count_params()
    assert count == _bert_param_formula(30522, 4, 312, 1200) == 14_350_248
    pooler = 312 * 312 + 312
    projection = 312 * 768 + 768  # W_h of general distillation from BERT-base
    assert count - pooler + projection == 14_492_976  # the paper's "14.5M"
    six = TINYBERT_PRESETS["6L-768"]
    assert (six["num_layers"], six["hidden_dim"], six["num_heads"]) == (6, 768, 12)
    assert _bert_param_formula(30522, 6, 768, 3072) == 66_955_008
    tiny = models.build("tinybert", "tiny", vocabulary_size=VOCAB)
    assert tiny.num_layers == 2 and tiny.num_heads == models.presets("bert")["mini"][
        "num_heads"]


# --------------------------------------------------------------------------- layer mapping


def test_uniform_and_explicit_layer_mapping():
    assert uniform_layer_mapping(12, 4) == [3, 6, 9, 12]  # TinyBERT-4 from BERT-base
    assert uniform_layer_mapping(12, 6) == [2, 4, 6, 8, 10, 12]
    assert uniform_layer_mapping(4, 4) == [1, 2, 3, 4]
    assert uniform_layer_mapping(5, 2) == [2, 5]  # floor(m * N / M)
    assert resolve_layer_mapping("uniform", 4, 2) == [2, 4]
    assert resolve_layer_mapping([1, 3], 4, 2) == [1, 3]
    with pytest.raises(ValueError, match="lists 1 teacher layers for a student of 2"):
        resolve_layer_mapping([1], 4, 2)
    with pytest.raises(ValueError, match="teacher layers 1...4"):
        resolve_layer_mapping([0, 4], 4, 2)
    with pytest.raises(ValueError, match="'uniform' or a list"):
        resolve_layer_mapping("skip", 4, 2)
    with pytest.raises(ValueError, match="explicit layer_mapping"):
        uniform_layer_mapping(2, 4)


# --------------------------------------------------------------------------- attention


def test_attention_logits_are_the_blocks_pre_softmax_scores():
    backbone = BertBackbone(**TEACHER)
    x = _classifier_inputs(_batch())
    states = backbone.call_with_states(x)
    keys = x["padding_mask"][:, None, None, :].astype(bool)
    for m, block in enumerate(backbone.transformer_layers):
        logits = np.asarray(attention_logits(block, states["hidden_states"][m]), "float64")
        assert logits.shape == (BATCH, 4, SEQ, SEQ)
        masked = np.where(keys, logits, -1e9)
        probabilities = np.exp(masked - masked.max(-1, keepdims=True))
        probabilities /= probabilities.sum(-1, keepdims=True)
        np.testing.assert_allclose(probabilities, states["attention_scores"][m], atol=1e-5)
        # Unnormalised: rows do not sum to one, and softmax would not be the identity.
        assert np.abs(logits.sum(-1) - 1).max() > 1e-3


# --------------------------------------------------------------------------- general


def test_general_distiller_maps_the_teacher_layers():
    teacher = BertPretrainer(BertBackbone(**TEACHER))
    distiller = TinyBertGeneralDistiller(TinyBertBackbone(**STUDENT), teacher=teacher)
    assert distiller.teacher_layers == [2, 4]
    x = _batch()
    y_pred = distiller(x, training=False)
    states = teacher.backbone.call_with_states(_classifier_inputs(x))
    assert y_pred["hidden_states"].shape == (BATCH, 2, SEQ, 48)
    np.testing.assert_allclose(y_pred["teacher_embedding"], states["hidden_states"][0])
    for m, g in enumerate([2, 4]):
        np.testing.assert_allclose(y_pred["teacher_hidden_states"][:, m],
                                   states["hidden_states"][g], atol=1e-6)
        np.testing.assert_allclose(
            y_pred["teacher_attention_logits"][:, m],
            attention_logits(teacher.backbone.transformer_layers[g - 1],
                             states["hidden_states"][g - 1]), atol=1e-5)
    explicit = TinyBertGeneralDistiller(TinyBertBackbone(**STUDENT), teacher=teacher,
                                        layer_mapping=[1, 3])
    y_pred = explicit(x, training=False)
    np.testing.assert_allclose(y_pred["teacher_hidden_states"][:, 0],
                               states["hidden_states"][1], atol=1e-6)


def test_intermediate_losses_vanish_for_a_student_equal_to_the_teacher():
    teacher = BertPretrainer(BertBackbone(**{**TEACHER, "num_layers": 2}))
    distiller = TinyBertGeneralDistiller(_twin_student(teacher.backbone), teacher=teacher)
    assert distiller.teacher_layers == [1, 2]
    _identity_projections(distiller)
    x = _batch()
    losses = distiller.intermediate_losses(x["padding_mask"], distiller(x, training=False))
    for name, value in losses.items():
        assert abs(float(value)) < 1e-8, (name, float(value))
    assert float(distiller.compute_loss(x, None, distiller(x, training=False))) < 1e-8


def test_intermediate_losses_match_an_independent_computation():
    teacher = BertPretrainer(BertBackbone(**TEACHER))
    distiller = TinyBertGeneralDistiller(TinyBertBackbone(**STUDENT), teacher=teacher)
    x = _batch(seed=2)
    y_pred = {k: np.asarray(v, "float64") for k, v in distiller(x, training=False).items()}
    losses = distiller.intermediate_losses(x["padding_mask"], y_pred)
    real = x["padding_mask"].astype(bool)
    expected_embedding = np.mean(
        (y_pred["embedding"] - y_pred["teacher_embedding"])[real] ** 2)
    expected_hidden = sum(
        np.mean((y_pred["hidden_states"][:, m] - y_pred["teacher_hidden_states"][:, m])[real]
                ** 2) for m in range(2))
    expected_attention = 0.0
    for m in range(2):
        for b, length in enumerate(LENGTHS):
            diff = (y_pred["attention_logits"][b, m, :, :length, :length]
                    - y_pred["teacher_attention_logits"][b, m, :, :length, :length])
            expected_attention += (diff ** 2).sum()
    expected_attention /= 4 * sum(length * length for length in LENGTHS)
    np.testing.assert_allclose(float(losses["embedding"]), expected_embedding, rtol=1e-4)
    np.testing.assert_allclose(float(losses["hidden"]), expected_hidden, rtol=1e-4)
    np.testing.assert_allclose(float(losses["attention"]), expected_attention, rtol=1e-4)
    assert min(expected_embedding, expected_hidden, expected_attention) > 1e-6


def _assert_teacher_frozen(distiller, teacher, x, y):
    teacher_ids = {id(v) for v in teacher.weights}
    assert teacher.trainable_weights == []
    assert not teacher_ids & {id(v) for v in distiller.trainable_weights}
    # Watched explicitly: a frozen variable is not watched by default, so only the
    # stop_gradient on the teacher's outputs keeps these gradients None.
    teacher_values = [v.value for v in teacher.weights]
    with tf.GradientTape() as tape:
        tape.watch(teacher_values)
        loss = distiller.compute_loss(x, y, distiller(x, training=True))
    trainable = [distiller.embedding_projection.kernel, distiller.hidden_projection.kernel,
                 distiller.backbone.token_embedding.embeddings,
                 distiller.backbone.transformer_layers[0]._self_attention_layer.query_dense.kernel]
    gradients = tape.gradient(loss, [*[v.value for v in trainable], *teacher_values])
    assert all(g is not None for g in gradients[:len(trainable)])
    assert all(g is None for g in gradients[len(trainable):])


def test_general_distillation_trains_the_student_only():
    teacher = BertPretrainer(BertBackbone(**TEACHER))
    student = TinyBertBackbone(**STUDENT)
    distiller = TinyBertGeneralDistiller(student, teacher=teacher)
    x = _batch(seed=1)
    y = {"mlm": np.zeros((BATCH, 3), "int64")}  # present in `mlm` batches, unused
    _assert_teacher_frozen(distiller, teacher, x, y)
    teacher_before = [np.array(v) for v in teacher.weights]
    distiller.compile(optimizer=keras.optimizers.Adam(3e-3))
    history = distiller.fit(x, y, epochs=10, verbose=0).history
    for term in ("loss", "loss_embedding", "loss_hidden", "loss_attention"):
        assert history[term][-1] < 0.8 * history[term][0], (term, history[term])
    for before, after in zip(teacher_before, teacher.weights):
        np.testing.assert_array_equal(before, np.asarray(after))
    print(f"tinybert general distillation loss {history['loss'][0]:.4f} -> "
          f"{history['loss'][-1]:.4f}")


def test_tiny_preset_distils_a_bert_mini_teacher():
    teacher = BertPretrainer(models.build("bert", "mini", vocabulary_size=VOCAB))
    student = models.build("tinybert", "tiny", vocabulary_size=VOCAB)
    distiller = TinyBertGeneralDistiller(student, teacher=teacher)
    assert distiller.teacher_layers == [2, 4]
    x = _batch()
    assert float(distiller.compute_loss(x, None, distiller(x))) > 0


def test_general_distiller_refuses_incompatible_teachers():
    teacher = BertPretrainer(BertBackbone(**TEACHER))
    with pytest.raises(ValueError, match="number of heads: teacher 4, student 2"):
        TinyBertGeneralDistiller(TinyBertBackbone(**{**STUDENT, "num_heads": 2}),
                                 teacher=teacher)
    with pytest.raises(ValueError, match="vocabulary"):
        TinyBertGeneralDistiller(TinyBertBackbone(**{**STUDENT, "vocabulary_size": 99}),
                                 teacher=teacher)
    with pytest.raises(TypeError, match="backbone"):
        TinyBertGeneralDistiller(TinyBertBackbone(**STUDENT), teacher=teacher.backbone)
    with pytest.raises(ValueError, match="layer_mapping"):
        TinyBertGeneralDistiller(TinyBertBackbone(**STUDENT), teacher=teacher,
                                 layer_mapping=[1, 2, 3])
    distiller = TinyBertGeneralDistiller(TinyBertBackbone(**STUDENT), teacher=teacher)
    with pytest.raises(ValueError, match="padding_mask"):
        distiller({"token_ids": _batch()["token_ids"]})


# --------------------------------------------------------------------------- task-specific


def _teacher_classifier(num_layers=4):
    teacher = BertClassifier(BertBackbone(**{**TEACHER, "num_layers": num_layers}),
                             num_classes=3, dropout=0.0)
    # A confident teacher, as a fine-tuned one is.
    kernel = teacher.output_dense.kernel
    kernel.assign(np.random.default_rng(5).normal(0, 2.0, kernel.shape).astype("float32"))
    return teacher


def test_task_distiller_losses_for_a_student_equal_to_the_teacher():
    teacher = _teacher_classifier(num_layers=2)
    student = _twin_student(teacher.backbone)
    distiller = TinyBertTaskDistiller(student, teacher=teacher, num_classes=3, dropout=0.0,
                                      temperature=2.0)
    _identity_projections(distiller)
    for ours, theirs in zip(distiller.classifier.output_dense.weights,
                            teacher.output_dense.weights):
        ours.assign(theirs)
    x = _classifier_inputs(_batch())
    y_pred = distiller(x, training=False)
    np.testing.assert_allclose(y_pred["logits"], y_pred["teacher_logits"], atol=1e-5)
    np.testing.assert_allclose(y_pred["logits"], distiller.classifier(x, training=False),
                               atol=1e-5)
    losses = distiller.intermediate_losses(x["padding_mask"], y_pred)
    assert max(abs(float(v)) for v in losses.values()) < 1e-8
    # Soft cross-entropy at its minimum: the teacher's entropy at temperature t.
    z = np.asarray(y_pred["teacher_logits"], "float64") / 2.0
    p = np.exp(z - z.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    entropy = -(p * np.log(p)).sum(-1).mean()
    np.testing.assert_allclose(float(distiller.prediction_loss(y_pred)), entropy, rtol=1e-4)
    assert entropy > 1e-3


@pytest.mark.dag  # the slow tier (conftest.py)
def test_task_distillation_trains_the_student_classifier(tmp_path):
    teacher = _teacher_classifier()
    student = TinyBertBackbone(**STUDENT)
    distiller = TinyBertTaskDistiller(student, teacher=teacher, num_classes=3, dropout=0.0)
    assert distiller.backbone is student and distiller.classifier.backbone is student
    assert distiller.teacher_layers == [2, 4]
    x = _classifier_inputs(_batch(seed=4))
    labels = (np.argmax(teacher(x, training=False), -1) + 1) % 3  # not the teacher's: metric only
    _assert_teacher_frozen(distiller, teacher, x, labels)
    teacher_before = [np.array(v) for v in teacher.weights]
    distiller.compile(optimizer=keras.optimizers.Adam(3e-3))
    history = distiller.fit(x, labels, epochs=10, verbose=0).history
    for term in ("loss", "loss_embedding", "loss_hidden", "loss_prediction"):
        assert history[term][-1] < history[term][0], (term, history[term])
    assert "accuracy" in history
    for before, after in zip(teacher_before, teacher.weights):
        np.testing.assert_array_equal(before, np.asarray(after))
    print(f"tinybert task distillation loss {history['loss'][0]:.4f} -> "
          f"{history['loss'][-1]:.4f}")
    # The released second stage, prediction layer only: the student's distribution moves to
    # the teacher's (the labels, which disagree with the teacher, play no part).
    def divergence():
        teacher_p = keras.ops.softmax(teacher(x, training=False))
        student_p = keras.ops.softmax(distiller.classifier(x, training=False))
        return float(np.sum(teacher_p * (np.log(teacher_p) - np.log(student_p))))

    before = divergence()
    distiller.intermediate_weight = 0.0
    distiller.compile(optimizer=keras.optimizers.Adam(1e-2))
    stage_two = distiller.fit(x, labels, epochs=30, verbose=0).history
    assert stage_two["loss_prediction"][-1] < stage_two["loss_prediction"][0]
    assert divergence() < 0.2 * before, (before, divergence())

    # The exported part: the student classifier, and the whole task model.
    path = str(tmp_path / "task_distiller.keras")
    distiller.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded, TinyBertTaskDistiller)
    assert loaded.get_config()["num_classes"] == 3 and loaded.teacher_layers == [2, 4]
    np.testing.assert_allclose(loaded.classifier(x), distiller.classifier(x), atol=1e-5)
    np.testing.assert_allclose(loaded(x)["teacher_logits"], teacher(x), atol=1e-5)
    classifier_path = str(tmp_path / "classifier.keras")
    distiller.classifier.save(classifier_path)
    np.testing.assert_allclose(keras.saving.load_model(classifier_path)(x),
                               distiller.classifier(x), atol=1e-5)


def test_task_distiller_refuses_a_teacher_with_other_classes():
    with pytest.raises(ValueError, match="predicts 3 classes, the student 2"):
        TinyBertTaskDistiller(TinyBertBackbone(**STUDENT), teacher=_teacher_classifier(),
                              num_classes=2)


def test_general_distiller_save_and_config_round_trip(tmp_path):
    teacher = BertPretrainer(BertBackbone(**TEACHER))
    distiller = TinyBertGeneralDistiller(TinyBertBackbone(**STUDENT), teacher=teacher,
                                         layer_mapping=[1, 4])
    config = distiller.get_config()
    assert config["layer_mapping"] == [1, 4]
    rebuilt = TinyBertGeneralDistiller.from_config(config)
    assert rebuilt.teacher_layers == [1, 4]
    path = str(tmp_path / "general.keras")
    distiller.save(path)
    loaded = keras.saving.load_model(path)
    x = _batch()
    for key, value in distiller(x, training=False).items():
        np.testing.assert_allclose(loaded(x, training=False)[key], value, atol=1e-5)
    assert loaded.teacher.trainable_weights == []
