"""The settings of the recipe's ``knowledge_graph`` section (no TensorFlow here: recipe.py
checks them): formats, embedding methods and their defaults, linking defaults."""

FORMATS = ("tsv", "conceptnet")
METHODS = ("transe",)
NORMS = (1, 2)
OPTIMIZERS = ("sgd", "adam")  # sgd: Bordes et al. 2013 §4.2
SPLITS = ("train", "valid", "test")
# TransE (Bordes et al. 2013 §4.2 picks, on FB15k, k = 50, γ = 1, λ = 0.01, L1); k = 100
# as Nguyen et al. 2018's TransE baseline on FB15k-237.
EMBEDDING_DEFAULTS = {"method": "transe", "dim": 100, "margin": 1.0, "norm": 1, "epochs": 10,
                      "batch_size": 1024, "learning_rate": 0.01, "seed": 0,
                      "optimizer": "sgd"}
LINKING_DEFAULTS = {"max_ngram": 4, "lowercase": True}
SECTION_DEFAULTS = {"format": "tsv", "splits": {"train": None, "valid": None, "test": None},
                    "labels": None, "embedding": EMBEDDING_DEFAULTS,
                    "linking": LINKING_DEFAULTS}
