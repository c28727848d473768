"""Generation shared by every decoder (models/generation.py, models/decoder_cache.py) and the
causal-LM SavedModel (components/trainer/generation_serving.py)."""

import collections
import importlib.util

import keras
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the tokenizer ops the SavedModel uses)

from lmfactory import models
from lmfactory.components.trainer import generation_serving
from lmfactory.components.trainer.export import export_serving_model
from lmfactory.components.vocabulary import bpe
from lmfactory.models.charlm import CharTransformerLM
from lmfactory.models.generation import CausalLMGeneration
from lmfactory.models.gpt1.gpt1_causal_lm import Gpt1CausalLM
from lmfactory.models.gpt2 import GPT2CausalLM
from lmfactory.models.tokenizers import load_tokenizer, write_tokenizer_config

VOCAB = 64
MAX_POSITIONS = 32
TINY = dict(vocabulary_size=VOCAB, num_layers=2, hidden_dim=32, num_heads=4,
            intermediate_dim=64, max_sequence_length=MAX_POSITIONS, dropout=0.0)
DECODERS = ("gpt2", "gpt1", "gpt3", "charlm")
PROMPTS = np.array([[11, 12, 13, 0, 0, 0], [21, 22, 23, 24, 25, 26], [31, 0, 0, 0, 0, 0]],
                   dtype="int32")
LENGTHS = np.array([3, 6, 1])
MAX_LENGTH = 12

# The 1-token prompt's reference pass attends over a single key, which Keras warns about.
pytestmark = pytest.mark.filterwarnings("ignore:You are using a softmax over axis")


def _spread_weights(model, seed):
    """Redraws every matrix of ``model`` from N(0, 0.3): the 0.02 initialisation gives
    nearly uniform next-token distributions, whose argmax could flip on round-off."""
    rng = np.random.default_rng(seed)
    for variable in model.weights:
        if len(variable.shape) >= 2:
            variable.assign(rng.normal(0.0, 0.3, variable.shape).astype("float32"))


def build_lm(name):
    keras.utils.set_random_seed(3)
    if name == "gpt2":
        lm = GPT2CausalLM(models.build("gpt2", "tiny", **TINY))
    elif name == "gpt1":
        lm = Gpt1CausalLM(models.build("gpt1", "tiny", **TINY))
    elif name == "gpt3":
        # Banded (sparse) odd layers with a band of 4, far shorter than the outputs.
        lm = GPT2CausalLM(models.build("gpt3", "tiny", **TINY, attention_band=4,
                                       attention_implementation="sparse"))
    else:
        lm = CharTransformerLM(models.build("charlm", "tiny", **TINY),
                               intermediate_losses=False, multiple_targets=False)
    _spread_weights(lm, seed=DECODERS.index(name))
    return lm


_BUILT = {}


def decoder(name):
    """The tiny LM ``name`` and its cached greedy output on PROMPTS (built once)."""
    if name not in _BUILT:
        lm = build_lm(name)
        greedy = lm.generate_ids(PROMPTS, prompt_lengths=LENGTHS, max_length=MAX_LENGTH)
        _BUILT[name] = lm, greedy
    return _BUILT[name]


@pytest.fixture(scope="module", params=DECODERS)
def lm(request):
    return decoder(request.param)[0]


def greedy_without_cache(lm, prompt, max_length):
    """The reference: the whole prefix through the network at every step, argmax of the
    last position's logits."""
    ids = list(prompt)
    while len(ids) < max_length:
        x = {"token_ids": np.array([ids], "int32"),
             "padding_mask": np.ones((1, len(ids)), "int32")}
        ids.append(int(np.asarray(lm(x))[0, -1].argmax()))
    return ids


def _ids(output):
    return np.asarray(output["token_ids"])


def _greedy(lm):
    """The cached greedy output of a model made by `decoder`."""
    return next(greedy for model, greedy in _BUILT.values() if model is lm)


# --------------------------------------------------------------------------- shared code


def test_generation_code_exists_once():
    for cls in (GPT2CausalLM, Gpt1CausalLM, CharTransformerLM):
        assert issubclass(cls, CausalLMGeneration)
        for method in ("generate_ids", "get_sampler"):
            assert getattr(cls, method) is getattr(CausalLMGeneration, method), (cls, method)
    assert importlib.util.find_spec("lmfactory.models.decoder_cache") is not None
    assert importlib.util.find_spec("lmfactory.models.gpt2.decoder_cache") is None


def test_cache_shape_of_every_backbone(lm):
    backbone = lm.backbone
    head_dim = getattr(backbone, "head_dim", None) or backbone.hidden_dim // backbone.num_heads
    cache = backbone.initial_cache(3, 10)
    assert tuple(cache.shape) == (3, backbone.num_layers, 2, 10, backbone.num_heads, head_dim)
    assert not np.asarray(cache).any()


# --------------------------------------------------------------------------- samplers


def test_cached_greedy_equals_recomputing_the_prefix(lm):
    out = _greedy(lm)
    ids = _ids(out)
    assert ids.shape == (3, MAX_LENGTH) and ids.dtype == np.int32
    assert np.asarray(out["padding_mask"]).all()
    for row in range(3):
        expected = greedy_without_cache(lm, PROMPTS[row, :LENGTHS[row]], MAX_LENGTH)
        assert ids[row].tolist() == expected, row
    # Real continuations (not one repeated id), so the comparison means something.
    generated = np.concatenate([ids[row, LENGTHS[row]:] for row in range(3)])
    assert len(set(generated.tolist())) > 2


def test_degenerate_samplers_equal_greedy(lm):
    """Beam search with one beam, top-k with k = 1, top-p with a nucleus smaller than any
    probability and sampling at temperature -> 0 all pick the argmax at every step."""
    greedy = _ids(_greedy(lm))
    for sampler, kwargs in [("beam", {"num_beams": 1}),
                            ("top_k", {"k": 1, "seed": 4}),
                            ("top_p", {"p": 1e-6, "seed": 4}),
                            ("random", {"temperature": 1e-4, "seed": 4})]:
        out = _ids(lm.generate_ids(PROMPTS, prompt_lengths=LENGTHS, max_length=MAX_LENGTH,
                                   sampler=sampler, **kwargs))
        np.testing.assert_array_equal(out, greedy, err_msg=f"{sampler} {kwargs}")


def test_random_samplers_keep_prompts_and_vary():
    lm, greedy = decoder("gpt2")
    greedy = _ids(greedy)
    for sampler, kwargs in [("top_k", {"k": 5, "seed": 1}), ("top_p", {"p": 0.95, "seed": 1}),
                            ("random", {"temperature": 3.0, "seed": 1}),
                            ("beam", {"num_beams": 3})]:
        ids = _ids(lm.generate_ids(PROMPTS, prompt_lengths=LENGTHS, max_length=MAX_LENGTH,
                                   sampler=sampler, **kwargs))
        for row in range(3):
            np.testing.assert_array_equal(ids[row, :LENGTHS[row]], PROMPTS[row, :LENGTHS[row]])
        assert ((ids >= 0) & (ids < VOCAB)).all()
        if sampler != "beam":
            assert (ids != greedy).any(), sampler


def test_top_k_samples_only_the_k_most_likely():
    lm = decoder("gpt2")[0]
    prompt = np.array([[5, 6, 7]], "int32")
    logits = np.asarray(lm({"token_ids": prompt, "padding_mask": np.ones_like(prompt)}))[0, -1]
    top3 = set(np.argsort(logits)[-3:].tolist())
    out = _ids(lm.generate_ids(np.repeat(prompt, 16, 0), max_length=4, sampler="top_k", k=3,
                               seed=2, temperature=5.0))
    firsts = set(out[:, 3].tolist())
    assert firsts <= top3 and len(firsts) > 1


# --------------------------------------------------------------------------- masks, ends


def test_padding_mask_semantics(lm):
    """A padding mask works like prompt lengths, and what sits under the padding does not
    matter; without lengths or mask every token is prompt."""
    mask = np.arange(PROMPTS.shape[1])[None, :] < LENGTHS[:, None]
    garbage = np.where(mask, PROMPTS, 50).astype("int32")
    np.testing.assert_array_equal(
        _ids(lm.generate_ids(garbage, padding_mask=mask, max_length=MAX_LENGTH)),
        _ids(_greedy(lm)))
    full = _ids(lm.generate_ids(PROMPTS[1:2], max_length=MAX_LENGTH))
    np.testing.assert_array_equal(full, _ids(_greedy(lm))[1:2])


@pytest.mark.parametrize("name", ["gpt2", "charlm"])
def test_end_token_stops_each_row(name):
    lm, free = decoder(name)
    free = _ids(free)
    end = int(free[0, LENGTHS[0] + 1])  # row 0's second generated token
    out = lm.generate_ids(PROMPTS, prompt_lengths=LENGTHS, max_length=MAX_LENGTH,
                          end_token_id=end, pad_token_id=63)
    ids, mask = _ids(out), np.asarray(out["padding_mask"])
    stopped = 0
    for row in range(3):
        generated = [i for i in range(LENGTHS[row], MAX_LENGTH) if free[row, i] == end]
        if not generated:
            np.testing.assert_array_equal(ids[row], free[row])
            assert mask[row].all()
            continue
        stop = generated[0]
        stopped += 1
        np.testing.assert_array_equal(ids[row, :stop + 1], free[row, :stop + 1])
        assert mask[row, :stop + 1].all() and not mask[row, stop + 1:].any()
        assert (ids[row, stop + 1:] == 63).all()
    assert stopped >= 1


def test_end_token_in_a_prompt_or_zero_does_not_stop_early():
    """An end token inside a prompt does not stop its row, and the positions still to
    generate hold a filler that is not the end token (so an end id of 0 does not stop
    decoding before it starts). pad_token_id defaults to the end token."""
    lm, free = decoder("gpt2")
    free = _ids(free)
    for end in (int(PROMPTS[1, 2]), 0):
        out = lm.generate_ids(PROMPTS, prompt_lengths=LENGTHS, max_length=MAX_LENGTH,
                              end_token_id=end)
        ids, mask = _ids(out), np.asarray(out["padding_mask"])
        for row in range(3):
            stop = next((i for i in range(LENGTHS[row], MAX_LENGTH) if free[row, i] == end),
                        MAX_LENGTH - 1)
            np.testing.assert_array_equal(ids[row, :stop + 1], free[row, :stop + 1])
            assert mask[row, :stop + 1].all() and not mask[row, stop + 1:].any()
            assert (ids[row, stop + 1:] == end).all()


def test_traced_with_unknown_shapes_and_tensor_max_length():
    lm, eager = decoder("charlm")
    eager = _ids(eager)

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32),
                                  tf.TensorSpec([None], tf.int32),
                                  tf.TensorSpec([], tf.int32)])
    def generate(ids, lengths, max_length):
        return lm.generate_ids(ids, prompt_lengths=lengths, max_length=max_length)

    traced = _ids(generate(tf.constant(PROMPTS), tf.constant(LENGTHS, tf.int32),
                           tf.constant(MAX_LENGTH)))
    np.testing.assert_array_equal(traced, eager)
    shorter = _ids(generate(tf.constant(PROMPTS), tf.constant(LENGTHS, tf.int32),
                            tf.constant(9)))
    np.testing.assert_array_equal(shorter, eager[:, :9])


def test_bad_arguments():
    lm = decoder("gpt2")[0]
    with pytest.raises(ValueError, match="Unknown sampler 'nucleus'"):
        lm.generate_ids(PROMPTS, max_length=8, sampler="nucleus")
    with pytest.raises(ValueError, match="need a sampler name"):
        lm.generate_ids(PROMPTS, max_length=8, sampler=lm.get_sampler("greedy"), k=3)
    with pytest.raises(ValueError, match="max_sequence_length=32"):
        lm.generate_ids(PROMPTS, max_length=33)
    with pytest.raises(ValueError, match="exceed max_length=4"):
        lm.generate_ids(PROMPTS, max_length=4)


# --------------------------------------------------------------------------- serving

SERVING_PROMPTS = ["the quick brown fox", "a dog", ""]
TEXT = ["the quick brown fox jumps over the lazy dog", "the dog sleeps in the sun",
        "a fox runs to the river", "the river runs fast"] * 3


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A tiny GPT-2 with a tiny byte-level BPE vocabulary, exported the way the trainer
    exports it, and loaded back."""
    vocab_dir = str(tmp_path_factory.mktemp("vocab"))
    counts = collections.Counter(bpe.pretokenize_lines(TEXT))
    tokens, merges = bpe.learn_merges(counts.items(), 300, min_frequency=1)
    bpe.write_files(vocab_dir, tokens, merges)
    write_tokenizer_config(vocab_dir, bpe.tokenizer_config())
    keras.utils.set_random_seed(7)
    lm = GPT2CausalLM(models.build("gpt2", "tiny", **{**TINY, "vocabulary_size": len(tokens),
                                                      "max_sequence_length": 24}))
    _spread_weights(lm, seed=7)
    export_dir = str(tmp_path_factory.mktemp("serving") / "model")
    generation = {"max_length": 12, "sampler": "greedy", "k": 3, "p": 0.8,
                  "temperature": 0.9, "num_beams": 2, "seed": 5}
    export_serving_model(lm, vocab_dir, {"task": {"kind": "language_model",
                                                  "objective": "causal_lm"},
                                         "generation": generation}, export_dir)
    loaded = tf.saved_model.load(export_dir)
    return {"lm": lm, "tokenizer": load_tokenizer(vocab_dir), "loaded": loaded,
            "end": int(load_tokenizer(vocab_dir).token_to_id(bpe.END_OF_TEXT))}


def _request(prompts=SERVING_PROMPTS, max_length=10, sampler="greedy", temperature=1.0, k=3,
             p=0.9):
    return dict(prompt=tf.constant(prompts), max_length=tf.constant(max_length, tf.int32),
                sampler=tf.constant(sampler), temperature=tf.constant(temperature, tf.float32),
                k=tf.constant(k, tf.int32), p=tf.constant(p, tf.float32))


def _greedy_text(served, prompts, max_length):
    """What serving_default should answer for greedy decoding, from `generate_ids`."""
    tokenizer, end = served["tokenizer"], served["end"]
    rows = []
    for text in prompts:
        pieces = [int(i) for i in np.asarray(tokenizer(text))]
        rows.append([end] + pieces[max(0, len(pieces) - (max_length - 2)):])
    width = max(len(row) for row in rows)
    ids = np.array([row + [end] * (width - len(row)) for row in rows], "int32")
    out = served["lm"].generate_ids(ids, prompt_lengths=[len(row) for row in rows],
                                    max_length=max_length, end_token_id=end)
    detokenize = tf.function(tokenizer.detokenize)  # bytes as they are, not decoded
    texts, counts = [], []
    for row, generated, mask in zip(rows, _ids(out), np.asarray(out["padding_mask"])):
        kept = generated[mask]
        counts.append(len(kept) - len(row))
        pieces = [int(i) for i in kept[1:] if i != end]
        texts.append(detokenize(tf.constant([pieces], tf.int32)).numpy()[0])
    return texts, counts


def test_serving_signatures_and_inputs(served):
    signatures = served["loaded"].signatures
    assert set(signatures) == {"serving_default", "generate_default"}
    _, inputs = signatures["serving_default"].structured_input_signature
    assert {name: spec.dtype for name, spec in inputs.items()} == {
        "prompt": tf.string, "max_length": tf.int32, "sampler": tf.string,
        "temperature": tf.float32, "k": tf.int32, "p": tf.float32}
    _, inputs = signatures["generate_default"].structured_input_signature
    assert list(inputs) == ["prompt"]


def test_served_greedy_equals_generate_ids(served):
    serve = served["loaded"].signatures["serving_default"]
    for max_length in (10, 5):  # at 5 the first prompt (4 tokens) keeps its last 3
        out = serve(**_request(max_length=max_length))
        texts, counts = _greedy_text(served, SERVING_PROMPTS, max_length)
        assert out["generated_text"].numpy().tolist() == texts
        assert out["num_generated_tokens"].numpy().tolist() == counts
        if max_length == 10:  # no end token generated here: every output is 10 tokens
            assert texts[0].startswith(b"the quick brown fox")
            lengths = [len(np.asarray(served["tokenizer"](text))) for text in SERVING_PROMPTS]
            assert [1 + n + c for n, c in zip(lengths, counts)] == [10, 10, 10]


def test_every_sampler_serves_within_max_length(served):
    serve, tokenizer = served["loaded"].signatures["serving_default"], served["tokenizer"]
    prompt_tokens = [len(np.asarray(tokenizer(text))) for text in SERVING_PROMPTS]
    for sampler in generation_serving.SAMPLERS:
        out = serve(**_request(sampler=sampler, max_length=11, temperature=1.5, k=4, p=0.7))
        texts = out["generated_text"].numpy()
        counts = out["num_generated_tokens"].numpy()
        assert texts.shape == (3,) and counts.shape == (3,)
        for text, prompt, count, length in zip(texts, SERVING_PROMPTS, counts, prompt_tokens):
            assert text.startswith(prompt.encode())
            assert 1 <= count and 1 + length + count <= 11, sampler
    # Sampling at a high temperature does not reproduce greedy decoding.
    greedy = serve(**_request(max_length=11))["generated_text"].numpy()
    sampled = serve(**_request(sampler="random", max_length=11, temperature=5.0))
    assert (sampled["generated_text"].numpy() != greedy).any()


def test_max_length_is_clamped_and_long_prompts_keep_their_end(served):
    serve, tokenizer = served["loaded"].signatures["serving_default"], served["tokenizer"]
    out = serve(**_request(max_length=1000))  # the model has 24 positions
    texts, counts = _greedy_text(served, SERVING_PROMPTS, 24)
    assert out["generated_text"].numpy().tolist() == texts
    long_prompt = " ".join(TEXT[:2])
    assert len(np.asarray(tokenizer(long_prompt))) > 8
    out = serve(**_request(prompts=[long_prompt], max_length=8))
    texts, counts = _greedy_text(served, [long_prompt], 8)
    assert out["generated_text"].numpy().tolist() == texts
    assert out["num_generated_tokens"].numpy().tolist() == counts == [1]
    # max_length = 2 leaves room for the start token and one generated token only.
    out = serve(**_request(max_length=2))
    assert out["num_generated_tokens"].numpy().tolist() == [1, 1, 1]


def test_generate_default_uses_the_recipe_settings(served):
    out = served["loaded"].signatures["generate_default"](prompt=tf.constant(SERVING_PROMPTS))
    texts, counts = _greedy_text(served, SERVING_PROMPTS, 12)  # recipe: greedy, 12 tokens
    assert out["generated_text"].numpy().tolist() == texts
    assert out["num_generated_tokens"].numpy().tolist() == counts


@pytest.mark.parametrize("change, message", [
    ({"prompts": [["a", "b"]]}, "prompt must be a 1-D batch"),
    ({"k": 0}, "k must be >= 1"),
    ({"sampler": "nucleus"}, "sampler must be one of"),
    ({"p": 0.0}, r"p must be in \(0, 1\]"),
    ({"p": 1.5}, r"p must be in \(0, 1\]"),
    ({"temperature": 0.0}, "temperature must be > 0"),
    ({"max_length": 1}, "max_length must be >= 2"),
])
def test_bad_requests_fail_with_a_message(served, change, message):
    serve = served["loaded"].signatures["serving_default"]
    with pytest.raises(tf.errors.InvalidArgumentError, match=f"serving_default: {message}"):
        serve(**_request(**change))
    generate_default = served["loaded"].signatures["generate_default"]
    if "prompts" in change:
        with pytest.raises(tf.errors.InvalidArgumentError,
                           match="generate_default: prompt must be a 1-D batch"):
            generate_default(prompt=tf.constant([["a", "b"]]))


def test_generation_settings_fill_and_check_the_recipe_block():
    assert generation_serving.generation_settings({}) == generation_serving.GENERATION_DEFAULTS
    settings = generation_serving.generation_settings({"sampler": "top_k", "k": 10,
                                                       "temperature": 1, "max_length": 64})
    assert settings["temperature"] == 1.0 and settings["num_beams"] == 4
    for block, message in [({"sampler": "nucleus"}, "serving.generation.sampler"),
                           ({"k": 0}, "serving.generation.k"),
                           ({"p": 1.2}, "serving.generation.p"),
                           ({"temperature": 0}, "serving.generation.temperature"),
                           ({"max_length": 1}, "serving.generation.max_length"),
                           ({"num_beams": 0}, "serving.generation.num_beams"),
                           ({"top_k": 3}, r"unknown key\(s\) \['top_k'\]")]:
        with pytest.raises(ValueError, match=message):
            generation_serving.generation_settings(block)
