"""PretrainingExampleGen: corpus Examples -> pretraining records (CONTRACTS §3).

Modules: ``features`` (record format, config defaults, ``make_dataset`` for the trainer; no
TFX/Beam imports); ``objectives`` (the objective registry: ``get(name)``, ``names()``; the
``Objective`` record is defined in ``registry``), whose records are registered by
``bert_mlm_nsp`` (BERT MLM+NSP), ``albert_mlm_sop`` (ALBERT MLM+SOP), ``full_sentences``
(RoBERTa FULL-SENTENCES ``mlm``) and ``causal_lm`` (GPT-2 blocks): instance creation, pure
Python, with ``masking`` (token, whole-word and n-gram masking) and ``mlm_objective`` (record
spec, tf.data converters, vocabulary state) shared by the three masked-LM ones;
``executor`` (Beam pipeline, ``generate_pretraining_examples``, TFX ``Executor``),
``component`` (``PretrainingExampleGen``). The TFX names below are imported lazily so that
``features`` can be used without importing TFX.
"""

_LAZY = {
    "PretrainingExampleGen": "component",
    "PretrainingExampleGenSpec": "component",
    "Executor": "executor",
    "generate_pretraining_examples": "executor",
    "make_dataset": "features",
    "read_pretraining_config": "features",
    "DEFAULT_CONFIG": "features",
}

__all__ = sorted(_LAZY)


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    module = importlib.import_module(f"{__name__}.{_LAZY[name]}")
    return getattr(module, name)
