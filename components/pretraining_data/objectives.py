"""The pretraining objectives (CONTRACTS §3 ``objective``): import this to use the registry.

Importing this module imports the shipped objectives' modules, each of which registers its
`registry.Objective` record: ``bert_mlm_nsp`` (BERT MLM + next-sentence prediction),
``albert_mlm_sop`` (ALBERT MLM + sentence-order prediction), ``mlm`` (RoBERTa FULL-SENTENCES,
``full_sentences.py``) and ``causal_lm`` (GPT-2 blocks). A new objective is a new module that
registers its record, plus one line below.

Interface: :func:`get` (the record of a name; ``ValueError`` naming the known objectives for
an unknown one), :func:`names`, :func:`register`, :func:`unregister` and the
:func:`registered` context manager (e.g. a test's own objective), `Objective`. Code outside
this folder asks the record, e.g. ``objectives.get(name).causal`` (left-to-right next-token
targets: the model generates and is evaluated by perplexity), instead of comparing names.
"""

from lmfactory.components.pretraining_data import (  # noqa: F401  (register their objectives)
    albert_mlm_sop, bert_mlm_nsp, causal_lm, full_sentences)
from lmfactory.components.pretraining_data import bilm  # noqa: F401  (bidirectional LM windows)
from lmfactory.components.pretraining_data import permutation_lm  # noqa: F401  (XLNet)
from lmfactory.components.pretraining_data import word_windows  # noqa: F401  (skipgram, cbow)
from lmfactory.components.pretraining_data import ordered_streams  # noqa: F401  (segments in order)
from lmfactory.components.pretraining_data import bptt_streams  # noqa: F401  (BPTT windows)
from lmfactory.components.pretraining_data import span_corruption  # noqa: F401  (T5 spans)
from lmfactory.components.pretraining_data import ernie_dea  # noqa: F401  (entities, dEA)
from lmfactory.components.pretraining_data.registry import (
    DOCUMENT_FORMATS, LINKED_SENTENCES, SENTENCES, STREAM, VOCABULARY_FOLDER, Objective, get,
    names, register, registered, unregister)

__all__ = ["DOCUMENT_FORMATS", "LINKED_SENTENCES", "Objective", "SENTENCES", "STREAM",
           "VOCABULARY_FOLDER", "get", "names", "register", "registered", "unregister"]
