"""XLNet (Yang et al. 2019): what the conformance harness cannot know. Two-stream attention
and the permutation mask (§2.3), the gradient test of the issue (the query stream at a
target never depends on its own token or on later tokens of the factorisation order),
relative segment encodings (§2.5), the relative shift (§2.4), memory, the permutation-LM
data (§2.3 partial prediction, span targets), the classification layout and head, parameter
counts and numeric parity with Hugging Face's XLNetLMHeadModel."""

import json
import random

import keras
import numpy as np
import pytest
import tensorflow as tf

import parity
from lmfactory import models
from lmfactory.components.pretraining_data import objectives, permutation_lm
from lmfactory.components.pretraining_data.masking import BertVocabulary
from lmfactory.models.xlnet import XLNetClassifier, XLNetPreprocessor, XLNetPretrainer
from lmfactory.models.xlnet.xlnet_converters import (backbone_config_from_huggingface,
                                                     from_huggingface,
                                                     pretrainer_from_huggingface)
from lmfactory.models.xlnet.xlnet_relative_attention import relative_shift

VOCAB = 50
TINY = dict(vocabulary_size=VOCAB, num_layers=2, num_heads=2, hidden_dim=16,
            intermediate_dim=32, dropout=0.0)


@pytest.fixture(scope="module")
def backbone():
    keras.utils.set_random_seed(3)
    return models.build("xlnet", "tiny", **TINY)


def _inputs(token_ids, segment_ids=None, padding_mask=None):
    token_ids = np.asarray(token_ids, "int32")
    return {"token_ids": token_ids,
            "padding_mask": np.ones_like(token_ids) if padding_mask is None
            else np.asarray(padding_mask, "int32"),
            "segment_ids": np.zeros_like(token_ids) if segment_ids is None
            else np.asarray(segment_ids, "int32")}


def test_registry_record():
    arch = models.get("xlnet")
    assert arch.family == "encoder" and not arch.causal
    assert arch.objectives == ("permutation_lm",)
    assert arch.tokenizer_kind == "sentencepiece"
    assert arch.special_tokens["cls"] == "<cls>" and arch.special_tokens["sep"] == "<sep>"
    assert arch.hf_model_types == ("xlnet",)
    assert not objectives.get("permutation_lm").causal
    for preset, (layers, hidden, heads) in {"base": (12, 768, 12),
                                            "large": (24, 1024, 16)}.items():
        config = arch.presets[preset]
        assert (config["num_layers"], config["hidden_dim"], config["num_heads"]) == \
            (layers, hidden, heads)
        assert config["vocabulary_size"] == 32000
        assert config["intermediate_dim"] == 4 * hidden


def test_bad_inputs_fail_clearly(backbone):
    x = _inputs([[1, 2, 3]])
    with pytest.raises(ValueError, match="permutation_mask"):
        backbone.call_two_stream(x, permutation_mask=np.zeros((1, 3), "float32"))
    with pytest.raises(ValueError, match="target_mapping"):
        backbone.call_two_stream(x, target_mapping=np.zeros((1, 2, 4), "float32"))
    with pytest.raises(ValueError, match="activation"):
        models.build("xlnet", "tiny", **dict(TINY, activation="swish"))


def test_relative_shift_matches_direct_indexing():
    """§2.4 / Transformer-XL App. B: after the shift, entry [i, j] is the score of the
    relative distance (i + M) - j, i.e. column T - i + j of the unshifted scores, whose
    column r holds distance M + T - r."""
    rng = np.random.default_rng(0)
    for memory, length in ((0, 5), (3, 4)):
        key_length = memory + length
        scores = rng.normal(size=(2, 3, length, key_length + length)).astype("float32")
        shifted = keras.ops.convert_to_numpy(relative_shift(scores, key_length))
        assert shifted.shape == (2, 3, length, key_length)
        for i in range(length):
            for j in range(key_length):
                np.testing.assert_array_equal(shifted[:, :, i, j],
                                              scores[:, :, i, length - i + j])
                distance = key_length - (length - i + j)
                assert distance == (i + memory) - j


def test_clamp_len_and_bi_data():
    """Distances beyond clamp_len share one encoding; with bi_data the second half of the
    batch reads the distances negated (the reference's options)."""
    from lmfactory.models.xlnet.xlnet_attention_inputs import (XLNetAttentionInputs,
                                                               relative_positions)

    ones = np.ones((2, 4), "int32")
    plain = XLNetAttentionInputs(8)(ones, ones)["position_encoding"]
    clamped = XLNetAttentionInputs(8, clamp_len=2)(ones, ones)["position_encoding"]
    distances = keras.ops.convert_to_numpy(relative_positions(4, 4))
    assert distances.tolist() == [4, 3, 2, 1, 0, -1, -2, -3]
    clamped = keras.ops.convert_to_numpy(clamped)[0]
    np.testing.assert_allclose(clamped[0], clamped[2])  # 4 and 3 read as 2
    np.testing.assert_allclose(clamped[7], clamped[6])  # -3 reads as -2
    np.testing.assert_allclose(clamped[3:7], keras.ops.convert_to_numpy(plain)[0, 3:7])
    both = keras.ops.convert_to_numpy(
        XLNetAttentionInputs(8, bi_data=True)(ones, ones)["position_encoding"])
    np.testing.assert_allclose(both[0], keras.ops.convert_to_numpy(plain)[0])
    negated = np.concatenate([np.sin(-distances[:, None] * _inverse(8)),
                              np.cos(-distances[:, None] * _inverse(8))], axis=-1)
    np.testing.assert_allclose(both[1], negated, atol=1e-6)


def _inverse(hidden):
    return 1.0 / 10000 ** (np.arange(0, hidden, 2) / hidden)


def test_relative_segment_encoding_depends_only_on_same_or_different():
    """§2.5: s_ij is s+ or s- by whether i and j share a segment, not which segments."""
    keras.utils.set_random_seed(4)
    backbone = models.build("xlnet", "tiny", **dict(TINY, num_layers=1))
    for layer in backbone.transformer_layers:  # make the segment term large
        attention = layer.attention
        rng = np.random.default_rng(0)
        attention.segment_embedding.assign(rng.normal(size=(2, 2, 8)).astype("float32"))
        attention.r_s_bias.assign(rng.normal(size=(2, 8)).astype("float32"))
    ids = [[7, 8, 9, 10, 11, 12]]
    out = lambda segments: backbone(_inputs(ids, segments))["sequence_output"]  # noqa: E731
    base = out([[0, 0, 0, 1, 1, 2]])
    np.testing.assert_allclose(out([[5, 5, 5, 3, 3, 0]]), base, atol=1e-5)
    np.testing.assert_allclose(out([[1, 1, 1, 0, 0, 4]]), base, atol=1e-5)
    assert np.abs(out([[0, 0, 1, 1, 1, 2]]) - base).max() > 1e-4  # 100x the tolerance above
    # One segment everywhere is "same" everywhere: a constant per query row, so the
    # segment term cancels in the softmax (Hugging Face without token_type_ids).
    np.testing.assert_allclose(out([[3] * 6]), out([[0] * 6]), atol=1e-5)


def _drawn(length, is_target, functional=None, seed=(0, 0)):
    token_ids = tf.constant([list(range(10, 10 + length))], tf.int32)
    functional = tf.zeros((1, length), tf.bool) if functional is None else \
        tf.constant([functional])
    return permutation_lm.permutation_inputs(token_ids, tf.ones((1, length), tf.bool),
                                             tf.constant([is_target]), functional,
                                             num_predict=4, seed=seed)


def test_permutation_mask_semantics(backbone):
    """§2.3: content h_z(t) sees x_z(<=t), query g_z(t) sees x_z(<t); the non-target tokens
    come first in the order, targets (the last 1/K) after them in a random order."""
    is_target = [False, True, False, True, True, False, True, False]
    functional = [False] * 6 + [True, True]
    drawn = _drawn(8, is_target, functional, seed=(5, 0))
    mask = drawn["permutation_mask"].numpy()[0]
    ordered = np.array([t or f for t, f in zip(is_target, functional)])
    targets = np.array(is_target) & ~np.array(functional)  # functional tokens never targets
    extras = backbone.attention_inputs(np.ones((1, 8), "int32"), np.zeros((1, 8), "int32"),
                                       permutation_mask=mask[None])
    content = keras.ops.convert_to_numpy(extras["content_allowed"])[0]
    query = keras.ops.convert_to_numpy(extras["query_allowed"])[0]
    assert np.all(np.diag(content) == 1)  # content sees itself
    assert np.all(np.diag(query)[targets] == 0)  # a target's query stream does not
    # The mask is a total order's "earlier than" relation on the ordered tokens: the one
    # with r predecessors comes r-th, and its predecessors are exactly those before it.
    before = {i: {j for j in np.flatnonzero(ordered) if j != i and query[i, j]}
              for i in np.flatnonzero(ordered)}
    order = sorted(before, key=lambda i: len(before[i]))
    for rank, i in enumerate(order):
        assert before[i] == set(order[:rank])
        expected_content = before[i] | {i} | set(np.flatnonzero(~ordered))
        assert set(np.flatnonzero(content[i])) == expected_content
        assert query[i, i] == (0 if targets[i] else 1)  # a functional token sees itself
    for i in range(8):  # everyone sees every non-target token; non-targets see no target
        assert all(query[i, j] == 1 for j in np.flatnonzero(~ordered))
        if not ordered[i]:
            assert not any(query[i, j] for j in np.flatnonzero(ordered))
    # Target mapping: the targets in position order, zero rows after them.
    mapping = drawn["target_mapping"].numpy()[0]
    assert [int(np.argmax(row)) for row in mapping[:3]] == [1, 3, 4]
    assert mapping[3].sum() == 0 and drawn["target_weights"].numpy()[0].tolist() == \
        [1, 1, 1, 0]
    assert drawn["target_ids"].numpy()[0].tolist()[:3] == [11, 13, 14]


def test_query_stream_gradient(backbone):
    """The issue's test: through both layers, the query-stream output at a target has zero
    gradient w.r.t. its own token's embedding and every token later in the factorisation
    order, a non-zero one w.r.t. earlier tokens, while the content stream at that position
    depends on its own token."""
    length = 8
    is_target = [False, True, False, True, True, False, True, False]
    drawn = _drawn(length, is_target, seed=(11, 0))
    mask = drawn["permutation_mask"]
    ranks = {i: int(length - 1 - mask.numpy()[0, i].sum()) for i in range(length)}
    ids = np.arange(10, 10 + length, dtype="int32")[None]  # distinct: one table row each
    x = _inputs(ids, [[0] * 4 + [1] * 4])
    table = backbone.token_embedding.embeddings
    probe = tf.constant(np.random.default_rng(0).normal(size=(16,)), tf.float32)
    for k, position in enumerate(np.flatnonzero(is_target)):
        with tf.GradientTape(persistent=True) as tape:
            out = backbone.call_two_stream(x, permutation_mask=mask,
                                           target_mapping=drawn["target_mapping"])
            query = tf.reduce_sum(out["query_output"][0, k] * probe)
            content = tf.reduce_sum(out["sequence_output"][0, position] * probe)
        query_grad = tf.convert_to_tensor(tape.gradient(query, table)).numpy()
        content_grad = tf.convert_to_tensor(tape.gradient(content, table)).numpy()
        row = lambda p: ids[0, p]  # noqa: E731
        assert np.abs(query_grad[row(position)]).max() == 0.0
        assert np.abs(content_grad[row(position)]).max() > 1e-6
        for other in range(length):
            later = is_target[other] and ranks[other] > ranks[position]
            if later:
                assert np.abs(query_grad[row(other)]).max() == 0.0, (position, other)
            elif other != position:  # earlier targets and every non-target
                assert np.abs(query_grad[row(other)]).max() > 1e-8, (position, other)


def test_memory_extends_the_context(backbone):
    """§2.4: the memory of segment 1 is what segment 2 attends to besides itself; without
    gradient; with memory_length the newest states are kept."""
    first, second = _inputs([[3, 4, 5, 6]]), _inputs([[7, 8, 9]])
    out1 = backbone.call_two_stream(first)
    out2 = backbone.call_two_stream(second, memory=out1["memory"])
    alone = backbone.call_two_stream(second)
    assert len(out1["memory"]) == 2 and out1["memory"][0].shape == (1, 4, 16)
    assert out2["memory"][0].shape == (1, 7, 16)
    assert np.abs(out2["sequence_output"] - alone["sequence_output"]).max() > 1e-4
    short = models.build("xlnet", "tiny", **dict(TINY, memory_length=2))
    assert short.call_two_stream(first)["memory"][1].shape == (1, 2, 16)


def test_classifier_reads_the_last_real_token(backbone):
    classifier = XLNetClassifier(backbone, num_classes=3, dropout=0.0)
    left = _inputs([[0, 0, 5, 6, 7, 4, 3]], [[0, 0, 0, 0, 0, 0, 2]],
                   [[0, 0, 1, 1, 1, 1, 1]])
    hidden = backbone(left)["sequence_output"][:, -1]
    expected = classifier.output_dense(classifier.summary_dense(hidden))
    np.testing.assert_allclose(classifier(left), expected, atol=1e-5)
    right = _inputs([[5, 6, 7, 4, 3, 0, 0]], [[0, 0, 0, 0, 2, 0, 0]],
                    [[1, 1, 1, 1, 1, 0, 0]])
    np.testing.assert_allclose(classifier(right), classifier(left), atol=1e-5)


def test_preprocessor_matches_reference_layout():
    """A <sep> B <sep> <cls>, left padding, segment ids 0 / 1 / 2 (the reference tokenizer's
    ids and token types of the fixture's pairs)."""
    expected = parity.tokenizer_expectations("xlnet")
    config = json.loads((parity.fixture_dir("xlnet") / "tokenizer_config.json").read_text())
    ids = {entry["content"]: int(i) for i, entry in config["added_tokens_decoder"].items()}
    sep, cls, pad = ids["<sep>"], ids["<cls>"], ids["<pad>"]
    length = max(len(ids) for ids in expected["pair_ids"]) + 3
    packer = XLNetPreprocessor(sequence_length=length, sep_token_id=sep, cls_token_id=cls,
                               pad_token_id=pad)
    for pair_ids, types in zip(expected["pair_ids"], expected["pair_token_type_ids"]):
        first_sep = pair_ids.index(sep)
        a, b = pair_ids[:first_sep], pair_ids[first_sep + 1:-2]
        out = packer(([a], [b]))
        pad_count = length - len(pair_ids)
        assert out["token_ids"].numpy()[0].tolist() == [pad] * pad_count + pair_ids
        assert out["padding_mask"].numpy()[0].tolist() == [0] * pad_count + [1] * len(
            pair_ids)
        assert out["segment_ids"].numpy()[0, pad_count:].tolist() == types


def _vocabulary():
    tokens = ["<pad>", "<unk>", "<cls>", "<sep>", "<mask>"] + [
        ("\u2581w" if i % 3 == 0 else "p") + str(i) for i in range(40)]
    return BertVocabulary.from_tokens(tokens, {"pad": "<pad>", "unk": "<unk>", "cls": "<cls>",
                                               "sep": "<sep>", "mask": "<mask>"},
                                      kind="sentencepiece")


def test_span_targets_and_layout():
    """§2.3 partial prediction: ~L/K targets (K = 6) in spans of whole words, never <sep> /
    <cls>; records laid out as A <sep> B <sep> <cls> with segment ids 0, 1, 2."""
    vocab = _vocabulary()
    rng = random.Random(0)
    documents = [[[5 + (i * 7 + j) % 40 for j in range(9)] for i in range(30)]]
    instances, stats = permutation_lm.build_instances(documents, vocab, 64, 20, rng)
    assert stats["instances"] == len(instances) > 3 and 0 < stats["random_b"] < len(instances)
    starts = [t not in vocab.continuation_ids for t in range(60)]
    for tokens, segments, targets in instances:
        assert tokens[-2:] == [vocab.sep_id, vocab.cls_id] and len(tokens) <= 64
        first_sep = tokens.index(vocab.sep_id)
        assert segments == [0] * (first_sep + 1) + [1] * (len(tokens) - first_sep - 2) + [2]
        assert sum(targets) == min(20, round(len(tokens) / 6))
        assert not any(t for t, token in zip(targets, tokens)
                       if token in (vocab.sep_id, vocab.cls_id))
    # Span sampling alone (no top-up needed when the goal is small): spans start on words.
    mask = permutation_lm.sample_spans([True, False, False] * 30, 12, random.Random(1))
    assert sum(mask) == 12
    begins = [i for i in range(90) if mask[i] and (i == 0 or not mask[i - 1])]
    assert all(i % 3 == 0 for i in begins[:-1])


def test_objective_records_to_batches(tmp_path):
    """Beam records -> tf.data batches: the order is redrawn on every read, targets and
    their ids fixed."""
    from lmfactory.components.pretraining_data import features

    vocab = _vocabulary()
    config = features.resolve_config({"objective": "permutation_lm", "max_seq_length": 32,
                                      "max_predictions_per_seq": 6})
    config["special_token_ids"] = {"cls": vocab.cls_id, "sep": vocab.sep_id}
    documents = [[[5 + (i * 5 + j) % 40 for j in range(7)] for i in range(12)]]
    records, stats = permutation_lm.shard_examples(documents, vocab, config, (1, "train", 0))
    path = str(tmp_path / "r.gz")
    with tf.io.TFRecordWriter(path, options="GZIP") as writer:
        for record in records:
            writer.write(record)
    # Two epochs of the same records through one iterator (as training reads them).
    data = features.make_dataset(path, config, batch_size=len(records), shuffle=False,
                                 repeat=True)
    (x, y, weights), (x2, y2, _) = list(data.take(2))
    assert x["permutation_mask"].shape == (len(records), 32, 32)
    assert x["target_mapping"].shape == (len(records), 6, 32)
    np.testing.assert_array_equal(y, y2)
    assert not np.array_equal(x["permutation_mask"], x2["permutation_mask"])
    picked = np.einsum("bkt,bt->bk", x["target_mapping"].numpy(),
                       x["token_ids"].numpy().astype("float32"))
    np.testing.assert_array_equal(picked * weights.numpy(), y.numpy() * weights.numpy())


def test_pretrainer_loss_and_tied_output(backbone):
    pretrainer = XLNetPretrainer(backbone)
    x = _inputs([[5, 6, 7, 8, 9, 3, 2]])
    drawn = _drawn(7, [False, True, False, True, False, False, False])
    x.update(permutation_mask=drawn["permutation_mask"], target_mapping=drawn["target_mapping"])
    logits = pretrainer(x).numpy()
    query = backbone.call_two_stream(x, permutation_mask=x["permutation_mask"],
                                     target_mapping=x["target_mapping"])["query_output"]
    table = backbone.token_embedding.embeddings.numpy()
    np.testing.assert_allclose(logits, query.numpy() @ table.T, atol=1e-5)  # bias starts 0
    y, w = drawn["target_ids"].numpy(), drawn["target_weights"].numpy()
    loss = pretrainer.compute_loss(x, y, logits, w)
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    nll = -np.take_along_axis(log_probs, y[..., None], -1)[..., 0]
    np.testing.assert_allclose(loss, (nll * w).sum() / (w.sum() + 1e-5), rtol=1e-5)


def test_huggingface_parity():
    inputs, expected, folder = parity.load_fixture("xlnet")
    pretrainer = pretrainer_from_huggingface(str(folder))
    backbone = pretrainer.backbone
    mask = inputs["attention_mask"]
    x = _inputs(inputs["input_ids"], inputs["token_type_ids"], mask)
    errors = {}
    sequence = backbone(x)["sequence_output"]
    errors["content"] = parity.assert_close_on_tokens(sequence, expected["last_hidden_state"],
                                                      mask)
    errors["no_segments"] = parity.assert_close_on_tokens(
        backbone(dict(x, segment_ids=np.zeros_like(mask)))["sequence_output"],
        expected["last_hidden_state_no_segments"], mask)
    logits = backbone.token_embedding(sequence, reverse=True) + pretrainer.lm_bias
    errors["lm_logits"] = parity.assert_close_on_tokens(logits, expected["lm_logits"], mask)
    streams = backbone.call_two_stream(x, permutation_mask=inputs["perm_mask"],
                                       target_mapping=inputs["target_mapping"])
    errors["perm_content"] = parity.assert_close_on_tokens(
        streams["sequence_output"], expected["content_hidden_state"], mask)
    errors["query"] = parity.assert_close(streams["query_output"],
                                          expected["query_hidden_state"])
    errors["query_logits"] = parity.assert_close(
        pretrainer(dict(x, permutation_mask=inputs["perm_mask"],
                        target_mapping=inputs["target_mapping"])),
        expected["query_lm_logits"])
    first = backbone.call_two_stream(_inputs(inputs["memory_input_ids"]))
    second = backbone.call_two_stream(_inputs(inputs["next_input_ids"]),
                                      memory=first["memory"])
    errors["memory"] = parity.assert_close(second["sequence_output"],
                                           expected["next_hidden_state"])
    print("xlnet parity max abs errors:", errors)
    assert isinstance(models.load_checkpoint("xlnet", str(folder)), type(backbone))
    assert from_huggingface(str(folder)).count_params() == backbone.count_params()


def test_converter_refuses_unsupported_settings():
    base = {"model_type": "xlnet", "vocab_size": 10, "d_model": 8, "n_layer": 1,
            "n_head": 2, "d_inner": 16}
    assert backbone_config_from_huggingface(base)["hidden_dim"] == 8
    with pytest.raises(ValueError, match="attn_type"):
        backbone_config_from_huggingface(dict(base, attn_type="uni"))
    with pytest.raises(ValueError, match="same_length"):
        backbone_config_from_huggingface(dict(base, same_length=True))
    with pytest.raises(ValueError, match="model_type"):
        backbone_config_from_huggingface(dict(base, model_type="bert"))


def _param_formula(V, L, H, I):
    attention = 5 * H * H + 5 * H + 2 * H  # q k v o r; r_w r_r r_s biases, seg_embed; LN
    feed_forward = H * I + I + I * H + H + 2 * H
    return V * H + H + L * (attention + feed_forward)


def test_parameter_counts(backbone):
    """The formula is checked on the tiny backbone and on one full-size block of each
    preset (building the 360M-parameter model itself costs ~15 s for nothing more)."""
    from lmfactory.models.xlnet.xlnet_block import XLNetBlock

    assert backbone.count_params() == _param_formula(VOCAB, 2, 16, 32)
    counts = {}
    for preset in ("base", "large"):
        config = models.get("xlnet").presets[preset]
        block = XLNetBlock(config["hidden_dim"], config["num_heads"],
                           config["intermediate_dim"])
        block.build()
        hidden, vocabulary = config["hidden_dim"], config["vocabulary_size"]
        counts[preset] = vocabulary * hidden + hidden + config["num_layers"] * \
            block.count_params()
        assert counts[preset] == _param_formula(vocabulary, config["num_layers"], hidden,
                                                config["intermediate_dim"])
    # Hugging Face's XLNetModel with the 32,000-piece vocabulary counts the same
    # (116,718,336 / 360,268,800, counted with transformers 4.46.3).
    assert counts["base"] == 116_718_336
    assert counts["large"] == 360_268_800
    # The paper gives XLNet BERT's sizes (§3.1): 110M / 340M. The difference is the larger
    # vocabulary, the relative position projection r and the per-layer biases.
    assert abs(counts["base"] / 110e6 - 1) < 0.07 and abs(counts["large"] / 340e6 - 1) < 0.07
