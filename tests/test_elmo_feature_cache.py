"""The ELMo benchmark's frozen-feature path (`benchmarks/elmo_features.py`, Peters et al. 2018
§3.3): WNUT-17 words keep their case, the biLM's layer stack computed once per sentence
equals what the task model would see at full length, and the cached-feature tagger mixes
all layers or the top one."""

import os
import sys

import keras
import numpy as np
import pytest

from lmfactory.models.elmo import ElmoBackbone, ElmoPreprocessor
from lmfactory.models.tokenizers.word import WordTokenizer

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "benchmarks"))
import elmo_features  # noqa: E402

TINY = dict(vocabulary_size=9, num_layers=2, lstm_units=8, projection_dim=4,
            filters=[[1, 4], [2, 4]], num_highway_layers=1, character_embedding_dim=4,
            max_characters_per_token=50, dropout=0.0)
SPECIALS = {"pad": "<pad>", "unk": "<unk>", "cls": "<S>", "sep": "</S>"}


@pytest.fixture(scope="module")
def cached():
    keras.utils.set_random_seed(5)
    backbone = ElmoBackbone(**TINY)
    tokenizer = WordTokenizer(["<pad>", "<unk>", "<S>", "</S>", "Paris", "paris", "in", "I"],
                              special_tokens=SPECIALS)
    preprocessor = ElmoPreprocessor(tokenizer, elmo_features.TAG_LENGTH, begin_token="<S>",
                                    end_token="</S>", pad_token="<pad>")
    sentences = [["I", "in", "Paris"], ["in", "paris"], ["Paris"]]
    return backbone, preprocessor, sentences, elmo_features.layer_features(
        backbone, preprocessor, sentences, batch_size=2)


def test_read_conll_keeps_case_unless_asked(tmp_path):
    path = tmp_path / "tags.conll"
    path.write_text("I\tO\nlove\tO\nParis\tB-location\n\t\nOK\tO\n", encoding="utf-8")
    assert elmo_features.read_conll(str(path)) == [
        (["I", "love", "Paris"], ["O", "O", "B-location"]), (["OK"], ["O"])]
    assert elmo_features.read_conll(str(path), lowercase=True)[0][0] == ["i", "love", "paris"]


def test_cached_layers_equal_the_full_length_biLM_and_see_case(cached):
    backbone, preprocessor, sentences, features = cached
    stack = features["layer_outputs"]
    assert stack.shape == (3, 3, 5, 8)  # longest sentence + <S> </S>
    packed = preprocessor(np.asarray([" ".join(words) for words in sentences]))
    full = backbone({name: packed[name].numpy().astype("int32") for name in
                     ("token_ids", "character_ids", "padding_mask")})["layer_outputs"].numpy()
    np.testing.assert_allclose(stack, full[:, :, :5], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(features["padding_mask"].sum(1), [5, 4, 3])
    # "Paris" vs "paris": different token-layer (char CNN) vectors.
    assert not np.allclose(stack[0, 0, 3], stack[1, 0, 2])


@pytest.mark.parametrize("mix", ["all", "top"])
def test_feature_tagger_mixes_the_cached_layers(cached, mix):
    features = cached[3]
    model = elmo_features.feature_tagger(3, 8, TINY["vocabulary_size"], 5, mix)
    assert tuple(model(features).shape) == (3, 5, 5)
    mixes = [w for w in model.trainable_weights if "layer_weights" in w.path]
    assert len(mixes) == (1 if mix == "all" else 0)
    learned = elmo_features.learned_mix(model.get_layer("input_mix"))
    assert learned["softmax(s)"] == ([0.333] * 3 if mix == "all" else [0.0, 0.0, 1.0])


def test_length_batches_cover_each_sentence_once_cut_to_their_longest():
    rng = np.random.default_rng(0)
    lengths = rng.integers(3, 12, 70)
    mask = (np.arange(12)[None] < lengths[:, None]).astype("int32")
    x = {"layer_outputs": rng.normal(size=(70, 3, 12, 2)).astype("float32"),
         "token_ids": (np.arange(70)[:, None] * mask).astype("int32"), "padding_mask": mask}
    y, weight = mask * 2, mask.astype("float32")
    batches = elmo_features.length_batches(x, y, weight, seed=1, batch_size=32)
    for _ in range(2):
        seen = []
        for index in range(len(batches)):
            inputs, labels, weights = batches[index]
            rows = inputs["token_ids"][:, 0]
            assert inputs["padding_mask"].shape[1] == lengths[rows].max()
            np.testing.assert_array_equal(inputs["layer_outputs"],
                                          x["layer_outputs"][rows][:, :, :lengths[rows].max()])
            np.testing.assert_array_equal(labels.sum(1), 2 * lengths[rows])
            seen += list(rows)
        assert sorted(seen) == list(range(70)) and len(batches) == 3
        batches.on_epoch_end()

