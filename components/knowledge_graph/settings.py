"""The settings of the recipe's ``knowledge_graph`` section (no TensorFlow here:
recipe/knowledge.py checks them): formats, embedding methods and their defaults, linking
defaults."""

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
# min_label_chars: a surface form shorter than this (spaces not counted) or without any
# letter is not used for linking (FB15k-237's aliases "." for Amazon, "OF" for outfielder,
# "in" for India would otherwise flood text with false mentions); skip_stopwords: neither is
# a form that is an English function word (`STOPWORDS`, "the", "who", ...).
LINKING_DEFAULTS = {"max_ngram": 4, "lowercase": True, "min_label_chars": 3,
                    "skip_stopwords": True}
# English function words (closed classes: articles, pronouns, prepositions, conjunctions,
# auxiliaries, common adverbs) that are also entity aliases in FB15k-237 / ConceptNet.
STOPWORDS = frozenset("""
a about above after again against all am an and any are as at be because been before being
below between both but by can could did do does doing down during each few for from further
had has have having he her here hers herself him himself his how i if in into is it its
itself just me more most my myself no nor not now of off on once only or other our ours
ourselves out over own same she should so some such than that the their theirs them
themselves then there these they this those through to too under until up very was we were
what when where which while who whom why will with would you your yours yourself yourselves
""".split())
SECTION_DEFAULTS = {"format": "tsv", "splits": {"train": None, "valid": None, "test": None},
                    "labels": None, "embedding": EMBEDDING_DEFAULTS,
                    "linking": LINKING_DEFAULTS}
