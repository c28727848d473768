"""Tiny serving SavedModels of every (architecture, task kind) pair, built without a DAG.

Each pair's SavedModel is what the Trainer would push: the kind's own ``export`` (through
`export.export_serving_model`) of an untrained tiny model (the conformance harness's tiny
sizes, tests/conformance/tiny.py) over a tiny vocabulary the project's own learners write
(one per tokenizer kind and special-token set, learned from a few lines of text). The
pairs come from the registries: a kind is served by every architecture having the head it
fine-tunes (`TaskKind.head`), the causal language models are served as generators and
word-vector objectives by ``word_vectors``. Models, vocabularies and exports are cached
per process so the tests that share them build each once.
"""

from __future__ import annotations

import atexit
import functools
import gc
import os
import shutil
import tempfile

import keras
import numpy as np
import tensorflow as tf

from lmfactory import models
from lmfactory.components import tasks as task_kinds
from lmfactory.components.trainer import export as export_lib
from lmfactory.models import saved_model
from lmfactory.models.tokenizers import load_tokenizer
from conformance import tiny

SEQUENCE_LENGTH = 16
NUM_CHOICES = 5  # CommonsenseQA's, as the examples of docs/SERVING.md
LABELS = ("negative", "positive", "neutral")
TAGS = ("O", "B-PER", "I-PER", "B-LOC")
TEXT = """the quick brown fox jumps over the lazy dog .
a stitch in time saves nine , and the early bird catches the worm .
where did the fox go ? it went over the hill to the river .
paris is the capital of france ; berlin is the capital of germany .
the film was a delight from start to finish , the actors were great .
the cat sat on the mat and the dog sat on the log .
* paris ~ is in * france ~ , the relation markers of relation classification .
""".splitlines()
_ROOT = tempfile.mkdtemp(prefix="serving_models_")
atexit.register(shutil.rmtree, _ROOT, True)


def vocabulary_size_for(kind: str, specials: dict) -> int:
    from lmfactory.components.vocabulary import byte_level

    if kind == "byte":
        return byte_level.vocabulary_size(specials)
    if kind == "bpe":  # the 256 byte symbols are always there
        return 256 + len(set(specials.values())) + 40
    return 60 + len(set(specials.values()))


@functools.lru_cache(maxsize=None)
def _vocabulary(kind: str, specials: tuple) -> str:
    from lmfactory.components.vocabulary.executor import VocabularyConfig
    from lmfactory.components.vocabulary.learners import LEARNERS
    from lmfactory.models import tokenizers

    special_tokens = dict(specials) or None
    folder = os.path.join(_ROOT, f"vocabulary_{kind}_{abs(hash(specials))}")
    config = VocabularyConfig(kind=kind, min_frequency=1, lowercase=True,
                              vocab_size=vocabulary_size_for(kind, dict(specials)),
                              special_tokens=special_tokens)
    learner = LEARNERS[kind]
    counts = {}
    for word, count in learner.count(TEXT * 3, config):
        counts[word] = counts.get(word, 0) + count
    os.makedirs(folder, exist_ok=True)
    settings = learner.learn_and_write(sorted(counts.items()), folder, config, "test text")
    tokenizers.write_tokenizer_config(folder, settings)
    return folder


def vocabulary(architecture: str) -> str:
    """The tiny vocabulary folder of ``architecture``'s tokenizer kind and special tokens."""
    arch = models.get(architecture)
    return _vocabulary(arch.tokenizer_kind, tuple(sorted((arch.special_tokens or {}).items())))


@functools.lru_cache(maxsize=None)
def backbone(architecture: str):
    from lmfactory.models.tokenizers import load_tokenizer

    size = load_tokenizer(vocabulary(architecture)).vocabulary_size()
    keras.utils.set_random_seed(tiny.SEED)
    overrides = dict(tiny.tiny_overrides(architecture), vocabulary_size=size)
    return models.build(architecture, tiny.smallest_preset(architecture), **overrides)


def _causal_objective(architecture: str):
    from lmfactory.components.tasks.language_model import is_causal

    return next((o for o in models.get(architecture).objectives if is_causal(o)), None)


def serving_cases() -> list:
    """``(architecture, kind)`` of every SavedModel a pipeline pushes, from the registries:
    each recipe kind that fine-tunes a head (``TaskKind.head``), for every architecture with
    that head; ``language_model`` (a generator) for every architecture with a causal
    objective; ``word_vectors`` for every architecture with a word-vector objective."""
    cases = []
    for name in models.names():
        arch = models.get(name)
        for kind_name in task_kinds.names():
            kind = task_kinds.get(kind_name)
            if not kind.in_recipes:
                continue
            if kind.head is not None and arch.has_head(kind.head) \
                    and kind.name != "regression":
                cases.append((name, kind.name))
            elif kind.name == "language_model" and _causal_objective(name) \
                    and arch.has_head("causal_lm"):
                cases.append((name, kind.name))
            elif set(kind.objectives) & set(arch.objectives) and kind.head is None:
                cases.append((name, kind.name))
    return cases


@functools.lru_cache(maxsize=None)
def _task_model(architecture: str, kind: str, variant: str = ""):
    """``(task_model, preprocessor, task record)`` as the kind's ``train`` builds them.
    Classification ``variant``: ``single`` (one text feature ``sentence``, integer labels),
    ``pair`` (``sentence1`` / ``sentence2``), ``pair_labelled`` or "" (pairs with a
    ``label_vocabulary``, or one feature for an architecture that reads only one)."""
    from lmfactory.models.classifier_preprocessor import classifier_preprocessor

    arch = models.get(architecture)
    vocab_dir = vocabulary(architecture)
    base = backbone(architecture)
    length = min(SEQUENCE_LENGTH, base.get_config().get("max_sequence_length")
                 or SEQUENCE_LENGTH)
    if kind in ("classification", "regression"):
        features = ["sentence"] if variant == "single" else ["sentence1", "sentence2"]
        try:
            preprocessor = classifier_preprocessor(vocab_dir, architecture, length,
                                                   num_text_features=len(features))
        except ValueError:  # an architecture reading one text feature (ELMo's classifier)
            if variant:
                raise
            features = ["sentence"]
            preprocessor = classifier_preprocessor(vocab_dir, architecture, length)
        classes = 1 if kind == "regression" else len(LABELS)
        model = arch.head("classification")(base, num_classes=classes)
        task = {"kind": kind, "text_features": features, "num_classes": classes,
                "sequence_length": length}
        if kind == "classification" and variant in ("", "pair_labelled"):
            task["label_vocabulary"] = list(LABELS)
        return model, preprocessor, task
    if kind == "relation_classification":
        from lmfactory.components.tasks.relation_classification import relation_preprocessor

        preprocessor = relation_preprocessor(vocab_dir, architecture, length, {})
        model = arch.head("classification")(base, num_classes=len(LABELS))
        return model, preprocessor, {"kind": kind, "text_features": ["text", "head", "tail"],
                                     "label_feature": "relation", "num_classes": len(LABELS),
                                     "label_vocabulary": list(LABELS),
                                     "sequence_length": length}
    if kind == "entity_typing":
        from lmfactory.components.tasks.entity_typing import typing_head, typing_preprocessor

        preprocessor = typing_preprocessor(vocab_dir, architecture, length, {})
        model = typing_head(architecture, base, len(LABELS), {})
        return model, preprocessor, {"kind": kind, "text_features": ["text", "mention"],
                                     "label_feature": "types", "num_classes": len(LABELS),
                                     "label_vocabulary": list(LABELS),
                                     "sequence_length": length}
    if kind == "tagging":
        from lmfactory.models.tasks.token_classification_preprocessor import (
            token_classification_preprocessor)

        packing = arch.preprocessor("tagging") or token_classification_preprocessor
        preprocessor = packing(vocab_dir, list(TAGS), length)
        model = arch.head("tagging")(base, num_labels=len(TAGS))
        return model, preprocessor, {"kind": kind, "label_vocabulary": list(TAGS),
                                     "sequence_length": length}
    if kind == "span_qa":
        from lmfactory.models.tasks.span_preprocessor import span_preprocessor

        preprocessor = span_preprocessor(vocab_dir, length, doc_stride=4, max_query_length=6)
        model = arch.head("span_qa")(base)
        return model, preprocessor, {"kind": kind, "sequence_length": length,
                                     "doc_stride": 4, "max_query_length": 6,
                                     "n_best_size": 5, "max_answer_length": 5,
                                     "version": "2.0", "null_threshold": 0.0}
    if kind == "multiple_choice":
        from lmfactory.models.tasks.multiple_choice_preprocessor import (
            MultipleChoicePreprocessor)

        if arch.preprocessor("multiple_choice") is not None:
            preprocessor = classifier_preprocessor(vocab_dir, architecture, length,
                                                   num_text_features=2,
                                                   task_kind="multiple_choice")
        else:
            preprocessor = MultipleChoicePreprocessor.from_vocabulary(vocab_dir, architecture,
                                                                      length)
        model = arch.head("multiple_choice")(base, num_choices=NUM_CHOICES)
        return model, preprocessor, {"kind": kind, "num_choices": NUM_CHOICES,
                                     "sequence_length": length}
    if kind == "language_model":
        from lmfactory.components.tasks.language_model import _schedule_args

        objective = _causal_objective(architecture)
        task_cls = arch.pretrainer(objective)
        model = task_cls(base, **_schedule_args(task_cls, {}, train_steps=10))
        return model, None, {"kind": kind, "objective": objective, "sequence_length": length}
    if kind == "word_vectors":
        objective = sorted(set(arch.objectives) & set(task_kinds.get(kind).objectives))[0]
        model = arch.pretrainer(objective)(base)
        return model, None, {"kind": kind, "objective": objective, "nearest_neighbours": 3}
    if kind in ("translation", "text_to_text"):
        model = arch.head("seq2seq_lm")(base)
        task = {"kind": kind, "sequence_length": length, "num_beams": 2, "alpha": 1.0}
        if kind == "text_to_text":
            task.update(text_features=["sentence"], prefix="sst2 sentence:",
                        label_words=["negative", "positive"], num_beams=1)
        return model, None, task
    raise ValueError(f"tests/serving_models.py does not know how to build a {kind!r} model; "
                     f"add it to _task_model")


@functools.lru_cache(maxsize=None)
def loaded(export_dir: str):
    """The SavedModel of ``export_dir``, loaded once per process (tensorflow_text must be
    imported)."""
    import tensorflow as tf

    return tf.saved_model.load(export_dir)


@functools.lru_cache(maxsize=None)
def refusal(architecture: str, kind: str, variant: str = ""):
    """The ValueError message when the kind refuses to build the pair (e.g. span QA needs
    character offsets only WordPiece gives): such a pair never trains, so it is never
    pushed; None when it builds."""
    try:
        _task_model(architecture, kind, variant)
    except ValueError as error:
        return str(error)
    return None


def exported(architecture: str, kind: str, variant: str = "") -> tuple:
    """``(SavedModel folder, model_config)`` of the pair, exported once per process
    (``pair_labelled`` is the default classification variant: the same export)."""
    return _exported(architecture, kind, "" if variant == "pair_labelled" else variant)


@functools.lru_cache(maxsize=None)
def _exported(architecture: str, kind: str, variant: str) -> tuple:
    model, preprocessor, task = _task_model(architecture, kind, variant)
    model_config = {"architecture": architecture, "task": dict(task),
                    "generation": {"max_length": 6}}
    export_dir = os.path.join(_ROOT, f"{architecture}_{kind}_{variant}", "Format-Serving")
    export_lib.export_serving_model(model, vocabulary(architecture), model_config, export_dir,
                                    preprocessor=preprocessor)
    if not variant:  # the warm-up requests now, as the Trainer writes them after its export
        _WARMED[(architecture, kind)] = _warm(architecture, kind, export_dir, model_config,
                                              saved_model.take_saved_signatures(export_dir))
    return export_dir, model_config


# (architecture, kind) -> `_warm`'s (folder, summary), written right after the export.
_WARMED: dict = {}


def warmed(architecture: str, kind: str) -> str:
    """A copy of the pair's SavedModel folder with TF Serving's warm-up requests written into
    it by the Trainer's export step (`export.write_warmup`, from three eval records of the
    kind, `eval_rows`), once per process: the requests run through the signatures the export
    traced, as in the Trainer (`loaded` of the export when those are not at hand)."""
    return _warmed(architecture, kind)[0]


def warmup_summary(architecture: str, kind: str) -> dict:
    """What `export.write_warmup` returned for `warmed`'s folder."""
    return _warmed(architecture, kind)[1]


def _warmed(architecture: str, kind: str) -> tuple:
    exported(architecture, kind)
    warmed_dir, summary = _WARMED[(architecture, kind)]
    assert summary and summary["requests"], (architecture, kind, summary)
    return warmed_dir, summary


def _warm(architecture: str, kind: str, export_dir: str, model_config: dict,
          signatures) -> tuple:
    """Copies the export and writes its warm-up requests, run through ``signatures`` (the
    functions the export traced; None: the SavedModel loaded)."""
    warmed_dir = os.path.join(_ROOT, f"{architecture}_{kind}_warmed", "Format-Serving")
    shutil.copytree(export_dir, warmed_dir)
    pattern = write_records(os.path.join(_ROOT, f"{architecture}_{kind}_eval"),
                            eval_rows(kind, architecture))
    summary = export_lib.write_warmup(warmed_dir, pattern, model_config,
                                      vocabulary(architecture),
                                      loaded=signatures or loaded(export_dir))
    return warmed_dir, summary


# --------------------------------------------------------------------- eval records

SENTENCES = ["the quick brown fox jumps over the lazy dog .",
             "paris is the capital of france .",
             "the film was a delight from start to finish ."]


def _feature(values):
    if isinstance(values[0], str):
        return tf.train.Feature(bytes_list=tf.train.BytesList(
            value=[v.encode("utf-8") for v in values]))
    return tf.train.Feature(int64_list=tf.train.Int64List(value=values))


def write_records(folder, rows) -> str:
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "data_tfrecord-00000-of-00001.gz")
    with tf.io.TFRecordWriter(path, options="GZIP") as writer:
        for row in rows:
            writer.write(tf.train.Example(features=tf.train.Features(feature={
                name: _feature(values) for name, values in row.items()})).SerializeToString())
    return os.path.join(folder, "*")


def eval_rows(kind: str, architecture: str) -> list:
    """Three eval records in the kind's format (CONTRACTS §1 / §3)."""
    if kind == "classification":  # single-sentence models read "sentence", pair ones both
        return [{"sentence": [s], "sentence1": [s], "sentence2": [s[::-1]], "label": [i % 2]}
                for i, s in enumerate(SENTENCES)]
    if kind == "relation_classification":  # the sentence and its two entities' mentions
        return [{"text": [s], "head": [s.split()[0]], "tail": [s.split()[-1]],
                 "relation": ["/location/contains"]} for s in SENTENCES]
    if kind == "entity_typing":  # the sentence, one entity's mention and its types
        return [{"text": [s], "mention": [s.split()[0]], "types": ["location film"]}
                for s in SENTENCES]
    if kind == "tagging":
        return [{"tokens": s.split(), "tags": ["O"] * len(s.split())} for s in SENTENCES]
    if kind == "span_qa":
        return [{"id": [str(i)], "title": ["t"], "question": ["what is the capital ?"],
                 "context": [s], "answers": [s.split()[0]], "answer_starts": [0],
                 "is_impossible": [0]} for i, s in enumerate(SENTENCES)]
    if kind == "multiple_choice":
        return [{"id": [str(i)], "context": [s], "label": [1],
                 "choices": s.split()[:NUM_CHOICES]}
                for i, s in enumerate(SENTENCES)]
    if kind == "translation":
        return [{"source": [s], "target": [s]} for s in SENTENCES]
    if kind == "text_to_text":
        return [{"sentence": [s], "label": [1]} for s in SENTENCES]
    tokenizer = load_tokenizer(vocabulary(architecture))
    ids = [[int(i) for i in np.ravel(tokenizer(s).numpy())] for s in SENTENCES]
    if kind == "word_vectors":  # skipgram records: a centre word and its context
        return [{"centre_id": row[1:2], "context_ids": row[:1] + row[2:3],
                 "context_mask": [1, 1]} for row in ids]
    return [{"input_ids": (row * 3)[:12]} for row in ids]  # causal_lm blocks


def example_case(kind: str) -> str:
    """The first architecture (registry order) that serves ``kind`` (regression: as
    classification)."""
    looked_up = "classification" if kind == "regression" else kind
    for name, case_kind in serving_cases():
        if case_kind == looked_up and not refusal(name, case_kind):
            return name
    raise ValueError(f"No architecture serves {kind!r}")


def _graph_parts(architecture: str, kind: str) -> tuple:
    """What a pair's serving graph is made of besides its backbone and tokenizer: the kind,
    the class of the head (or language model) the registry gives and the architecture's own
    preprocessor factory for the kind (None: the kind's default)."""
    arch = models.get(architecture)
    head_kind = task_kinds.get(kind).head
    if kind == "language_model":
        head = arch.pretrainer(_causal_objective(architecture))
    elif kind == "word_vectors":
        head = None
    else:
        head = arch.head(head_kind)
    preprocessor = arch.preprocessor(kind) if head_kind else None
    name = lambda f: None if f is None else f"{f.__module__}.{f.__qualname__}"  # noqa: E731
    return kind, name(head), name(preprocessor)


def _pieces(architecture: str, kind: str) -> set:
    """The pieces of code a pair's serving graph is made of: its backbone (and tokenizer),
    its head class (or language model) and its packing (the kind with the preprocessor
    factory: the kind's own signature code and the architecture's preprocessor for it)."""
    kind_name, head, preprocessor = _graph_parts(architecture, kind)
    return {("backbone", architecture), ("head", head), ("packing", kind_name, preprocessor)}


def audit_cases(full: bool = False) -> list:
    """The pairs the op audit exports: every pair with ``full``; otherwise a covering
    subset, a pair being left out only when each of its pieces (`_pieces`: its backbone and
    tokenizer, its head class, its kind's packing) is in a pair already exported. An op the
    model server lacks comes from a piece of code (a layer, a tokenizer, a head, a
    packing), which the subset exports at least once. Pairs the kind refuses to build are
    left out."""
    chosen, covered = [], set()
    for name, kind in serving_cases():
        if refusal(name, kind):
            continue
        pieces = _pieces(name, kind)
        if full or not pieces <= covered:
            chosen.append((name, kind))
            covered |= pieces
    return chosen


def release() -> None:
    """Drops every model, export and loaded SavedModel cached in this process (the folders
    stay on disk until it exits). The conftest calls it when the last test file sharing
    them is done, so that the rest of the worker's tests do not carry them: a process
    holding them has several times more live objects for each full garbage collection to
    walk."""
    for cached in (_vocabulary, backbone, _task_model, loaded, refusal, _exported):
        cached.cache_clear()
    _WARMED.clear()
    keras.backend.clear_session()
    gc.collect()
