"""The transfer probe's sampling, peer baseline and embedding geometry
(benchmarks/transfer_probe.py)."""

import os
import sys
import types

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "benchmarks"))
import transfer_probe  # noqa: E402


def test_sample_keeps_each_class_share_and_is_seeded():
    labels = np.array([0] * 700 + [1] * 300)
    picked = transfer_probe.stratified_sample(labels, 101, seed=3)
    assert len(picked) == len(set(picked.tolist())) == 101
    assert sorted(np.bincount(labels[picked]).tolist()) == [30, 71]
    assert picked.tolist() == transfer_probe.stratified_sample(labels, 101, seed=3).tolist()
    assert picked.tolist() != transfer_probe.stratified_sample(labels, 101, seed=4).tolist()


def test_bag_of_words_separates_words_it_has_seen():
    train = ["good fine film", "great good acting", "bad dull plot", "awful bad film"] * 5
    labels = np.array([1, 1, 0, 0] * 5)
    accuracy = transfer_probe.bag_of_words_accuracy(
        train, labels, ["a good one", "so bad"], np.array([1, 0]))
    assert accuracy == 1.0


def test_embedding_geometry_tells_collapsed_rows_from_isotropic_ones():
    rng = np.random.default_rng(0)
    isotropic = rng.normal(0, 0.02, (400, 64))
    collapsed = 0.5 * np.ones((400, 64)) + rng.normal(0, 0.01, (400, 64))
    table = np.concatenate([isotropic, collapsed])
    backbone = types.SimpleNamespace(token_embedding=types.SimpleNamespace(embeddings=table))
    bands = transfer_probe.embedding_geometry(backbone, bands=2)
    assert [band["ids"] for band in bands] == ["0-399", "400-799"]
    assert bands[0]["cone"] < 0.1 < 0.99 < bands[1]["cone"]
    assert abs(bands[1]["row_norm"] - 0.5 * 8) < 0.1
