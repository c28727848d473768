"""Tests of lmfactory.models.rnnsearch (Bahdanau et al. 2015): the alignment (three
similarities, masking), the bidirectional annotations, s_0, cached decoding, the seq2seq
head's loss and length-normalised beam search."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from lmfactory import models
from lmfactory.models.rnnsearch import RNNsearchBackbone
from lmfactory.models.tasks.beam_search import LengthNormalizedBeamSampler, length_penalty
from lmfactory.models.tasks.seq2seq_lm import Seq2SeqLM

VOCAB = 40
START, END = 1, 2
LENGTHS = (6, 4)


def _tiny(**overrides):
    config = dict(vocabulary_size=VOCAB, hidden_dim=12, embedding_dim=8,
                  max_sequence_length=10)
    config.update(overrides)
    return models.build("rnnsearch", "small", **config)


def _perturb(model, seed=0, scale=0.4):
    """Weights large enough that the attention is far from uniform and greedy decoding
    does not collapse onto one token."""
    rng = np.random.default_rng(seed)
    model.set_weights([rng.normal(0.0, scale, w.shape).astype("float32") for w in
                       model.get_weights()])


def _inputs(seed=0, lengths=LENGTHS, target_length=5):
    rng = np.random.default_rng(seed)
    source = max(lengths)
    mask = (np.arange(source)[None, :] < np.array(lengths)[:, None]).astype("int32")
    return {"encoder_token_ids": (rng.integers(3, VOCAB, (2, source)) * mask).astype("int32"),
            "encoder_padding_mask": mask,
            "decoder_token_ids": rng.integers(3, VOCAB, (2, target_length)).astype("int32"),
            "decoder_padding_mask": np.ones((2, target_length), "int32")}


@pytest.fixture(scope="module", params=[("gru", "additive"), ("lstm", "dot"),
                                        ("gru", "cosine")], ids=lambda p: "-".join(p))
def model(request):
    keras.utils.set_random_seed(3)
    cell_type, attention = request.param
    lm = Seq2SeqLM(_tiny(cell_type=cell_type, attention=attention))
    _perturb(lm)
    return lm


def test_registered_as_the_first_encoder_decoder():
    arch = models.get("rnnsearch")
    assert arch.family == "encoder_decoder" and arch.objectives == ()
    assert arch.head("seq2seq_lm") is Seq2SeqLM
    paper = models.build("rnnsearch", "rnnsearch", vocabulary_size=VOCAB).get_config()
    assert (paper["hidden_dim"], paper["embedding_dim"], paper["attention_dim"],
            paper["maxout_dim"]) == (1000, 620, 1000, 500)


def test_output_shapes_and_attention_is_a_distribution_over_real_words(model):
    outputs = model.backbone(_inputs())
    assert tuple(outputs["encoder_sequence_output"].shape) == (2, 6, 24)  # [fwd; bwd]
    assert tuple(outputs["decoder_sequence_output"].shape) == (2, 5, 12)  # s_i
    assert tuple(outputs["decoder_readout"].shape) == (2, 5, 6)  # maxout l = n / 2
    weights = np.asarray(outputs["attention_weights"])
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)
    np.testing.assert_array_equal(weights[1, :, LENGTHS[1]:], 0.0)
    assert weights[0].std() > 1e-3  # not uniform
    assert tuple(model(_inputs()).shape) == (2, 5, VOCAB)


def test_padded_source_words_change_nothing(model):
    inputs = _inputs()
    changed = dict(inputs, encoder_token_ids=inputs["encoder_token_ids"].copy())
    changed["encoder_token_ids"][1, LENGTHS[1]:] = 7
    np.testing.assert_allclose(np.asarray(model(inputs)), np.asarray(model(changed)),
                               atol=1e-5)


def test_the_three_similarities_score_differently():
    inputs = _inputs()
    weights = {}
    for attention in ("additive", "dot", "cosine"):
        keras.utils.set_random_seed(1)
        backbone = _tiny(attention=attention)
        _perturb(backbone, seed=2)
        weights[attention] = np.asarray(backbone(inputs)["attention_weights"])
    for first, second in (("additive", "dot"), ("dot", "cosine"), ("additive", "cosine")):
        assert np.abs(weights[first] - weights[second]).max() > 1e-3, (first, second)
    # Cosine scores lie in [-beta, beta]: the weights' ratios are bounded by exp(2 beta).
    alignment = _tiny(attention="cosine").decoder.alignment
    beta = float(alignment.sharpness.numpy())
    keys = tf.random.normal((1, 5, alignment.attention_dim))
    scores = np.asarray(alignment.scores(tf.random.normal((1, 12)), keys))
    assert np.all(np.abs(scores) <= abs(beta) + 1e-5)


def test_additive_alignment_is_the_papers_formula():
    keras.utils.set_random_seed(4)
    backbone = _tiny()
    _perturb(backbone, seed=5)
    alignment = backbone.decoder.alignment
    query, annotations = tf.random.normal((2, 12)), tf.random.normal((2, 3, 24))
    w_a = alignment.query_projection.kernel.numpy()
    u_a = alignment.key_projection.kernel.numpy()
    v_a = alignment.score_vector.numpy()
    expected = np.tanh((query.numpy() @ w_a)[:, None, :] + annotations.numpy() @ u_a) @ v_a
    scores = alignment.scores(query, alignment.keys(annotations))
    np.testing.assert_allclose(np.asarray(scores), expected, rtol=1e-4, atol=1e-5)


def test_annotations_are_bidirectional_and_s0_reads_the_backward_first_state():
    keras.utils.set_random_seed(6)
    backbone = _tiny()
    _perturb(backbone, seed=7)
    inputs = _inputs(lengths=(6, 6))
    changed = dict(inputs, encoder_token_ids=inputs["encoder_token_ids"].copy())
    changed["encoder_token_ids"][:, -1] = 3 + (changed["encoder_token_ids"][:, -1] - 2) % 30
    before = np.asarray(backbone(inputs)["encoder_sequence_output"])
    after = np.asarray(backbone(changed)["encoder_sequence_output"])
    # A later word changes h_1 through the backward half only.
    np.testing.assert_allclose(before[:, 0, :12], after[:, 0, :12], atol=1e-6)
    assert np.abs(before[:, 0, 12:] - after[:, 0, 12:]).max() > 1e-3
    state = backbone.initial_state(2, 4, encoder_token_ids=inputs["encoder_token_ids"],
                                   encoder_padding_mask=inputs["encoder_padding_mask"])
    dense = backbone.initial_state_dense
    expected = np.tanh(before[:, 0, 12:] @ dense.kernel.numpy() + dense.bias.numpy())
    np.testing.assert_allclose(np.asarray(state["decoder_states"][0][:, 0]), expected,
                               atol=1e-5)


def _greedy_without_state(lm, inputs, max_length):
    """The reference: every step runs the whole target prefix through the model."""
    rows = []
    for row in range(2):
        source = {key: inputs[key][row:row + 1]
                  for key in ("encoder_token_ids", "encoder_padding_mask")}
        ids = [START]
        while len(ids) < max_length:
            target = np.array([ids], "int32")
            logits = lm({**source, "decoder_token_ids": target,
                         "decoder_padding_mask": np.ones_like(target)})
            ids.append(int(np.argmax(np.asarray(logits)[0, -1])))
        rows.append(ids)
    return rows


def test_cached_greedy_equals_recomputing_the_prefix(model):
    inputs = _inputs(seed=8)
    context = {key: inputs[key] for key in ("encoder_token_ids", "encoder_padding_mask")}
    prompt = np.full((2, 1), START, "int32")
    output = model.generate_ids(prompt, max_length=8, state_context=context)
    ids = np.asarray(output["token_ids"])
    assert ids.tolist() == _greedy_without_state(model, inputs, 8)
    assert len(set(ids[:, 1:].ravel().tolist())) > 2


def test_decoding_needs_a_source():
    with pytest.raises(ValueError, match="source sentence"):
        Seq2SeqLM(_tiny()).generate_ids(np.ones((1, 1), "int32"), max_length=4)


def test_loss_ignores_padded_targets_and_training_lowers_it():
    keras.utils.set_random_seed(9)
    lm = Seq2SeqLM(_tiny())
    inputs = _inputs(seed=10)
    targets = np.roll(inputs["decoder_token_ids"], -1, axis=1)
    weights = np.array([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]], "float32")
    logits = lm(inputs)
    loss = lm.compute_loss(y=targets, y_pred=logits, sample_weight=weights)
    changed = targets.copy()
    changed[1, 2:] = 5
    np.testing.assert_allclose(float(loss), float(lm.compute_loss(
        y=changed, y_pred=logits, sample_weight=weights)), rtol=1e-6)
    lm.compile(optimizer=keras.optimizers.Adam(0.05))
    history = lm.fit(inputs, targets, sample_weight=weights, epochs=15, verbose=0)
    assert history.history["loss"][-1] < 0.5 * history.history["loss"][0]


# --- Length-normalised beam search, on a model given as a table of next-token choices ---
# Tokens: 0 filler, 1 start, 2 end, 3 "a". After the start token: end (0.5) or a (0.45);
# after "a": a (0.98); after "a a": end (0.98). So [end] scores log 0.5 = -0.69 and
# [a, a, end] log 0.45 + 2 log 0.98 = -0.84: the short one wins on the raw sum, the long
# one once divided by the length penalty (alpha = 1: -0.69 / 1 vs -0.84 / 1.33 = -0.63).
def _table_next(prompt, cache, index):
    previous = tf.gather(prompt, index - 1, axis=1)
    before = tf.gather(prompt, tf.maximum(index - 2, 0), axis=1)
    after_start = tf.constant([0.05, 0.0, 0.5, 0.45])
    after_a = tf.constant([0.01, 0.0, 0.01, 0.98])
    after_aa = tf.constant([0.01, 0.0, 0.98, 0.01])
    probs = tf.where((previous == 1)[:, None], after_start,
                     tf.where((before == 3)[:, None], after_aa, after_a))
    logits = tf.math.log(probs + 1e-12)
    return logits, tf.zeros_like(logits), cache


@pytest.mark.parametrize("alpha, expected", [(0.0, [1, 2, 0, 0, 0]), (1.0, [1, 3, 3, 2, 0])])
def test_length_normalisation_prefers_the_longer_translation(alpha, expected):
    sampler = LengthNormalizedBeamSampler(num_beams=2, alpha=alpha)
    prompt = tf.constant([[1, 0, 0, 0, 0]], "int32")
    mask = tf.constant([[True, False, False, False, False]])
    ids = sampler(_table_next, prompt, index=1, mask=mask, stop_token_ids=[2])
    generated = np.asarray(ids)[0].tolist()
    end = generated.index(2)
    assert generated[:end + 1] == expected[:expected.index(2) + 1]
    np.testing.assert_allclose(float(length_penalty(3, 1.0)), 8 / 6)


def test_beam_search_through_the_model_keeps_sources_apart(model):
    inputs = _inputs(seed=11)
    beam = model.translate_ids(inputs["encoder_token_ids"], inputs["encoder_padding_mask"],
                               START, END, max_length=8, num_beams=3)
    ids = np.asarray(beam["token_ids"])
    assert ids.shape == (2, 8) and (ids[:, 0] == START).all()
    single = model.translate_ids(inputs["encoder_token_ids"][1:],
                                 inputs["encoder_padding_mask"][1:], START, END,
                                 max_length=8, num_beams=3)
    np.testing.assert_array_equal(np.asarray(single["token_ids"])[0], ids[1])
    greedy = model.translate_ids(inputs["encoder_token_ids"], inputs["encoder_padding_mask"],
                                 START, END, max_length=8, num_beams=1)
    assert np.asarray(greedy["token_ids"]).shape == (2, 8)


def test_config_round_trip():
    backbone = _tiny(cell_type="lstm", attention="cosine")
    clone = RNNsearchBackbone.from_config(backbone.get_config())
    assert clone.get_config() == backbone.get_config()
    assert len(clone.weights) == len(backbone.weights)
