"""Word vectors in the DAG (word2vec, Mikolov et al. 2013): the fine-tuning slot continues
the word-vector objective on ``data.target_corpus``, as ``causal_lm`` continues a decoder's
next-token training, and the pushed model serves the vectors.

* recipe: ``finetuning.task: word_vectors``; the target corpus is turned into records of
  the recipe's objective (``skipgram`` / ``cbow``, components/pretraining_data/
  word_windows.py) with the pretraining vocabulary; optional ``finetuning.analogy_file``
  (``questions-words.txt`` format) and ``finetuning.similarity_file`` (``wordsim353.tsv``
  format) and ``finetuning.nearest_neighbours`` (k served, default 10);
* train: the architecture's task model of the records' objective, warm-started from the
  pretrained backbone, its noise distribution from the records' ``token_counts``;
* export (also of the Pretrainer's model: the kind owns models of these objectives,
  `TaskKind.objectives`): the SavedModel of components/tasks/word_vectors_serving.py
  (``serving_default``: words -> vectors; ``nearest_neighbours``: words -> top-k words and
  cosine scores), and TensorBoard projector files in ``<model uri>/projector/``;
* evaluate: the held-out negative-sampling loss per pair (``sgns_loss``, negatives drawn
  at random, so it varies slightly between runs) and, when the task names the files, the
  analogy accuracy and the WordSim Spearman correlation over the vocabulary's words
  (components/evaluator/word_vector_metrics.py).

Parts:
    record parsing: components.pretraining_data.features
    head: models.registry.Architecture.pretrainer
    preprocessor: models.tokenizers.load_tokenizer
    training step: components.tasks.word_vectors.train
    serving export: components.tasks.word_vectors.export,
        components.tasks.word_vectors_serving.WordVectorServing
    metrics: components.tasks.word_vectors.evaluate, components.evaluator.word_vector_metrics
"""

from __future__ import annotations

import os

import numpy as np

from lmfactory.components.evaluator import word_vector_metrics
from lmfactory.components.pretraining_data import features as pretraining_features
from lmfactory.components.tasks import registry

PROJECTOR_DIR = "projector"  # in the Model artifact, beside Format-Serving
WORD_VECTORS = registry.register(registry.TaskKind(
    name="word_vectors", module=__name__,
    metrics=("sgns_loss", "analogy_accuracy", "similarity_spearman"),
    official_metrics=("analogy_accuracy", "similarity_spearman"),
    task_args=("negatives", "seed"), data_section="target_corpus",
    finetuning_defaults=(("analogy_file", None), ("similarity_file", None),
                         ("nearest_neighbours", 10)),
    required_record_keys=("kind",), objectives=("skipgram", "cbow")))
_FILES = ("analogy_file", "similarity_file")


def task_record(kind, finetuning: dict, source: dict) -> dict:
    files = {key: os.path.abspath(finetuning[key]) if finetuning.get(key) else None
             for key in _FILES}
    return {"kind": kind.name, "format": source.get("format"),
            "official_metrics": list(kind.official_metrics),
            "nearest_neighbours": int(finetuning.get("nearest_neighbours") or 10), **files}


def check_recipe(check, recipe: dict, arch) -> None:
    objective = (recipe.get("objective") or {}).get("name")
    if objective not in WORD_VECTORS.objectives or objective not in arch.objectives:
        check.fail("finetuning.task", f"word_vectors continues a word-vector objective "
                                      f"({', '.join(WORD_VECTORS.objectives)}); {arch.name} "
                                      f"trains {objective!r}")
    check.source("data.target_corpus")
    check.positive_int("finetuning.nearest_neighbours")
    for key in _FILES:
        path = check.get(f"finetuning.{key}", required=False)
        if path is not None and (not isinstance(path, str) or not os.path.isfile(path)):
            check.fail(f"finetuning.{key}", f"must be an existing file, got {path!r}")


def train(context) -> dict:
    """Continues the records' objective from the base model's backbone."""
    from lmfactory import models
    from lmfactory.models.tokenizers import load_tokenizer

    config = context.config
    data_config = pretraining_features.read_pretraining_config(context.examples_uri)
    vocab_dir = pretraining_features.vocabulary_dir(context.examples_uri)
    task_cls = models.get(config.architecture).pretrainer(data_config["objective"])
    with context.strategy.scope():
        backbone = context.backbone(load_tokenizer(vocab_dir).vocabulary_size())
        task_model = task_cls(backbone, token_counts=data_config.get("token_counts"),
                              **config.task_args)
        task_model.compile(optimizer=context.optimizer(), jit_compile=config.jit_compile)
    batch = dict(batch_size=config.batch_size, seed=config.seed)
    train_data = pretraining_features.make_dataset(
        context.train_files, data_config, shuffle=True, repeat=True, **batch)
    eval_data = pretraining_features.make_dataset(
        context.eval_files, data_config, shuffle=False, repeat=True, **batch)
    metrics = context.fit(task_model, train_data, eval_data)
    task = dict(config.task or {"kind": WORD_VECTORS.name}, objective=data_config["objective"])
    return dict(task_model=task_model, backbone=backbone, vocab_dir=vocab_dir,
                metrics=metrics, task=task)


def vocabulary_words(vocab_dir: str) -> tuple:
    """``(tokenizer, words by id, special-token ids)`` of a vocabulary folder."""
    from lmfactory.models.tokenizers import load_tokenizer, read_tokenizer_config

    tokenizer = load_tokenizer(vocab_dir)
    words = [str(word) for word in tokenizer.get_vocabulary()]
    specials = read_tokenizer_config(vocab_dir).get("special_tokens", {}).values()
    special_ids = sorted({tokenizer.token_to_id(token) for token in specials} - {None})
    return tokenizer, words, special_ids


def export(task_model, preprocessor, vocab_dir: str, model_config: dict,
           export_dir: str) -> None:
    from lmfactory.components.tasks.word_vectors_serving import (
        WordVectorServing, save_word_vectors, write_projector_files)

    del preprocessor
    backbone = getattr(task_model, "backbone", task_model)
    vectors = np.asarray(backbone.word_vectors.numpy(), dtype=np.float32)
    tokenizer, words, special_ids = vocabulary_words(vocab_dir)
    top_k = int(model_config["task"].get("nearest_neighbours", 10))
    save_word_vectors(WordVectorServing(tokenizer, vectors, words, special_ids, top_k),
                      export_dir)
    write_projector_files(os.path.join(os.path.dirname(export_dir.rstrip("/")), PROJECTOR_DIR),
                          vectors, words, special_ids)


def evaluate(model_uri: str, file_pattern: str, task: dict, config: dict) -> dict:
    """Held-out ``sgns_loss`` (+ analogy / similarity when the task names the files)."""
    from lmfactory.components.trainer.model_artifact import load_task_model, vocabulary_dir_of

    model = load_task_model(model_uri)
    results = {"sgns_loss": heldout_loss(model, file_pattern, config.get("batch_size", 64),
                                         config.get("max_batches"))}
    _, words, special_ids = vocabulary_words(vocabulary_dir_of(model_uri))
    vectors = model.backbone.word_vectors.numpy()
    keep = [i for i in range(len(words)) if i not in set(special_ids)]
    vectors, words = vectors[keep], [words[i] for i in keep]
    if task.get("analogy_file"):
        analogies = word_vector_metrics.analogy_accuracy(
            vectors, words, word_vector_metrics.read_analogies(task["analogy_file"]))
        results.update(analogy_accuracy=analogies["accuracy"],
                       analogy_questions=analogies["questions"],
                       analogy_skipped=analogies["skipped"])
    if task.get("similarity_file"):
        similarity = word_vector_metrics.similarity_spearman(
            vectors, words, word_vector_metrics.read_word_pairs(task["similarity_file"]))
        results.update(similarity_spearman=similarity["spearman"],
                       similarity_pairs=similarity["pairs"],
                       similarity_skipped=similarity["skipped"])
    return results


def heldout_loss(model, file_pattern: str, batch_size: int, max_batches=None) -> float:
    """The mean negative-sampling loss per (input, target) pair on held-out records (the
    task model's ``sgns_loss`` metric, which weights each record by its real pairs)."""
    examples_uri = os.path.dirname(os.path.dirname(file_pattern))
    data_config = pretraining_features.read_pretraining_config(examples_uri)
    dataset = pretraining_features.make_dataset(file_pattern, data_config,
                                                batch_size=batch_size, shuffle=False,
                                                repeat=False)
    if max_batches is not None:
        dataset = dataset.take(int(max_batches))
    model.compile(optimizer="sgd")
    return float(model.evaluate(dataset, return_dict=True, verbose=0)["sgns_loss"])
