"""Does a pretrained backbone carry what the task needs? Linear probes of frozen features.

``benchmarks/transfer.py`` measures the end result (fine-tuned pretrained model minus the
from-scratch control). When that gain is negative it cannot say whether the pretrained
features lack the task's information or the fine-tuning loses it. This script separates the
two on one DAG run's Pretrainer output, with the same labelled sample for every model:

- a bag-of-words logistic regression (scikit-learn) on the sample: the peer a transfer
  learner has to beat (Wang & Manning 2012's baseline family);
- a logistic-regression probe on the frozen backbone's features (mean of the final hidden
  states over the real tokens, and the first token's state), for the pretrained backbone
  and for a freshly initialised one of the same configuration (random features: the
  floor a probe reaches without any learning in the backbone). The probe's L2 strength is
  picked by 5-fold cross-validation on the sample, never on the eval split;
- the geometry of the token embeddings: mean row norm, and the norm of the mean unit row
  (0 for isotropic rows, 1 when every row points the same way: the "representation
  degeneration" of tied-softmax training, Gao et al. 2019), by frequency rank of the ids.

    python benchmarks/transfer_probe.py --run RUNS/bert_tiny_sst2/pipeline \\
        --train data/demo/sst2/train.tsv --eval data/demo/sst2/dev.tsv --budget 1000

The architecture must take raw strings through the cls/sep classifier packing
(``models.classifier_preprocessor``); the TSV files hold ``sentence`` and ``label`` columns.
"""

from __future__ import annotations

import argparse
import glob
import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

PROBE_STRENGTHS = (0.01, 0.1, 1.0, 10.0)
BATCH = 256


def read_tsv(path: str, text_column: str = "sentence", label_column: str = "label"):
    with open(path, encoding="utf-8") as handle:
        header, *rows = [line.rstrip("\n").split("\t") for line in handle if line.strip()]
    text, label = header.index(text_column), header.index(label_column)
    return [row[text] for row in rows], np.array([int(row[label]) for row in rows])


def stratified_sample(labels: np.ndarray, budget: int, seed: int) -> np.ndarray:
    """Indices of ``budget`` examples, each class in its share of the split."""
    rng = np.random.default_rng(seed)
    classes, counts = np.unique(labels, return_counts=True)
    quotas = np.floor(counts / counts.sum() * budget).astype(int)
    quotas[: budget - quotas.sum()] += 1
    picked = np.concatenate([rng.choice(np.flatnonzero(labels == c), q, replace=False)
                             for c, q in zip(classes, quotas)])
    return rng.permutation(picked)


def probe_accuracy(train_x, train_y, eval_x, eval_y) -> float:
    """Logistic regression, its strength chosen by 5-fold cross-validation on the sample."""
    from sklearn.linear_model import LogisticRegressionCV
    from sklearn.preprocessing import StandardScaler
    scaler = StandardScaler().fit(train_x)
    model = LogisticRegressionCV(Cs=[1 / c for c in PROBE_STRENGTHS], cv=5, max_iter=3000)
    model.fit(scaler.transform(train_x), train_y)
    return float(model.score(scaler.transform(eval_x), eval_y))


def bag_of_words_accuracy(train_text, train_y, eval_text, eval_y) -> float:
    from sklearn.feature_extraction.text import CountVectorizer
    vectorizer = CountVectorizer(binary=True).fit(train_text)
    return probe_accuracy(vectorizer.transform(train_text).toarray(), train_y,
                          vectorizer.transform(eval_text).toarray(), eval_y)


def backbone_features(backbone, preprocessor, texts) -> dict:
    """{"mean": mean final state over real tokens, "first": the first token's state}."""
    means, firsts = [], []
    for start in range(0, len(texts), BATCH):
        inputs = preprocessor((np.array(texts[start:start + BATCH]),))
        inputs = {name: inputs[name] for name in backbone.input}
        states = np.asarray(backbone(inputs, training=False)["sequence_output"])
        mask = np.asarray(inputs["padding_mask"], dtype="float32")[..., None]
        means.append((states * mask).sum(1) / mask.sum(1))
        firsts.append(states[:, 0])
    return {"mean": np.concatenate(means), "first": np.concatenate(firsts)}


def embedding_geometry(backbone, bands=4) -> list:
    """Per band of ids (the learned vocabularies list frequent pieces first): mean row
    norm and the norm of the mean unit row (the cone: 0 isotropic, 1 collapsed)."""
    table = np.asarray(backbone.token_embedding.embeddings)
    norms = np.linalg.norm(table, axis=1)
    units = table / np.maximum(norms, 1e-12)[:, None]
    edges = np.linspace(0, len(table), bands + 1).astype(int)
    return [{"ids": f"{lo}-{hi - 1}", "row_norm": float(norms[lo:hi].mean()),
             "cone": float(np.linalg.norm(units[lo:hi].mean(0)))}
            for lo, hi in zip(edges[:-1], edges[1:])]


def run(pipeline_root: str, train_path: str, eval_path: str, budget: int, seed: int) -> dict:
    import keras

    from lmfactory import models
    from lmfactory.components.trainer.model_artifact import load_model_backbone
    from lmfactory.models.classifier_preprocessor import classifier_preprocessor

    models_found = glob.glob(os.path.join(pipeline_root, "Pretrainer", "model", "*"))
    if len(models_found) != 1:
        raise SystemExit(f"{pipeline_root}: expected one Pretrainer model, found "
                         f"{len(models_found)}")
    model_uri = models_found[0]
    train_text, train_y = read_tsv(train_path)
    eval_text, eval_y = read_tsv(eval_path)
    picked = stratified_sample(train_y, budget, seed)
    sample_text, sample_y = [train_text[i] for i in picked], train_y[picked]
    pretrained, config = load_model_backbone(model_uri)
    keras.utils.set_random_seed(seed)
    fresh = models.build(config["architecture"], config["preset"],
                         vocabulary_size=pretrained.get_config()["vocabulary_size"])
    preprocessor = classifier_preprocessor(os.path.join(model_uri, "keras", "vocabulary"),
                                           config["architecture"],
                                           config["task"]["sequence_length"])
    figures = {"run": pipeline_root, "architecture": config["architecture"],
               "budget": budget, "seed": seed, "eval_examples": len(eval_y),
               "pretraining_metrics": config.get("train_metrics", {}),
               "bag_of_words": bag_of_words_accuracy(sample_text, sample_y, eval_text, eval_y)}
    for name, backbone in (("pretrained", pretrained), ("fresh", fresh)):
        train_features = backbone_features(backbone, preprocessor, sample_text)
        eval_features = backbone_features(backbone, preprocessor, eval_text)
        figures[name] = {pool: probe_accuracy(train_features[pool], sample_y,
                                              eval_features[pool], eval_y)
                         for pool in ("mean", "first")}
        figures[name]["embeddings"] = embedding_geometry(backbone)
    return figures


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", required=True, help="a DAG run's pipeline folder")
    parser.add_argument("--train", required=True, help="labelled TSV the sample comes from")
    parser.add_argument("--eval", required=True, help="labelled TSV scored")
    parser.add_argument("--budget", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    figures = run(args.run, args.train, args.eval, args.budget, args.seed)
    print(f"bag of words: {figures['bag_of_words']:.4f}")
    for name in ("pretrained", "fresh"):
        probes = figures[name]
        print(f"{name}: mean-pooled probe {probes['mean']:.4f}, first-token probe "
              f"{probes['first']:.4f}; embeddings "
              + ", ".join(f"ids {band['ids']} norm {band['row_norm']:.3f} cone "
                          f"{band['cone']:.3f}" for band in probes["embeddings"]))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(figures, handle, indent=2)


if __name__ == "__main__":
    main()
