"""KagNet (Lin et al. 2019) vs the text-only baseline on CommonsenseQA dev: the same
statement encoder (BERT-tiny, the same initial weights), the same steps, batch, learning
rate and WordPiece vocabulary; KagNet adds its §3.1 schema graphs and the GCN-LSTM-HPA head.

The KG is NOT ConceptNet (it cannot be downloaded here): the stand-in of
``components/concept_paths/cooccurrence.py``, written in ConceptNet's CSV format and read by
the KnowledgeGraphGen code (format ``conceptnet``): ``/r/RelatedTo`` between content words
co-occurring within 4 words in >= 2 texts of the CommonsenseQA TRAIN question stems (never
the answers) and WikiText-2 valid paragraphs, plus ``/r/FormOf`` plural -> singular. TransE
(components/knowledge_graph/transe.py) embeds it; its vectors initialise KagNet's concept and
relation embeddings and score the paths for pruning. Neither model is pretrained here (a
fresh encoder: the comparison isolates what the graph adds to the same text encoder).

    nice -n 10 /work/main/.venv/bin/python benchmarks/kagnet_csqa.py --steps 1500 \
        --out runs/kagnet_csqa_benchmark
"""

from __future__ import annotations

import argparse
import json
import os
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(os.path.dirname(REPO), "shared", "data")


def _graph_arrays(builder, examples, batch=256):
    import numpy as np

    arrays, counts = [], {}
    for start in range(0, len(examples), batch):
        part = examples[start:start + batch]
        values, part_counts = builder.build([e.context for e in part],
                                            [list(e.choices) for e in part])
        arrays.append(values)
        for key, value in part_counts.items():
            counts[key] = counts.get(key, 0) + value
    return {name: np.concatenate([a[name] for a in arrays]) for name in arrays[0]}, counts


def _dataset(examples, preprocessor, graph, batch_size, shuffle, seed, names):
    import tensorflow as tf

    data = {"context": tf.constant([e.context for e in examples]),
            "choices": tf.constant([list(e.choices) for e in examples]),
            "label": tf.constant([e.label for e in examples], tf.int64)}
    if graph is not None:
        data.update({name: tf.constant(value) for name, value in graph.items()})
    dataset = tf.data.Dataset.from_tensor_slices(data)
    if shuffle:
        dataset = dataset.shuffle(len(examples), seed=seed).repeat()

    def pack(batch):
        inputs = dict(preprocessor((batch["context"], batch["choices"])))
        if graph is not None:
            inputs.update({name: batch[name] for name in graph})
        return {name: inputs[name] for name in names}, batch["label"]

    return dataset.batch(batch_size, drop_remainder=shuffle).map(pack).prefetch(2)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/kagnet_csqa_benchmark")
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--learning-rate", type=float, default=3e-4)
    parser.add_argument("--sequence-length", type=int, default=48)
    parser.add_argument("--vocab-size", type=int, default=4000)
    parser.add_argument("--transe-dim", type=int, default=32)
    parser.add_argument("--transe-seconds", type=float, default=120.0)
    parser.add_argument("--max-train", type=int, default=None)
    parser.add_argument("--max-dev", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    import keras
    import numpy as np

    from lmfactory import models
    from lmfactory.components.concept_paths import cooccurrence
    from lmfactory.components.concept_paths.grounding import (
        SchemaGraphBuilder, concept_graph_of)
    from lmfactory.components.example_gen.multiple_choice_readers import read_commonsenseqa
    from lmfactory.components.knowledge_graph import transe
    from lmfactory.components.knowledge_graph.graph import build_graph
    from lmfactory.components.trainer.optimization import make_optimizer
    from lmfactory.components.vocabulary import wordpiece
    from lmfactory.models.classifier_preprocessor import classifier_preprocessor
    from lmfactory.models.kagnet.kagnet_multiple_choice import KagNetMultipleChoice
    from lmfactory.models.tasks.multiple_choice_head import MultipleChoice
    from lmfactory.models.tasks.multiple_choice_preprocessor import MultipleChoicePreprocessor
    from lmfactory.models.tokenizers import load_tokenizer

    os.makedirs(args.out, exist_ok=True)
    started = time.monotonic()
    csqa = os.path.join(SHARED, "commonsenseqa")
    train_path = os.path.join(csqa, "train_rand_split.jsonl")
    train = read_commonsenseqa(train_path).examples[:args.max_train]
    dev = read_commonsenseqa(os.path.join(csqa, "dev_rand_split.jsonl")).examples[:args.max_dev]

    # The stand-in KG (train stems + WikiText-2 valid), read as ConceptNet CSV, TransE.
    texts = cooccurrence.commonsenseqa_stems(train_path)
    with open(os.path.join(SHARED, "wikitext-2", "valid.txt"), encoding="utf-8") as f:
        texts += [line for line in f if line.strip()]
    kg_path = os.path.join(args.out, "cooccurrence_conceptnet.csv")
    cooccurrence.write_conceptnet_csv(cooccurrence.cooccurrence_assertions(texts), kg_path)
    graph = build_graph({"format": "conceptnet", "splits": {"train": kg_path},
                         "labels": None, "linking": {"max_ngram": 4, "lowercase": True}})
    embedding = {"method": "transe", "dim": args.transe_dim, "norm": 1, "margin": 1.0,
                 "batch_size": 1024, "learning_rate": 0.01, "seed": args.seed,
                 "optimizer": "sgd", "epochs": 1000}
    kge, history = transe.train_transe(graph, embedding, max_seconds=args.transe_seconds)
    entity = np.asarray(kge.entity_embeddings)
    relation = np.asarray(kge.relation_embeddings)
    settings = dict(max_hops=2, max_paths_per_pair=3, max_question_concepts=6,
                    max_answer_concepts=3)
    concept_graph = concept_graph_of(graph, (entity, relation), norm=1, max_neighbours=32)
    builder = SchemaGraphBuilder(concept_graph, graph.linking, settings)
    train_graph, train_counts = _graph_arrays(builder, train)
    dev_graph, dev_counts = _graph_arrays(builder, dev)
    kg_seconds = time.monotonic() - started

    vocab = wordpiece.learn_vocabulary_folder([e.context for e in train] +
                                              [c for e in train for c in e.choices],
                                              os.path.join(args.out, "vocabulary"),
                                              args.vocab_size, lowercase=True,
                                              strip_accents=True)
    preprocessor = MultipleChoicePreprocessor(classifier_preprocessor(
        vocab, "bert", args.sequence_length, num_text_features=2))
    vocabulary_size = load_tokenizer(vocab).vocabulary_size()
    keras.utils.set_random_seed(args.seed)
    initial = models.build("bert", "tiny", vocabulary_size=vocabulary_size).get_weights()

    results = {"kg": {"file": kg_path, "entities": len(graph.entities),
                      "relations": graph.relations, "triples": int(len(graph.splits["train"])),
                      "transe_epochs": len(history), "transe_final_loss": history[-1],
                      "train_paths": train_counts, "dev_paths": dev_counts,
                      "seconds": round(kg_seconds, 1)},
               "steps": args.steps, "batch_size": args.batch_size,
               "learning_rate": args.learning_rate, "train_questions": len(train),
               "dev_questions": len(dev)}
    for name in ("text_only", "kagnet"):
        t0 = time.monotonic()
        keras.utils.set_random_seed(args.seed)
        arch = "bert" if name == "text_only" else "kagnet"
        backbone = models.build(arch, "tiny", vocabulary_size=vocabulary_size)
        backbone.set_weights(initial)  # the same statement encoder at step 0
        if name == "text_only":
            model, graphs = MultipleChoice(backbone, num_choices=5), (None, None)
        else:
            model = KagNetMultipleChoice(
                backbone, num_choices=5, num_concepts=len(graph.entities),
                num_relations=2 * len(graph.relations), concept_dim=args.transe_dim,
                path_dim=64, pair_dim=64)
            model.initialize_from_kg(entity, relation)
            graphs = (train_graph, dev_graph)
        model.compile(optimizer=make_optimizer(args.learning_rate, args.steps, 0.1, 0.01))
        names = list(model.input)
        model.fit(_dataset(train, preprocessor, graphs[0], args.batch_size, True, args.seed,
                           names), steps_per_epoch=args.steps, epochs=1, verbose=2)
        chosen = np.concatenate([np.argmax(model.predict_on_batch(x), -1) for x, _ in
                                 _dataset(dev, preprocessor, graphs[1], 128, False, 0,
                                          names)])
        labels = np.array([e.label for e in dev])
        results[name] = {"dev_accuracy": float(np.mean(chosen == labels)),
                         "parameters": int(model.count_params()),
                         "seconds": round(time.monotonic() - t0, 1)}
        print(name, results[name], flush=True)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(results, f, indent=2)
    print(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main()
