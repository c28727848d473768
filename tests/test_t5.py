"""T5 (Raffel et al. 2020 §2.1): the paper's changes to the Transformer, checked on tiny
models: RMS norm without bias or centring, no biases anywhere, relative position buckets
(bidirectional / causal), one bias table per stack shared by its layers, no 1/sqrt(d)
scaling of the attention logits, T5 v1.0 (tied output rescaled by d_model^-0.5, ReLU)
against T5.1.1 (untied, gated GELU), and the presets' parameter counts."""

import numpy as np
import pytest
from keras import ops

from lmfactory import models
from lmfactory.models.t5 import T5Seq2SeqLM
from lmfactory.models.t5.t5_attention import T5Attention
from lmfactory.models.t5.t5_relative_position_bias import relative_position_bucket

TINY = dict(vocabulary_size=50, num_layers=2, num_heads=2, hidden_dim=8, intermediate_dim=16,
            max_sequence_length=16)


def _inputs(source=(5, 6, 7, 8, 9), target=(0, 11, 12, 13)):
    return {"encoder_token_ids": np.array([source], "int32"),
            "encoder_padding_mask": np.ones((1, len(source)), "int32"),
            "decoder_token_ids": np.array([target], "int32"),
            "decoder_padding_mask": np.ones((1, len(target)), "int32")}


def test_rms_norm_rescales_only_no_bias_no_centring():
    backbone = models.build("t5", "tiny", **TINY)
    norm = backbone.encoder.transformer_layers[0].self_attention_layer_norm
    assert [w.name for w in norm.weights] == ["scale"]  # no bias (beta)
    norm.scale.assign(np.linspace(0.5, 2.0, 8).astype("float32"))
    x = np.array([[3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0]], "float32")
    expected = x / np.sqrt(np.mean(x ** 2) + 1e-6) * np.linspace(0.5, 2.0, 8)
    np.testing.assert_allclose(np.asarray(norm(x)), expected, rtol=1e-5)
    # No mean subtraction: a constant input is not sent to zero, a shift changes the output.
    np.testing.assert_allclose(np.asarray(norm(np.full((1, 8), 3.0, "float32"))),
                               np.linspace(0.5, 2.0, 8)[None], rtol=1e-5)


def test_no_biases_anywhere():
    for preset in ("tiny", "v1_1_small"):
        backbone = models.build("t5", preset, **TINY)
        names = [w.path for w in backbone.weights]
        assert not [n for n in names if n.endswith("bias") or "/bias" in n], names
        kinds = {n.split("/")[-1] for n in names}
        assert kinds <= {"embeddings", "reverse_embeddings", "kernel", "scale"}, kinds


def test_bucket_values_bidirectional_and_causal():
    # relative position = key - query; 32 buckets up to distance 128 (§2.1).
    relative = np.array([0, -1, 1, -7, -8, -16, -127, -500, 7, 8, 500])
    bidirectional = relative_position_bucket(relative, True, 32, 128)
    assert np.asarray(bidirectional).tolist() == [0, 1, 17, 7, 8, 10, 15, 15, 23, 24, 31]
    relative = np.array([0, 5, -1, -15, -16, -32, -127, -128, -1000])
    causal = relative_position_bucket(relative, False, 32, 128)
    assert np.asarray(causal).tolist() == [0, 0, 1, 15, 16, 21, 31, 31, 31]


def test_one_relative_bias_per_stack_shared_by_its_layers():
    backbone = models.build("t5", "tiny", **TINY)
    tables = [w for w in backbone.weights if "relative_position_bias" in w.path]
    assert len(tables) == 2 and all(tuple(w.shape) == (32, 2) for w in tables)
    assert backbone.encoder.relative_position_bias.bidirectional
    assert not backbone.decoder.relative_position_bias.bidirectional
    for stack in (backbone.encoder, backbone.decoder):
        for layer in stack.transformer_layers:
            assert not [w for w in layer.weights if "relative" in w.path]
    # The one table reaches every layer: zeroing it changes the output of layer 2's
    # attention input too (checked end to end: the output changes).
    before = np.asarray(backbone(_inputs())["decoder_sequence_output"])
    backbone.decoder.relative_position_bias.embeddings.assign(np.zeros((32, 2), "float32"))
    after = np.asarray(backbone(_inputs())["decoder_sequence_output"])
    assert not np.allclose(before, after)


def test_attention_logits_are_not_scaled():
    attention = T5Attention(hidden_dim=4, num_heads=1, head_dim=4)
    x = np.random.default_rng(0).normal(size=(1, 3, 4)).astype("float32") * 3
    attention(x)
    for dense in (attention.query_dense, attention.key_dense, attention.value_dense,
                  attention.output_dense):
        dense.kernel.assign(np.eye(4, dtype="float32"))
    bias = np.array([[[[0.0, 1.0, -1.0], [0.5, 0.0, 0.0], [2.0, 0.0, 0.0]]]], "float32")
    logits = x[0] @ x[0].T + bias[0, 0]  # q.k, no 1/sqrt(4)
    weights = np.exp(logits - logits.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    np.testing.assert_allclose(np.asarray(attention(x, bias=bias))[0], weights @ x[0],
                               rtol=1e-4, atol=1e-5)


def test_v1_0_ties_and_rescales_the_output_v1_1_does_not():
    tied = models.build("t5", "tiny", **TINY)
    untied = models.build("t5", "v1_1_small", **TINY)
    assert tied.feed_forward == "relu" and untied.feed_forward == "gated-gelu"
    assert untied.encoder.transformer_layers[0].feed_forward.gate_dense is not None
    assert tied.encoder.transformer_layers[0].feed_forward.gate_dense is None
    assert not any("reverse_embeddings" in w.path for w in tied.weights)
    assert any("reverse_embeddings" in w.path for w in untied.weights)
    x = _inputs()
    for backbone, scale in ((tied, 8 ** -0.5), (untied, 1.0)):
        hidden = np.asarray(backbone(x)["decoder_sequence_output"])
        output = (backbone.token_embedding.embeddings if backbone.tie_embeddings
                  else ops.transpose(backbone.token_embedding.reverse_embeddings))
        expected = scale * hidden @ np.asarray(output).T
        np.testing.assert_allclose(np.asarray(T5Seq2SeqLM(backbone)(x)), expected,
                                   rtol=1e-4, atol=1e-5)


def _count(config):
    """The parameters of a T5 config counted from the paper's layout: the shared embedding
    (plus the untied output matrix), per encoder block self-attention (4 d x inner) and the
    feed-forward (2 or 3 d x d_ff) with 2 RMS scales, per decoder block one more attention
    and scale, a bias table (buckets x heads) and a final scale per stack."""
    d, ff, layers = config["hidden_dim"], config["intermediate_dim"], config["num_layers"]
    inner = config["num_heads"] * config.get("head_dim", d // config["num_heads"])
    feed_forward = (3 if config.get("feed_forward") == "gated-gelu" else 2) * d * ff
    embedding = config["vocabulary_size"] * d * (1 if config.get("tie_embeddings", True) else 2)
    encoder = layers * (4 * d * inner + feed_forward + 2 * d)
    decoder = layers * (8 * d * inner + feed_forward + 3 * d)
    return embedding + encoder + decoder + 2 * (32 * config["num_heads"] + d)


@pytest.mark.dag  # the slow tier (conftest.py)
def test_preset_parameter_counts_match_the_published_models():
    # Published: t5-small 60.5M, t5-base 222.9M, t5-v1_1-small 77.0M (vocabulary 32,128).
    # The layout count is checked against the built small model, then used
    # for base (building 223M weights takes longer than the rest of this file; the v1.1 layout is
    # checked at tiny size).
    presets = models.get("t5").presets
    assert models.build("t5", "small").count_params() == _count(presets["small"])
    v1_1 = dict(presets["v1_1_small"], **TINY, head_dim=3)  # inner width 6 != d_model 8
    assert models.build("t5", "v1_1_small", **v1_1).count_params() == _count(v1_1)
    assert _count(presets["small"]) == 60_506_624
    assert _count(presets["base"]) == 222_903_552
    assert _count(presets["v1_1_small"]) == 76_961_152


def test_bad_config_is_refused():
    with pytest.raises(ValueError, match="feed_forward must be one of"):
        models.build("t5", "tiny", **dict(TINY, feed_forward="swish"))
    with pytest.raises(ValueError, match="divisible"):
        models.build("t5", "tiny", **dict(TINY, num_heads=3))
