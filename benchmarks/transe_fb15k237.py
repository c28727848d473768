"""TransE (Bordes et al. 2013) on FB15k-237 (Toutanova & Chen 2015): filtered link
prediction on the test split beside the published TransE figures for that split.

The graph is read by the KnowledgeGraphGen code (components/knowledge_graph/graph.py) from
../shared/data/kg/FB15k-237 (train / valid / test.txt; 14,541 entities, 237 relations),
TransE trained by components/knowledge_graph/transe.py (margin ranking loss, corrupted heads
or tails 50/50, entity renormalisation every step) for as many epochs as fit in
``--max-seconds`` (or ``--epochs``), then evaluated with the filtered protocol (ranks among
all entities, the other true triples of train + valid + test removed; head and tail
queries). Published: Nguyen et al. 2018 (ConvKB, NAACL), Table 3, their TransE on
FB15k-237 (k = 100, L1): MRR 0.294, Hits@10 46.5 %, mean rank 347 — trained for up to
3,000 epochs; Dettmers et al. 2018 (ConvE) do not list TransE on FB15k-237.

    nice -n 10 /work/main/.venv/bin/python benchmarks/transe_fb15k237.py \
        --max-seconds 600 [--optimizer sgd --learning-rate 0.01 --batch-size 1024]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(os.path.dirname(REPO), "shared", "data", "kg", "FB15k-237")
PUBLISHED = {"source": "Nguyen et al. 2018 (ConvKB), Table 3, TransE on FB15k-237",
             "mrr": 0.294, "hits@10": 0.465}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=DATA)
    parser.add_argument("--dim", type=int, default=100)
    parser.add_argument("--norm", type=int, default=1)
    parser.add_argument("--margin", type=float, default=1.0)
    parser.add_argument("--optimizer", default="sgd")
    parser.add_argument("--learning-rate", type=float, default=0.01)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--epochs", type=int, default=1000)
    parser.add_argument("--max-seconds", type=float, default=600.0,
                        help="stop training after the epoch that passes this many seconds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="write the result JSON here")
    args = parser.parse_args(argv)

    from lmfactory.components.knowledge_graph import transe
    from lmfactory.components.knowledge_graph.graph import build_graph

    started = time.monotonic()
    graph = build_graph({"format": "tsv", "labels": os.path.join(args.data,
                                                                 "entity2wikidata.json"),
                         "splits": {split: os.path.join(args.data, f"{split}.txt")
                                    for split in ("train", "valid", "test")}})
    read_seconds = time.monotonic() - started
    embedding = {"method": "transe", "dim": args.dim, "norm": args.norm,
                 "margin": args.margin, "epochs": args.epochs, "batch_size": args.batch_size,
                 "learning_rate": args.learning_rate, "seed": args.seed,
                 "optimizer": args.optimizer}
    started = time.monotonic()
    model, losses = transe.train_transe(graph, embedding, max_seconds=args.max_seconds)
    train_seconds = time.monotonic() - started
    started = time.monotonic()
    metrics = transe.evaluate(model, graph, "test")
    eval_seconds = time.monotonic() - started
    result = {"settings": embedding, "epochs_trained": len(losses),
              "first_last_loss": [losses[0], losses[-1]] if losses else None,
              "entities": graph.num_entities, "relations": graph.num_relations,
              "triples": {split: int(len(a)) for split, a in graph.splits.items()},
              "dropped": {k: graph.counts[k] for k in ("unknown_entity_triples",
                                                        "malformed_lines")},
              "test": metrics, "published": PUBLISHED,
              "seconds": {"read": round(read_seconds, 1), "train": round(train_seconds, 1),
                          "evaluate": round(eval_seconds, 1)}}
    print(json.dumps(result, indent=2))
    print(f"TransE FB15k-237 test (filtered, {len(losses)} epochs): MRR {metrics['mrr']:.4f}, "
          f"Hits@1 {metrics['hits@1']:.4f}, Hits@3 {metrics['hits@3']:.4f}, Hits@10 "
          f"{metrics['hits@10']:.4f}, raw MRR {metrics['raw_mrr']:.4f} | published "
          f"({PUBLISHED['source']}): MRR {PUBLISHED['mrr']}, Hits@10 {PUBLISHED['hits@10']}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)
    return result


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
