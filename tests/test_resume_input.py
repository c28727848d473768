"""A resumed Trainer stage continues exactly where the killed one stopped: its training input,
built again after ``keras.utils.set_random_seed`` and cut by `fit_loop.resume_input` at the
last checkpoint, gives the very batches the uninterrupted input gave from that step on,
across the repeat boundaries where a ``reshuffle_each_iteration`` shuffle draws a new order.

Each case builds one stage's training input the way the stage's ``train`` builds it (the
builder, the preprocessor over a tiny word vocabulary, shuffle and repeat as the stage asks,
the recipe seed) on a few records the test writes: a pass is 2.5 batches, and the compared
batches cross two repeat boundaries. The registries say what has to be covered: every task
kind that trains and every pretraining objective (each masked-LM objective with dynamic
masking too). The knowledge-graph embeddings (TransE), trained without checkpoints, have a
test of their own: a rebuilt input repeats every epoch's order.
"""

from __future__ import annotations

import json
import re
import types

import keras
import numpy as np
import pytest
import tensorflow as tf

from synthetic_records import write_pretraining_records
from lmfactory.components import tasks
from lmfactory.components.pretraining_data import features as pretraining_features
from lmfactory.components.pretraining_data import objectives
from lmfactory.components.pusher import model_guard
from lmfactory.components.trainer import fit_loop

SEED = 17  # the recipe's seed: run_fn seeds everything with it, the input's shuffle too
BATCH = 2
RECORDS = 5  # a pass is 2.5 batches: batches straddle the repeat boundary
BATCHES = 9  # 18 examples: more than three passes
CHECKPOINTED_EPOCHS, STEPS_PER_EPOCH = 2, 2  # the resumed input starts at batch 4 (pass 2)
TOTAL_STEPS = 100
SEQUENCE_LENGTH = 24
# More than two passes, and the resumed batches start before the second repeat boundary.
assert BATCHES * BATCH > 2 * RECORDS > CHECKPOINTED_EPOCHS * STEPS_PER_EPOCH * BATCH

# Words of the records; "*" and "~" are the mention marks of relation classification and
# entity typing, each a token of the vocabulary.
SENTENCES = [
    "the cat sat on the mat near paris",
    "a dog ran to the park in london",
    "paris is the capital of france",
    "the river flows past the old mill",
    "london has a large old bridge",
    "we saw the cat and the dog today * ~",
]
ENTITIES = ["paris", "london", "cat", "dog", "mill"]
LABEL_WORDS = ["negative", "positive"]
# The task kinds without a training input of their own, and why (the coverage test fails on
# any other kind without a case).
NO_TRAINING_INPUT = {
    # A bare backbone imported from a checkpoint (CheckpointImporter writes the record); no
    # stage trains it (in_recipes=False), it is only exported and served as an encoder.
    "encoder": "import only",
}


# --------------------------------------------------------------------------- records


def _feature(value) -> tf.train.Feature:
    values = value if isinstance(value, (list, tuple)) else [value]
    if all(isinstance(v, str) for v in values):
        return tf.train.Feature(bytes_list=tf.train.BytesList(
            value=[v.encode("utf-8") for v in values]))
    if all(isinstance(v, int) for v in values):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=values))
    return tf.train.Feature(float_list=tf.train.FloatList(value=values))


def _write(folder, name: str, rows: list) -> str:
    """GZIP TFRecords of ``rows`` (dicts of feature name -> str, int, float or lists of
    them), as the ingestion writes them; returns their file pattern."""
    folder = folder / name
    folder.mkdir()
    with tf.io.TFRecordWriter(str(folder / "data-00000-of-00001.gz"), options="GZIP") as out:
        for row in rows:
            out.write(tf.train.Example(features=tf.train.Features(feature={
                key: _feature(value) for key, value in row.items()})).SerializeToString())
    return str(folder / "*")


# --------------------------------------------------------------------------- vocabularies


def _word_vocabulary(folder, special_tokens: dict) -> str:
    """A word vocabulary of the test's words with ``special_tokens``."""
    from lmfactory.components.vocabulary import executor

    config = executor.VocabularyConfig(kind="word", vocab_size=80, min_frequency=1,
                                       lowercase=True, special_tokens=special_tokens)
    counts = executor.count_words(SENTENCES + LABEL_WORDS, config)
    executor.learn_and_write(counts, str(folder), config, "test sentences")
    return str(folder)


@pytest.fixture(scope="module")
def bert_vocab(tmp_path_factory) -> str:
    """A vocabulary with BERT's special tokens, of whole words: the preprocessors pack the
    ids of any tokenizer, and a word tokenizer's graph is the cheapest to trace."""
    from lmfactory.components.vocabulary import wordpiece

    return _word_vocabulary(tmp_path_factory.mktemp("bert"), wordpiece.SPECIAL_TOKENS)


@pytest.fixture(scope="module")
def seq2seq_vocab(tmp_path_factory) -> str:
    """A word vocabulary with the start and end tokens of the encoder-decoders (RNNsearch's
    special tokens), as translation and text-to-text read it."""
    from lmfactory import models

    return _word_vocabulary(tmp_path_factory.mktemp("words"),
                            models.get("rnnsearch").special_tokens)


# --------------------------------------------------------------------------- task kinds
# Each returns ``build()``: the stage's training input, built from scratch as a new run
# builds it (the preprocessor too).


def _sentence_task(pattern: str, task: dict, vocab: dict):
    """``build()`` of a classification-style task (classification, regression): what
    `task_data.make_classification_dataset` gives for its records at ``pattern``."""
    from lmfactory.components.trainer import task_data
    from lmfactory.models.classifier_preprocessor import classifier_preprocessor

    def build():
        preprocessor = classifier_preprocessor(
            vocab["bert"], "bert", SEQUENCE_LENGTH,
            num_text_features=len(task["text_features"]))
        return task_data.make_classification_dataset(
            pattern, shuffle=True, repeat=True, preprocessor=preprocessor,
            text_features=task["text_features"], batch_size=BATCH, seed=SEED,
            label_reader=task_data.LabelReader.for_task(task))

    return build


def _classification(folder, vocab: dict):
    rows = [{"sentence1": SENTENCES[i], "sentence2": SENTENCES[i + 1], "label": i % 3}
            for i in range(RECORDS)]
    return _sentence_task(_write(folder, "classification", rows), {
        "kind": "classification", "text_features": ["sentence1", "sentence2"],
        "num_classes": 3}, vocab)


def _regression(folder, vocab: dict):
    rows = [{"sentence": SENTENCES[i], "score": 0.5 + i} for i in range(RECORDS)]
    return _sentence_task(_write(folder, "regression", rows), {
        "kind": "regression", "text_features": ["sentence"], "num_classes": 1,
        "label_feature": "score"}, vocab)


def _relation_classification(folder, vocab: dict):
    from lmfactory.components.tasks import relation_classification as kind
    from lmfactory.components.trainer import task_data

    rows = [{"text": f"{ENTITIES[i]} and {ENTITIES[i - 1]} : {SENTENCES[i]}",
             "head": ENTITIES[i], "tail": ENTITIES[i - 1],
             "relation": ["near", "far", "in"][i % 3]} for i in range(RECORDS)]
    pattern = _write(folder, "relations", rows)

    def build():
        labels = kind.label_vocabulary([pattern, pattern], "relation")
        task = {"kind": "classification", "label_feature": "relation",
                "label_vocabulary": labels}
        preprocessor = kind.relation_preprocessor(vocab["bert"], "bert",
                                                  SEQUENCE_LENGTH, {})
        return task_data.make_classification_dataset(
            pattern, shuffle=True, repeat=True, preprocessor=preprocessor,
            text_features=["text", "head", "tail"], batch_size=BATCH, seed=SEED,
            label_reader=task_data.LabelReader.for_task(task))

    return build


def _entity_typing(folder, vocab: dict):
    from lmfactory.components.tasks import entity_typing as kind
    from lmfactory.components.tasks.relation_classification import label_vocabulary
    from lmfactory.components.trainer import task_data

    rows = [{"text": f"{ENTITIES[i]} : {SENTENCES[i]}", "mention": ENTITIES[i],
             "types": ["place city", "animal", "place"][i % 3]} for i in range(RECORDS)]
    pattern = _write(folder, "typing", rows)

    def build():
        labels = label_vocabulary([pattern, pattern], "types", multi_label=True,
                                  what="entity typing")
        preprocessor = kind.typing_preprocessor(vocab["bert"], "bert", SEQUENCE_LENGTH,
                                                {})
        return task_data.make_classification_dataset(
            pattern, shuffle=True, repeat=True, preprocessor=preprocessor,
            text_features=["text", "mention"], batch_size=BATCH, seed=SEED,
            label_reader=kind.MultiHotLabels("types", labels))

    return build


def _tagging(folder, vocab: dict):
    from lmfactory.components.tasks.tagging import tag_vocabulary
    from lmfactory.components.trainer.task_data import read_records
    from lmfactory.models.tasks.ner_training import tagging_dataset
    from lmfactory.models.tasks.token_classification_preprocessor import (
        token_classification_preprocessor)

    rows = []
    for i in range(RECORDS):
        words = SENTENCES[i].split()
        rows.append({"tokens": words, "tags": ["B-LOC" if word in ENTITIES else "O"
                                               for word in words]})
    pattern = _write(folder, "tagging", rows)

    def build():
        preprocessor = token_classification_preprocessor(
            vocab["bert"], tag_vocabulary(pattern, pattern), SEQUENCE_LENGTH)
        return tagging_dataset(read_records(pattern), preprocessor=preprocessor,
                               batch_size=BATCH, shuffle=True, repeat=True, seed=SEED)

    return build


def _span_qa(folder, vocab: dict):
    """span_qa.train featurizes the questions eagerly, in order, into numpy windows (a pure
    function of the records), then `span_qa._dataset` shuffles, repeats and batches them:
    that tf.data input is what a rebuilt run builds again, here over synthetic windows with
    the featurizer's keys."""
    del folder, vocab
    from lmfactory.components.tasks import span_qa

    rng = np.random.default_rng(3)
    lengths = rng.integers(8, SEQUENCE_LENGTH, RECORDS)
    windows = {
        "token_ids": rng.integers(5, 100, (RECORDS, SEQUENCE_LENGTH)),
        "padding_mask": (np.arange(SEQUENCE_LENGTH) < lengths[:, None]).astype("int64"),
        "segment_ids": (np.arange(SEQUENCE_LENGTH) >= 6).astype("int64")[None].repeat(
            RECORDS, 0),
        "example_index": np.arange(RECORDS)}
    starts = rng.integers(6, 8, RECORDS)
    labels = (starts, starts + rng.integers(0, 2, RECORDS))
    # The span head's inputs (model_inputs reads only the names of the model's inputs).
    model = types.SimpleNamespace(input={"token_ids": None, "padding_mask": None,
                                         "segment_ids": None})
    return lambda: span_qa._dataset(model, windows, labels, batch_size=BATCH, shuffle=True,
                                    seed=SEED)


def _multiple_choice(folder, vocab: dict):
    from lmfactory.components.tasks.multiple_choice_data import make_multiple_choice_dataset
    from lmfactory.models.tasks.multiple_choice_preprocessor import (
        MultipleChoicePreprocessor)

    rows = [{"context": SENTENCES[i], "choices": ENTITIES[:4], "label": i % 4}
            for i in range(RECORDS)]
    pattern = _write(folder, "choices", rows)

    def build():
        preprocessor = MultipleChoicePreprocessor.from_vocabulary(vocab["bert"], "bert",
                                                                  SEQUENCE_LENGTH)
        return make_multiple_choice_dataset(pattern, preprocessor, batch_size=BATCH,
                                            shuffle=True, repeat=True, seed=SEED,
                                            num_choices=4)

    return build


def _translation(folder, vocab: dict):
    from lmfactory.components.example_gen import parallel
    from lmfactory.components.tasks import translation

    rows = [{parallel.SOURCE_FEATURE: SENTENCES[i],
             parallel.TARGET_FEATURE: SENTENCES[(i + 2) % RECORDS]} for i in range(RECORDS)]
    pattern = _write(folder, "parallel", rows)

    def build():
        preprocessor = translation.preprocessor_for(vocab["seq2seq"], SEQUENCE_LENGTH)
        return translation.make_dataset(pattern, preprocessor, batch_size=BATCH,
                                        shuffle=True, repeat=True, seed=SEED)

    return build


def _text_to_text(folder, vocab: dict):
    from lmfactory.components.tasks import text_to_text

    rows = [{"sentence": SENTENCES[i], "label": i % 2} for i in range(RECORDS)]
    pattern = _write(folder, "text_to_text", rows)
    task = {"kind": "text_to_text", "text_features": ["sentence"], "prefix": "sentiment:",
            "label_words": LABEL_WORDS, "label_feature": "label"}

    def build():
        preprocessor = text_to_text.preprocessor_for(vocab["seq2seq"], SEQUENCE_LENGTH)
        return text_to_text.make_dataset(pattern, task, preprocessor, batch_size=BATCH,
                                         shuffle=True, repeat=True, seed=SEED)

    return build


TASK_CASES = {
    "classification": _classification,
    "regression": _regression,
    "relation_classification": _relation_classification,
    "entity_typing": _entity_typing,
    "tagging": _tagging,
    "span_qa": _span_qa,
    "multiple_choice": _multiple_choice,
    "translation": _translation,
    "text_to_text": _text_to_text,
}

# --------------------------------------------------------------------------- objectives
# ``language_model`` trains every objective (pretraining, LM fine-tuning, distillation: the
# one reader, features.make_dataset); ``word_vectors`` continues its own objectives.

LANGUAGE_MODEL_OBJECTIVES = (
    "albert_mlm_sop", "bert_mlm_nsp", "bilm", "causal_lm", "causal_lm_bptt",
    "causal_lm_streams", "cbow", "ernie_dea", "mlm", "permutation_lm", "skipgram",
    "span_corruption")
# The masked-LM objectives that can also mask anew on every read (RoBERTa §4.1).
DYNAMIC_MASKING_OBJECTIVES = ("albert_mlm_sop", "bert_mlm_nsp", "mlm")
WORD_VECTOR_OBJECTIVES = ("cbow", "skipgram")
VOCABULARY_SIZE = 30
SPECIAL_IDS = {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}


def _pretraining_config(objective: str, dynamic_masking: bool = False) -> dict:
    """The objective's resolved generation config plus what the generation records from the
    vocabulary (its size, the special ids)."""
    config = pretraining_features.resolve_config({
        "objective": objective, "max_seq_length": 12, "max_predictions_per_seq": 3,
        "dynamic_masking": dynamic_masking})
    config.update(vocabulary_size=VOCABULARY_SIZE, tokenizer_kind="wordpiece",
                  special_token_ids=SPECIAL_IDS, sep_id=3, cls_id=2, end_of_text_id=3)
    return config


def _pretraining_input(folder, kind: str, objective: str, dynamic_masking: bool):
    config = _pretraining_config(objective, dynamic_masking)
    (folder / "records").mkdir()
    path = str(folder / "records" / "data-00000-of-00001.gz")
    write_pretraining_records(config, path, VOCABULARY_SIZE, count=RECORDS, seed=3)
    if kind == "word_vectors":  # word_vectors.train
        return lambda: pretraining_features.make_dataset(
            str(folder / "records" / "*"), config, shuffle=True, repeat=True,
            batch_size=BATCH, seed=SEED)
    ordered = objectives.get(objective).ordered_streams  # language_model.train
    return lambda: pretraining_features.make_dataset(
        str(folder / "records" / "*"), config, shuffle=not ordered, repeat=True,
        training=True, batch_size=BATCH, seed=SEED)


CASES = (
    [pytest.param(kind, None, False, id=kind) for kind in TASK_CASES]
    + [pytest.param("language_model", name, False, id=f"language_model-{name}")
       for name in LANGUAGE_MODEL_OBJECTIVES]
    + [pytest.param("language_model", name, True, id=f"language_model-{name}-dynamic")
       for name in DYNAMIC_MASKING_OBJECTIVES]
    + [pytest.param("word_vectors", name, False, id=f"word_vectors-{name}")
       for name in WORD_VECTOR_OBJECTIVES])


# --------------------------------------------------------------------------- comparison

# Ops that draw from a random state kept in the op (seeded by the global and op seeds): in a
# parallel map their draws go to the elements in the order the threads happen to call them,
# so neither a rebuilt nor a resumed input repeats them. The stateless ops are not these.
_STATEFUL_RANDOM_OP = re.compile(
    r"^(Random(?!IndexShuffle)|Multinomial|TruncatedNormal|ParameterizedTruncatedNormal|"
    r"Stateful(?!PartitionedCall)|RngReadAndSkip|RngSkip)")


def _random_ops_in_parallel_functions(dataset) -> list:
    """The stateful random ops of every function a parallel tf.data transformation of
    ``dataset`` runs (its own function and those it calls), read from the dataset's graph
    (tf.data's ``_as_serialized_graph``, what its checkpoints and tf.data service use)."""
    graph = tf.compat.v1.GraphDef.FromString(dataset._as_serialized_graph().numpy())
    parallel = [name for node in graph.node if node.op.startswith("Parallel")
                for name in model_guard.functions_called(node)]
    return sorted(f"{node.op} ({node.name})" for node in model_guard.function_nodes(
        graph, parallel) if _STATEFUL_RANDOM_OP.match(node.op))


def _batches(dataset, count: int) -> list:
    return list(dataset.take(count).as_numpy_iterator())


def _first_difference(expected: list, got: list, offset: int) -> str | None:
    """Where ``got`` first differs from ``expected`` (every tensor of every batch, labels
    and weights included, exactly), or None."""
    if len(got) != len(expected):
        return f"{len(got)} batches instead of {len(expected)}"
    for index, (want, have) in enumerate(zip(expected, got)):
        want_paths = keras.tree.flatten_with_path(want)
        have_paths = keras.tree.flatten_with_path(have)
        if [path for path, _ in want_paths] != [path for path, _ in have_paths]:
            return f"batch {offset + index}: another structure"
        for (path, a), (_, b) in zip(want_paths, have_paths):
            a, b = np.asarray(a), np.asarray(b)
            where = f"batch {offset + index}, tensor {path}"
            if a.dtype != b.dtype or a.shape != b.shape:
                return f"{where}: {b.dtype} {b.shape} instead of {a.dtype} {a.shape}"
            if not np.array_equal(a, b):
                at = tuple(np.argwhere(a != b)[0])
                return f"{where}, at {at}: {b[at]!r} instead of {a[at]!r}"
    return None


def _backup_dir(tmp_path) -> str:
    """A backup folder as Keras' BackupAndRestore leaves it after CHECKPOINTED_EPOCHS
    intervals (its training_metadata.json)."""
    folder = tmp_path / "backup"
    folder.mkdir()
    (folder / fit_loop.BACKUP_METADATA).write_text(
        json.dumps({"epoch": CHECKPOINTED_EPOCHS, "batch": 0}), encoding="utf-8")
    return str(folder)


def _build(build):
    keras.utils.set_random_seed(SEED)  # run_fn seeds everything first
    return build()


# --------------------------------------------------------------------------- tests


@pytest.mark.parametrize("kind, objective, dynamic_masking", CASES)
def test_resumed_input_continues_the_uninterrupted_one(kind, objective, dynamic_masking,
                                                       tmp_path, bert_vocab,
                                                       seq2seq_vocab):
    """A stage killed after CHECKPOINTED_EPOCHS checkpoints and run again trains on batches
    CHECKPOINTED_EPOCHS * STEPS_PER_EPOCH, ... of the uninterrupted run (exactly, across the
    reshuffles at the repeat boundaries); otherwise the resumed training differs from the
    uninterrupted one without a word. The input's parallel functions draw no numbers from a
    stateful random op either: those go to the batches in thread order, so a resumed input
    differs at random (and this test would only fail at random)."""
    if objective is None:
        build = TASK_CASES[kind](tmp_path, {"bert": bert_vocab,
                                            "seq2seq": seq2seq_vocab})
    else:
        build = _pretraining_input(tmp_path, kind, objective, dynamic_masking)
    uninterrupted = _batches(_build(build), BATCHES)
    assert len(uninterrupted) == BATCHES
    resumed_input = _build(build)
    random_ops = _random_ops_in_parallel_functions(resumed_input)
    resumed = fit_loop.resume_input(resumed_input, _backup_dir(tmp_path), STEPS_PER_EPOCH,
                                    TOTAL_STEPS)
    start = CHECKPOINTED_EPOCHS * STEPS_PER_EPOCH
    difference = _first_difference(uninterrupted[start:], _batches(resumed, BATCHES - start),
                                   start)
    assert not random_ops and difference is None, (
        f"The resumed input differs from the uninterrupted one: {difference}; stateful "
        f"random ops in its parallel functions: {random_ops}")


def test_the_uninterrupted_input_reshuffles_at_each_repeat(tmp_path):
    """The batches compared above cross repeat boundaries that draw a new order (the shuffle
    reshuffles each pass), so a resumed input that restarted the shuffle would be caught."""
    build = _pretraining_input(tmp_path, "language_model", "mlm", False)
    rows = np.concatenate([x["token_ids"] for x, _, _ in _batches(_build(build), 2 * RECORDS)])
    passes = [[row.tobytes() for row in rows[i:i + RECORDS]]
              for i in range(0, len(rows), RECORDS)]
    assert len(passes) == 4 and all(sorted(one) == sorted(passes[0]) for one in passes)
    assert len(set(passes[0])) == RECORDS  # every pass holds every record once
    assert any(one != passes[0] for one in passes[1:])


def test_transe_input_repeats_its_passes_when_built_again(monkeypatch):
    """TransE (the KGEmbeddingTrainer's embeddings, ERNIE's entity vectors) trains on the
    train triples shuffled with ``settings["seed"]``, a new order each epoch (Keras reads a
    finite dataset from a new iterator each epoch). The component trains in one go, without
    a checkpoint to resume from (no `fit_loop`), so its runs repeat only when a rebuilt input
    gives every epoch's order again, which is checked here epoch by epoch, whatever global
    seed the process held before (the component seeds itself with ``settings["seed"]``, so a
    re-run whose earlier stages are cached trains as the first run did)."""
    from lmfactory.components.knowledge_graph import transe

    triples = np.array([[h, h % 2, (h + 1) % 6] for h in range(6)], np.int32)
    graph = types.SimpleNamespace(splits={"train": triples}, num_entities=6, num_relations=2)
    captured = []

    def fit(model, data, **kwargs):
        del model, kwargs
        captured.append(data)
        return types.SimpleNamespace(history={})

    monkeypatch.setattr(transe.TransE, "fit", fit)
    embedding = {"dim": 4, "batch_size": 4, "seed": 5, "epochs": 3}

    def epochs(earlier_seed):
        tf.random.set_seed(earlier_seed)  # what an earlier stage in the process left
        transe.train_transe(graph, embedding)
        data = captured[-1]
        return [np.concatenate(list(data.as_numpy_iterator())) for _ in range(3)]

    first, again = epochs(None), epochs(1234)
    for epoch, (a, b) in enumerate(zip(first, again)):
        np.testing.assert_array_equal(a, b, err_msg=f"epoch {epoch}")
        assert sorted(map(tuple, a)) == sorted(map(tuple, triples))
    assert not np.array_equal(first[0], first[1]) or not np.array_equal(first[1], first[2])


def _masks_dynamically(objective: str) -> bool:
    """Whether ``objective`` takes ``dynamic_masking`` and then reads other records (its
    masks drawn by the reader instead of stored)."""
    try:
        dynamic = _pretraining_config(objective, dynamic_masking=True)
    except ValueError:
        return False
    return (pretraining_features.feature_spec(dynamic)
            != pretraining_features.feature_spec(_pretraining_config(objective)))


def test_every_task_kind_and_objective_has_a_case():
    """A new task kind, objective or dynamically masked objective fails here until it has a
    case above (or, for a kind, a reason in NO_TRAINING_INPUT)."""
    covered = set(TASK_CASES) | {"language_model", "word_vectors"}
    assert covered | set(NO_TRAINING_INPUT) == set(tasks.names()), (
        "task kinds without a resume case (or with a stale one)")
    assert not covered & set(NO_TRAINING_INPUT)
    assert tasks.get("encoder").in_recipes is False  # NO_TRAINING_INPUT's reason
    assert set(LANGUAGE_MODEL_OBJECTIVES) == set(objectives.names()), (
        "pretraining objectives without a resume case (or with a stale one)")
    assert set(DYNAMIC_MASKING_OBJECTIVES) == {
        name for name in objectives.names() if _masks_dynamically(name)}
    assert set(WORD_VECTOR_OBJECTIVES) == set(tasks.get("word_vectors").objectives)
