"""GPT-1 (Radford et al. 2018): the post-LN decoder, its causal LM with cached generation,
the Hugging Face "openai-gpt" converter (parity: tests/fixtures/hf/openai-gpt, made by
tests/fixtures/make_parity_fixtures.py with PyTorch outside this project), the §3.3 input
transformations and the fine-tuning classifier with its auxiliary LM objective."""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf
from safetensors.numpy import load_file, save_file

import parity
from lmfactory import models
from lmfactory.models import registry
from lmfactory.models.gpt1 import (GPT1_TASKS, SPECIAL_TOKENS, Gpt1Backbone, Gpt1CausalLM,
                                   Gpt1Classifier, Gpt1Preprocessor)
from lmfactory.models.gpt1 import gpt1_converters
from lmfactory.models.tokenizers import import_huggingface_tokenizer, write_tokenizer_config

VOCAB = 60
TINY = dict(vocabulary_size=VOCAB, num_layers=2, hidden_dim=32, num_heads=4,
            intermediate_dim=64, max_sequence_length=32)
# Special ids of the hand-checked packing tests.
START, DELIM, EXTRACT, PAD = 1, 2, 3, 0


def _log_softmax(z):
    z = np.asarray(z, dtype="float64")
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def _inputs(seed=0, batch=3, length=10, lengths=None):
    rng = np.random.default_rng(seed)
    token_ids = rng.integers(4, VOCAB, (batch, length)).astype("int32")
    lengths = [length] * batch if lengths is None else lengths
    padding_mask = (np.arange(length)[None, :] < np.array(lengths)[:, None]).astype("int32")
    return {"token_ids": token_ids * padding_mask, "padding_mask": padding_mask}


def _preprocessor(task, sequence_length=12, **kwargs):
    return Gpt1Preprocessor(task, sequence_length, start_token_id=START,
                            delimiter_token_id=DELIM, extract_token_id=EXTRACT,
                            pad_token_id=PAD, **kwargs)


def _numpy(outputs):
    return {k: np.asarray(v) for k, v in outputs.items()}


@pytest.fixture(scope="module", autouse=True)
def _seed():
    keras.utils.set_random_seed(1234)


@pytest.fixture(scope="module")
def backbone():
    return models.build("gpt1", "tiny", **TINY)


@pytest.fixture(scope="module")
def causal_lm(backbone):
    return Gpt1CausalLM(backbone)


# --------------------------------------------------------------------------- registry, sizes


def test_gpt1_is_registered():
    arch = models.get("gpt1")
    assert (arch.family, arch.tokenizer_kind, arch.objectives) == ("decoder", "bpe",
                                                                  ("causal_lm",))
    assert arch.backbone_cls is Gpt1Backbone and arch.pretrainer("causal_lm") is Gpt1CausalLM
    assert arch.head("causal_lm") is Gpt1CausalLM
    assert arch.special_tokens == SPECIAL_TOKENS
    assert {"end_of_text", "pad", "start", "delimiter", "extract"} == set(SPECIAL_TOKENS)
    assert len(set(SPECIAL_TOKENS.values())) == 4  # pad is the end-of-text token
    assert arch.hf_model_types == ("openai-gpt",)
    assert registry.find_by_hf_model_type("openai-gpt") == [arch]
    assert set(arch.presets) == {"tiny", "base"}
    assert "Radford et al. 2018" in arch.paper


def test_base_preset_is_the_paper_model_with_117m_parameters():
    base = models.presets("gpt1")["base"]
    # §4.1 "Model specifications".
    assert (base["num_layers"], base["hidden_dim"], base["num_heads"],
            base["intermediate_dim"], base["max_sequence_length"], base["vocabulary_size"],
            base["dropout"]) == (12, 768, 12, 3072, 512, 40478, 0.1)
    V, L, H, I, T = 40478, 12, 768, 3072, 512
    block = 4 * (H * H + H) + (H * I + I) + (I * H + H) + 2 * 2 * H
    expected = V * H + T * H + L * block  # no final LayerNorm, tied output layer
    keras.utils.set_random_seed(0)
    backbone = models.build("gpt1", "base")
    count = backbone.count_params()
    print(f"\nGPT-1 base parameters: {count:,}")
    assert count == expected == 116_534_784
    assert Gpt1CausalLM(backbone).count_params() == count


# --------------------------------------------------------------------------- architecture


def test_blocks_are_post_layer_norm(backbone):
    """§3.1 (the original Transformer's blocks): h = LN(n + FFN(n)), n = LN(x + Attn(x)),
    and no LayerNorm after the last block (GPT-2 moved them in front of each sub-block)."""
    block = backbone.transformer_layers[0]
    assert block.normalize_first is False and block._cross_attention_layer is None
    norms = [layer for layer in backbone._flatten_layers()
             if isinstance(layer, keras.layers.LayerNormalization)]
    assert len(norms) == 2 * backbone.num_layers
    assert not hasattr(backbone, "layer_norm")

    x = np.random.default_rng(1).normal(size=(2, 5, 32)).astype("float32")
    causal = np.tril(np.ones((5, 5), "bool"))[None]
    attention = block._self_attention_layer(x, x, attention_mask=causal)
    n = block._self_attention_layer_norm(x + attention)
    m = block._feedforward_output_dense(block._feedforward_intermediate_dense(n))
    expected = np.asarray(block._feedforward_layer_norm(n + m))
    np.testing.assert_allclose(np.asarray(block(x)), expected, atol=1e-5)
    # The block output is normalised (post-LN): zero mean, unit variance before gamma/beta.
    gamma = block._feedforward_layer_norm.gamma.numpy()
    beta = block._feedforward_layer_norm.beta.numpy()
    normalised = (expected - beta) / gamma
    np.testing.assert_allclose(normalised.mean(-1), 0, atol=1e-4)

    # GELU in its tanh form (the released code's), dropout 0.1, N(0, 0.02) init.
    z = np.linspace(-3, 3, 7).astype("float32")
    tanh_gelu = 0.5 * z * (1 + np.tanh(np.sqrt(2 / np.pi) * (z + 0.044715 * z ** 3)))
    np.testing.assert_allclose(np.asarray(block.activation(z)), tanh_gelu, atol=1e-6)
    tiny = models.build("gpt1", "tiny", vocabulary_size=2000)
    assert tiny.dropout == 0.1 and tiny.transformer_layers[0].dropout == 0.1
    for kernel in (tiny.token_embedding.embeddings,
                   tiny.transformer_layers[0]._feedforward_intermediate_dense.kernel,
                   tiny.transformer_layers[1]._feedforward_output_dense.kernel):
        assert kernel.numpy().std() == pytest.approx(0.02, rel=0.1), kernel.path


def test_call_with_states_matches_the_functional_call(backbone):
    x = _inputs(lengths=[10, 6, 8])
    outputs = np.asarray(backbone(x)["sequence_output"])
    states = backbone.call_with_states(x)
    assert len(states["hidden_states"]) == backbone.num_layers + 1
    np.testing.assert_allclose(np.asarray(states["sequence_output"]), outputs, atol=1e-6)
    np.testing.assert_allclose(np.asarray(states["hidden_states"][-1]), outputs, atol=1e-6)


# --------------------------------------------------------------------------- causal LM


def _greedy_by_full_recompute(lm, prompt, max_length):
    ids = list(prompt)
    while len(ids) < max_length:
        x = {"token_ids": np.array([ids], "int32"),
             "padding_mask": np.ones((1, len(ids)), "int32")}
        ids.append(int(np.asarray(lm(x))[0, -1].argmax()))
    return ids


def test_cache_pass_equals_the_full_pass(backbone):
    x = _inputs(batch=2, length=9)
    state = backbone.initial_state(2, 12)
    assert len(state) == 2 and all(tuple(buffer.shape) == (2, 4, 12, 8)
                                   for pair in state for buffer in pair)
    hidden, state = backbone.call_with_state(x["token_ids"], state, 0)
    np.testing.assert_allclose(np.asarray(hidden),
                               np.asarray(backbone(x)["sequence_output"]), atol=1e-5)
    # One more token through the cache = the last position of the full pass.
    longer = np.concatenate([x["token_ids"], [[5], [6]]], axis=1).astype("int32")
    step, _ = backbone.call_with_state(longer[:, -1:], state, 9)
    full = backbone({"token_ids": longer, "padding_mask": np.ones_like(longer)})
    np.testing.assert_allclose(np.asarray(step)[:, 0],
                               np.asarray(full["sequence_output"])[:, -1], atol=1e-5)


@pytest.mark.filterwarnings("ignore:You are using a softmax over axis")
def test_cached_generation_equals_full_recompute(causal_lm):
    prompts = np.array([[11, 12, 13, 0, 0], [21, 22, 23, 24, 25], [31, 0, 0, 0, 0]], "int32")
    lengths = np.array([3, 5, 1])
    max_length = 14
    out = causal_lm.generate_ids(prompts, prompt_lengths=lengths, max_length=max_length)
    token_ids = np.asarray(out["token_ids"])
    assert token_ids.shape == (3, max_length)
    for row in range(3):
        expected = _greedy_by_full_recompute(causal_lm, prompts[row, :lengths[row]],
                                             max_length)
        assert token_ids[row].tolist() == expected, row

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32),
                                  tf.TensorSpec([None], tf.int32)])
    def serve(ids, prompt_lengths):
        return causal_lm.generate_ids(ids, prompt_lengths=prompt_lengths,
                                      max_length=max_length)

    traced = serve(tf.constant(prompts), tf.constant(lengths, tf.int32))
    np.testing.assert_array_equal(np.asarray(traced["token_ids"]), token_ids)


def test_causal_lm_loss_matches_numpy():
    # That training lowers it: the conformance harness (check_pretraining_objective).
    keras.utils.set_random_seed(11)
    lm = Gpt1CausalLM(models.build("gpt1", "tiny", **TINY))
    rng = np.random.default_rng(5)
    ids = rng.integers(4, 30, (4, 13)).astype("int32")
    weights = np.ones((4, 12), "float32")
    weights[1, 8:] = 0.0
    x = {"token_ids": ids[:, :-1], "padding_mask": (weights > 0).astype("int32")}
    y = ids[:, 1:]
    y_pred = np.asarray(lm(x))
    loss = float(lm.compute_loss(x, y, y_pred, weights, training=False))
    nll = -np.take_along_axis(_log_softmax(y_pred), y[..., None], axis=-1)[..., 0]
    assert loss == pytest.approx((weights * nll).sum() / weights.sum(), rel=1e-5)


def test_causal_lm_config_and_keras_file(causal_lm, tmp_path):
    # The backbone's config, checkpoint folder and .keras round trips: the conformance
    # harness (check_config_round_trip, check_checkpoint_round_trip).
    x = _inputs()
    lm_config = causal_lm.get_config()
    assert Gpt1CausalLM.from_config(json.loads(json.dumps(lm_config))).get_config() == lm_config

    causal_lm.save(tmp_path / "lm.keras")
    restored = keras.models.load_model(tmp_path / "lm.keras")
    assert isinstance(restored, Gpt1CausalLM) and isinstance(restored.backbone, Gpt1Backbone)
    np.testing.assert_array_equal(np.asarray(restored(x)), np.asarray(causal_lm(x)))


def test_causal_lm_rejects_an_encoder_backbone():
    encoder = models.build("bert", "tiny", vocabulary_size=VOCAB, num_layers=1, hidden_dim=16,
                           num_heads=2, intermediate_dim=32, max_sequence_length=16)
    with pytest.raises(TypeError, match="initial_state"):
        Gpt1CausalLM(encoder)


# --------------------------------------------------------------------------- converter


def test_openai_gpt_matches_hugging_face():
    inputs, expected, folder = parity.load_fixture("openai-gpt")
    mask = inputs["attention_mask"]
    x = {"token_ids": inputs["input_ids"], "padding_mask": mask}
    imported = models.load_checkpoint("gpt1", folder)
    assert isinstance(imported, Gpt1Backbone)
    config = imported.get_config()
    assert (config["num_layers"], config["hidden_dim"], config["num_heads"],
            config["intermediate_dim"], config["max_sequence_length"],
            config["vocabulary_size"], config["dropout"]) == (2, 32, 4, 128, 64, 400, 0.0)
    errors = {"last_hidden_state": parity.assert_close_on_tokens(
        imported(x)["sequence_output"], expected["last_hidden_state"], mask)}
    states = imported.call_with_states(x)["hidden_states"]
    assert len(states) == len(expected["hidden_states"]) == 3
    for i, (ours, theirs) in enumerate(zip(states, expected["hidden_states"])):
        errors[f"hidden_states[{i}]"] = parity.assert_close_on_tokens(ours, theirs, mask)
    errors["lm_logits"] = parity.assert_close_on_tokens(
        Gpt1CausalLM(imported)(x), expected["head_logits"], mask)
    print("\nopenai-gpt parity, max abs error on real tokens: "
          + ", ".join(f"{k} {v:.2e}" for k, v in errors.items()))


def _copy_checkpoint(folder, target, weights, config_update=None):
    target.mkdir()
    save_file(weights, str(target / "model.safetensors"))
    with open(folder / "config.json") as f:
        config = json.load(f)
    config.update(config_update or {})
    with open(target / "config.json", "w") as f:
        json.dump(config, f)
    return target


def test_openai_gpt_name_variants_and_errors(tmp_path):
    inputs, _, folder = parity.load_fixture("openai-gpt")
    weights = load_file(str(folder / "model.safetensors"))
    x = {"token_ids": inputs["input_ids"], "padding_mask": inputs["attention_mask"]}
    reference = np.asarray(gpt1_converters.from_huggingface(folder)(x)["sequence_output"])

    # Bare names (OpenAIGPTModel), the causal-mask buffer of older checkpoints, a tied
    # lm_head and a double-heads model's multiple-choice head all load the same.
    bare = {k.removeprefix("transformer."): v for k, v in weights.items()}
    bare.update({"h.0.attn.bias": np.tril(np.ones((1, 1, 64, 64), "float32")),
                 "lm_head.weight": weights["transformer.tokens_embed.weight"],
                 "multiple_choice_head.summary.weight": np.ones((1, 32), "float32")})
    loaded = gpt1_converters.from_huggingface(_copy_checkpoint(folder, tmp_path / "bare", bare))
    np.testing.assert_array_equal(np.asarray(loaded(x)["sequence_output"]), reference)

    missing = {k: v for k, v in weights.items() if k != "transformer.h.0.ln_2.weight"}
    with pytest.raises(ValueError, match=r"h\.0\.ln_2"):
        gpt1_converters.from_huggingface(_copy_checkpoint(folder, tmp_path / "missing",
                                                          missing))
    extra = dict(weights)
    extra["transformer.h.5.mlp.c_fc.bias"] = np.zeros(128, "float32")
    with pytest.raises(ValueError, match=r"did not read.*h\.5\.mlp"):
        gpt1_converters.from_huggingface(_copy_checkpoint(folder, tmp_path / "extra", extra))
    with pytest.raises(ValueError, match="reads 'openai-gpt' checkpoints only"):
        gpt1_converters.from_huggingface(parity.fixture_dir("gpt2"))
    with pytest.raises(ValueError, match="afn is 'relu'"):
        gpt1_converters.from_huggingface(_copy_checkpoint(folder, tmp_path / "relu", weights,
                                                          {"afn": "relu"}))


# --------------------------------------------------------------------------- transformations


def test_classification_and_entailment_packing_by_hand():
    classify = _preprocessor("classification", 8)
    out = _numpy(classify(tf.ragged.constant([[5, 6, 7], [8]])))
    np.testing.assert_array_equal(out["token_ids"], [[START, 5, 6, 7, EXTRACT, 0, 0, 0],
                                                     [START, 8, EXTRACT, 0, 0, 0, 0, 0]])
    np.testing.assert_array_equal(out["padding_mask"], [[1, 1, 1, 1, 1, 0, 0, 0],
                                                        [1, 1, 1, 0, 0, 0, 0, 0]])
    assert out["token_ids"].dtype == np.int32 and out["padding_mask"].dtype == np.int32
    # Over-long text is cut, the extract token kept.
    out = _numpy(_preprocessor("classification", 5)([[5, 6, 7, 8, 9, 10]]))
    np.testing.assert_array_equal(out["token_ids"], [[START, 5, 6, 7, EXTRACT]])

    entail = _preprocessor("entailment", 10)
    out = _numpy(entail(([[5, 6], [7, 8, 9]], [[10], [11, 12]])))
    np.testing.assert_array_equal(out["token_ids"], [
        [START, 5, 6, DELIM, 10, EXTRACT, 0, 0, 0, 0],
        [START, 7, 8, 9, DELIM, 11, 12, EXTRACT, 0, 0]])
    np.testing.assert_array_equal(out["padding_mask"], [[1] * 6 + [0] * 4, [1] * 8 + [0] * 2])
    # The pad id may be a text token (GPT-2's end-of-text pads): the mask still counts it.
    out = _numpy(_preprocessor("classification", 6)([[PAD, 5]]))
    np.testing.assert_array_equal(out["token_ids"], [[START, PAD, 5, EXTRACT, PAD, PAD]])
    np.testing.assert_array_equal(out["padding_mask"], [[1, 1, 1, 1, 0, 0]])


def test_similarity_packs_both_orderings_by_hand():
    out = _numpy(_preprocessor("similarity", 8)(([[5, 6], [7]], [[9], [10, 11]])))
    assert out["token_ids"].shape == (2, 2, 8)
    np.testing.assert_array_equal(out["token_ids"], [
        [[START, 5, 6, DELIM, 9, EXTRACT, 0, 0], [START, 9, DELIM, 5, 6, EXTRACT, 0, 0]],
        [[START, 7, DELIM, 10, 11, EXTRACT, 0, 0], [START, 10, 11, DELIM, 7, EXTRACT, 0, 0]]])
    np.testing.assert_array_equal(out["padding_mask"][:, 0], out["padding_mask"][:, 1])
    np.testing.assert_array_equal(out["padding_mask"][0, 0], [1, 1, 1, 1, 1, 1, 0, 0])


def test_multiple_choice_packs_one_sequence_per_answer_by_hand():
    mc = _preprocessor("multiple_choice", 9)
    out = _numpy(mc(([[5, 6], [7]], [[[20], [21, 22], [23]], [[24, 25, 26], [27], [28]]])))
    assert out["token_ids"].shape == (2, 3, 9)
    np.testing.assert_array_equal(out["token_ids"], [
        [[START, 5, 6, DELIM, 20, EXTRACT, 0, 0, 0],
         [START, 5, 6, DELIM, 21, 22, EXTRACT, 0, 0],
         [START, 5, 6, DELIM, 23, EXTRACT, 0, 0, 0]],
        [[START, 7, DELIM, 24, 25, 26, EXTRACT, 0, 0],
         [START, 7, DELIM, 27, EXTRACT, 0, 0, 0, 0],
         [START, 7, DELIM, 28, EXTRACT, 0, 0, 0, 0]]])
    np.testing.assert_array_equal(out["padding_mask"].sum(-1), [[6, 7, 6], [7, 5, 5]])
    with pytest.raises(tf.errors.InvalidArgumentError, match="same number of answers"):
        mc(([[5], [7]], [[[20], [21]], [[24]]]))


def test_string_inputs_through_a_vocabulary_folder(tmp_path):
    """from_vocabulary: the BPE vocabulary's start / delimiter / extract / pad roles, and
    strings tokenized before packing."""
    vocab_dir = tmp_path / "vocab"
    config = import_huggingface_tokenizer(str(parity.fixture_dir("gpt2")), str(vocab_dir))
    with open(vocab_dir / "vocab.json", encoding="utf-8") as f:
        vocabulary = json.load(f)
    for role in ("start", "delimiter", "extract"):
        vocabulary[SPECIAL_TOKENS[role]] = len(vocabulary)
    with open(vocab_dir / "vocab.json", "w", encoding="utf-8") as f:
        json.dump(vocabulary, f, ensure_ascii=False)
    write_tokenizer_config(str(vocab_dir), {**config, "special_tokens": SPECIAL_TOKENS})

    entail = Gpt1Preprocessor.from_vocabulary(str(vocab_dir), "entailment", 24)
    assert (entail.start_token_id, entail.delimiter_token_id, entail.extract_token_id,
            entail.pad_token_id) == (400, 401, 402, 399)
    premise, hypothesis = ["The dog ran.", "Hello"], ["A dog.", "world"]
    out = _numpy(entail((tf.constant(premise), tf.constant(hypothesis))))
    tokens = entail.tokenizer(tf.constant(premise + hypothesis + ["Where?", "Here.", "There."]))
    tokens = [list(row) for row in (tokens.to_list() if hasattr(tokens, "to_list")
                                    else tokens)]
    for row in range(2):
        expected = [400] + tokens[row] + [401] + tokens[2 + row] + [402]
        expected += [399] * (24 - len(expected))
        assert out["token_ids"][row].tolist() == expected
    mc = Gpt1Preprocessor("multiple_choice", 24, tokenizer=entail.tokenizer,
                          **{name: getattr(entail, name) for name in (
                              "start_token_id", "delimiter_token_id", "extract_token_id",
                              "pad_token_id")})
    out = _numpy(mc((tf.constant(["Where?"]), tf.constant([["Here.", "There."]]))))
    assert out["token_ids"].shape == (1, 2, 24)
    for k in range(2):
        expected = [400] + tokens[4] + [401] + tokens[5 + k] + [402]
        assert out["token_ids"][0, k, :len(expected)].tolist() == expected

    write_tokenizer_config(str(vocab_dir), config)  # GPT-2's roles only
    with pytest.raises(ValueError, match=r"no \['delimiter', 'extract', 'start'\]"):
        Gpt1Preprocessor.from_vocabulary(str(vocab_dir), "entailment", 24)


def test_preprocessor_config_round_trip_and_errors():
    layer = _preprocessor("similarity", 8, truncate="waterfall")
    clone = Gpt1Preprocessor.from_config(json.loads(json.dumps(layer.get_config())))
    assert clone.get_config() == layer.get_config()
    pair = ([[5, 6, 7, 8, 9]], [[10, 11]])
    np.testing.assert_array_equal(np.asarray(clone(pair)["token_ids"]),
                                  np.asarray(layer(pair)["token_ids"]))
    with pytest.raises(ValueError, match="task must be one of"):
        _preprocessor("summarization")
    with pytest.raises(ValueError, match="extract_token_id must be a non-negative int"):
        Gpt1Preprocessor("classification", 8, start_token_id=1, delimiter_token_id=2)
    with pytest.raises(ValueError, match="tuple of two inputs"):
        _preprocessor("entailment")([[5, 6], [7]])
    with pytest.raises(ValueError, match="batch of token sequences"):
        _preprocessor("classification")(tf.constant([5, 6]))


# --------------------------------------------------------------------------- classifier


def test_classifier_reads_the_extract_token(backbone):
    classifier = Gpt1Classifier(backbone, num_classes=3, dropout=0.0)
    x = _numpy(_preprocessor("classification", 12)([[5, 6, 7], [8, 9, 10, 11, 12, 13]]))
    out = classifier(x)
    assert tuple(out["logits"].shape) == (2, 3)
    assert tuple(out["lm_logits"].shape) == (2, 12, VOCAB)
    hidden = np.asarray(backbone(x)["sequence_output"])
    last = x["padding_mask"].sum(-1) - 1
    assert (x["token_ids"][np.arange(2), last] == EXTRACT).all()
    extract = hidden[np.arange(2), last]
    kernel, bias = (w.numpy() for w in classifier.output_dense.weights)
    np.testing.assert_allclose(np.asarray(out["logits"]), extract @ kernel + bias, atol=1e-5)
    # Tied output layer for the auxiliary LM.
    np.testing.assert_allclose(np.asarray(out["lm_logits"]),
                               hidden @ backbone.token_embedding.embeddings.numpy().T,
                               atol=1e-4)
    assert classifier.count_params() == backbone.count_params() + 32 * 3 + 3


def test_similarity_classifier_is_symmetric_in_its_two_texts(backbone):
    classifier = Gpt1Classifier(backbone, num_classes=2, task="similarity")
    pack = _preprocessor("similarity", 12)
    a, b = [[5, 6, 7], [9, 10]], [[11, 12], [13, 14, 15, 16]]
    ab, ba = _numpy(pack((a, b))), _numpy(pack((b, a)))
    logits_ab = np.asarray(classifier(ab)["logits"])
    np.testing.assert_allclose(logits_ab, np.asarray(classifier(ba)["logits"]), atol=1e-5)
    assert logits_ab.shape == (2, 2)
    # Not trivially so: the two orderings are different sequences with different states.
    hidden = [np.asarray(backbone({k: v[:, i] for k, v in ab.items()})["sequence_output"])
              for i in range(2)]
    last = ab["padding_mask"][:, 0].sum(-1) - 1
    first, second = (h[np.arange(2), last] for h in hidden)
    assert not np.allclose(first, second, atol=1e-3)
    kernel, bias = (w.numpy() for w in classifier.output_dense.weights)
    np.testing.assert_allclose(logits_ab, (first + second) @ kernel + bias, atol=1e-5)


def test_multiple_choice_scores_each_answer_and_softmaxes_across_them(backbone):
    classifier = Gpt1Classifier(backbone, num_classes=3, task="multiple_choice",
                                lm_weight=0.0)
    pack = _preprocessor("multiple_choice", 12)
    context, answers = [[5, 6], [7, 8, 9]], [[[20], [21, 22], [23]], [[24], [25], [26, 27]]]
    x = _numpy(pack((context, answers)))
    logits = np.asarray(classifier(x)["logits"])
    assert logits.shape == (2, 3)
    # Each answer's score is the linear layer on its own sequence's extract state.
    single = Gpt1Classifier(backbone, num_classes=1)
    single.output_dense.set_weights(classifier.output_dense.get_weights())
    for k in range(3):
        alone = np.asarray(single({name: v[:, k] for name, v in x.items()})["logits"])[:, 0]
        np.testing.assert_allclose(logits[:, k], alone, atol=1e-5)
    # Reordering the answers reorders the scores.
    swapped = _numpy(pack((context, [row[::-1] for row in answers])))
    np.testing.assert_allclose(np.asarray(classifier(swapped)["logits"]), logits[:, ::-1],
                               atol=1e-5)
    # L2: the negative log of the correct answer's softmax across the answers.
    y = np.array([2, 0])
    loss = float(classifier.compute_loss(x, y, classifier(x), training=False))
    expected = -_log_softmax(logits)[np.arange(2), y].mean()
    assert loss == pytest.approx(expected, rel=1e-5)


def test_l3_is_l2_plus_half_l1(backbone):
    classifier = Gpt1Classifier(backbone, num_classes=2)
    assert classifier.lm_weight == 0.5
    x = _numpy(_preprocessor("entailment", 12)(([[5, 6, 7], [8]], [[9], [10, 11, 12]])))
    y = np.array([1, 0])
    y_pred = classifier(x)
    loss = float(classifier.compute_loss(x, y, y_pred, training=False))

    l2 = -_log_softmax(y_pred["logits"])[np.arange(2), y].mean()
    log_probs = _log_softmax(y_pred["lm_logits"])[:, :-1]
    targets = x["token_ids"][:, 1:]
    nll = -np.take_along_axis(log_probs, targets[..., None], axis=-1)[..., 0]
    weights = x["padding_mask"][:, 1:]
    l1 = (weights * nll).sum() / weights.sum()
    print(f"\nGPT-1 fine-tuning: L2 {l2:.4f}, L1 {l1:.4f}, L3 {loss:.4f}")
    assert loss == pytest.approx(l2 + 0.5 * l1, rel=1e-5)
    assert float(classifier.classification_loss_tracker.result()) == pytest.approx(l2, rel=1e-5)
    assert float(classifier.lm_loss_tracker.result()) == pytest.approx(l1, rel=1e-5)
    no_lm = Gpt1Classifier(backbone, num_classes=2, lm_weight=0.0)
    no_lm.output_dense.set_weights(classifier.output_dense.get_weights())
    assert float(no_lm.compute_loss(x, y, no_lm(x), training=False)) == pytest.approx(
        l2, rel=1e-5)


def test_fine_tuning_steps_reduce_l3():
    keras.utils.set_random_seed(3)
    classifier = Gpt1Classifier(models.build("gpt1", "tiny", **TINY), num_classes=2,
                                task="similarity")
    pack = _preprocessor("similarity", 10)
    rng = np.random.default_rng(0)
    a = [rng.integers(4, 30, 3).tolist() for _ in range(8)]
    b = [rng.integers(4, 30, 4).tolist() for _ in range(8)]
    x = _numpy(pack((a, b)))
    y = np.array([0, 1] * 4)
    before = float(classifier.compute_loss(x, y, classifier(x), training=False))
    classifier.compile(optimizer=keras.optimizers.Adam(3e-3))
    history = classifier.fit(tf.data.Dataset.from_tensors((x, y)).repeat(10), verbose=0)
    assert {"classification_loss", "lm_loss", "accuracy"} <= set(history.history)
    after = float(classifier.compute_loss(x, y, classifier(x), training=False))
    print(f"\nGPT-1 similarity fine-tuning L3: {before:.4f} -> {after:.4f} after 10 steps")
    assert after < before - 0.3, (before, after)


def test_classifier_config_and_keras_file_round_trip(backbone, tmp_path):
    classifier = Gpt1Classifier(backbone, num_classes=3, task="multiple_choice",
                                lm_weight=0.25, dropout=0.2)
    config = classifier.get_config()
    assert {k: config[k] for k in ("num_classes", "task", "lm_weight", "dropout")} == {
        "num_classes": 3, "task": "multiple_choice", "lm_weight": 0.25, "dropout": 0.2}
    clone = Gpt1Classifier.from_config(json.loads(json.dumps(config)))
    assert clone.get_config() == config
    x = _numpy(_preprocessor("multiple_choice", 10)(([[5]], [[[6], [7], [8]]])))
    classifier.save(tmp_path / "classifier.keras")
    restored = keras.models.load_model(tmp_path / "classifier.keras")
    assert isinstance(restored, Gpt1Classifier) and restored.task == "multiple_choice"
    for key in ("logits", "lm_logits"):
        np.testing.assert_array_equal(np.asarray(restored(x)[key]),
                                      np.asarray(classifier(x)[key]))


@pytest.mark.parametrize("kwargs,message", [
    (dict(num_classes=2, task="translation"), "task must be one of"),
    (dict(num_classes=1, task="multiple_choice"), "at least 2 answers"),
    (dict(num_classes=2, lm_weight=-1.0), "lm_weight must be >= 0"),
])
def test_classifier_rejects_bad_settings(backbone, kwargs, message):
    with pytest.raises(ValueError, match=message):
        Gpt1Classifier(backbone, **kwargs)
    assert set(GPT1_TASKS) == {"classification", "entailment", "similarity",
                               "multiple_choice"}
