"""The architecture registry: one `Architecture` record per model family.

Each model folder (``models/bert``, ``models/gpt2``, ...) registers itself when imported, so
the pipeline components find everything about an architecture by name: its backbone, the
task model of each pretraining objective, its tokenizer and special tokens, how it packs
sentence pairs, and the converters that load published checkpoints. A new architecture is
a new folder, not edits across the tree.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Mapping, Optional

from lmfactory.models.named_registry import NamedRegistry

# Families (what a backbone is, which heads and objectives fit it):
# "encoder": bidirectional Transformer encoders (BERT, RoBERTa, ...);
# "decoder": left-to-right LMs over a bounded context (GPT-1/2/3, the char Transformer LM,
#   Bengio's NNLM);
# "encoder_decoder": sequence-to-sequence models (Transformer, T5, RNN seq2seq);
# "recurrent": recurrent language models (ELMo, AWD-LSTM);
# "embedding": word-embedding models (word2vec).
FAMILIES = ("encoder", "decoder", "encoder_decoder", "recurrent", "embedding")
# How a classifier packs one or two segments (see models/classifier_preprocessor.py):
# "bert": [CLS] A [SEP] B [SEP]; "roberta": <s> A </s></s> B </s> (two separators between).
SEGMENT_LAYOUTS = ("bert", "roberta")
# Checkpoint formats a converter can read (see models/__init__.py `load_checkpoint`):
# "huggingface": a folder with config.json (model_type) + model.safetensors;
# "tf_checkpoint": an original TensorFlow checkpoint (e.g. google-research/bert's
# bert_config.json + bert_model.ckpt.*).
CHECKPOINT_FORMATS = ("huggingface", "tf_checkpoint")
# Keras backends a backbone and its pretraining task models can run on (models/backend.py).
# TensorFlow runs the pipeline; JAX runs them where TensorFlow is not installed (an
# accelerator machine, a TPU pod through keras.distribution).
BACKENDS = ("tensorflow", "jax")

# Heads every architecture of a family gets unless it registers its own for the task kind:
# family -> {task kind -> head}; filled by the modules that define them (models/tasks).
_FAMILY_HEADS: dict[str, dict[str, Callable]] = {family: {} for family in FAMILIES}


def register_family_head(family: str, task_kind: str, head: Callable) -> Callable:
    """Makes ``head`` the default head of ``task_kind`` for every architecture of
    ``family`` that does not register its own (e.g. the token classifier of every encoder)."""
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")
    _FAMILY_HEADS[family][task_kind] = head
    return head


def _tokenizer_kinds() -> tuple:
    """The registered tokenizer kinds (models/tokenizers)."""
    from lmfactory.models import tokenizers

    return tuple(tokenizers.kind_names())


@dataclasses.dataclass(frozen=True)
class Architecture:
    """What the pipeline needs to know about one pre-trained architecture.

    Attributes:
        name: registry key, e.g. ``"bert"``.
        family: one of ``FAMILIES``.
        backbone_cls: the `keras.Model` subclass of the bare network.
        presets: preset name -> constructor kwargs of ``backbone_cls`` (plain dicts).
        tokenizer_kind: a registered tokenizer kind (``models/tokenizers``: ``"wordpiece"``,
            ``"bpe"``, ``"sentencepiece"``, ``"byte"``, ...).
        pretrainers: pretraining objective (CONTRACTS §3 ``objective``) -> the task model
            trained on it, constructed as ``cls(backbone, **task_args)``. A class with
            ``needs_teacher = True`` (distillation) is constructed as
            ``cls(student_backbone, teacher=teacher_task_model, **task_args)``, where the
            teacher is the trained Keras task model of the Trainer's ``base_model`` (it has
            a ``.backbone``); an optional classmethod ``initialize_student(student_backbone,
            teacher_backbone)`` runs first (e.g. DistilBERT's every-other-layer init).
        heads: task kind -> the head (task model class or factory) fine-tuned for it, called
            as ``head(backbone, **arguments)`` with the kind's arguments (see the task kinds
            in components/tasks). Kinds and their arguments:
            ``"classification"``: ``num_classes=K, **task_args`` -> logits [B, K], or a dict
            with ``logits`` (plus whatever its own loss needs, e.g. GPT-1's ``lm_logits``);
            a head that overrides ``compute_loss`` computes its whole loss (it is compiled
            with an optimizer only). Regression uses it with ``num_classes=1``.
            ``"causal_lm"``: the language model that generates.
            ``"classification_distillation"``: task-specific distillation of a classifier
            (TinyBERT §3.2), ``cls(student_backbone, teacher=teacher_classifier,
            num_classes=K, **task_args)`` with a ``classifier`` attribute (what is exported).
            ``"tagging"``, ``"span_qa"``, ``"multiple_choice"``: see components/tasks.
            Kinds not listed here fall back to the family's default heads
            (`register_family_head`).
        preprocessors: task kind -> ``fn(vocab_dir, sequence_length, num_text_features,
            task_args) -> layer`` mapping a tuple of ``num_text_features`` batches of raw
            strings [B] to the head's input dict (run inside tf.data for fine-tuning and
            inside the exported SavedModel), for an architecture with its own input format
            (GPT-1's start / delimiter / extract packing, §3.3); a kind not listed uses
            ``models/classifier_preprocessor.py``'s cls/sep packing in ``segment_layout``.
            The ``tagging`` kind's is ``fn(vocab_dir, label_vocabulary, sequence_length)``
            -> a `TokenClassificationPreprocessor` (subclass) with inputs of its own.
        special_tokens: role -> token the vocabulary must reserve (roles: ``pad``, ``unk``,
            ``cls``, ``sep``, ``mask``, ``end_of_text``); None = the tokenizer kind's default.
        segment_layout: how sentence pairs are packed, one of ``SEGMENT_LAYOUTS``.
        converters: checkpoint format -> ``fn(path) -> backbone`` loading published weights.
        hf_model_types: the Hugging Face ``model_type`` values the "huggingface" converter
            reads (e.g. ``("bert",)``).
        causal: whether ``sequence_output`` at position t depends only on tokens <= t (a
            left-to-right LM). None (the default) means "the family's": True for decoders,
            False otherwise; a recurrent LM (AWD-LSTM) sets True, a bidirectional one
            (ELMo) leaves it. The conformance harness checks it.
        paper: citation of the paper the implementation follows.
        knowledge_init: ``fn(task_model_or_backbone, entity_embeddings,
            relation_embeddings)`` (float32 [E, d], [R, d]) for an architecture
            that starts from knowledge-graph embeddings (ERNIE's frozen TransE entities):
            the trainer calls it after building a fresh pretrainer or head when the stage
            has ``kg_embeddings`` (components/knowledge_graph, `KnowledgeTrainer`); the
            exported model keeps whatever weights it then holds. None for every other
            architecture.
        links_entities: whether its examples are annotated with knowledge-graph entity
            mentions (the pipeline runs the corpus and task examples through
            ``EntityLinker`` and trains with ``KnowledgeTrainer``s when the recipe has a
            ``knowledge_graph`` section).
        concept_paths: whether its multiple-choice examples go through KagNet's
            ``ConceptPaths`` stage (components/concept_paths: concepts grounded, paths
            found and pruned, schema graphs built, Lin et al. 2019 §3.1) and its fine-tuning
            is a ``KnowledgeTrainer`` given the graph, when the recipe has a
            ``knowledge_graph`` section; its ``multiple_choice`` preprocessor then gets the
            stage's concept graph (``task_args["concept_graph"]``).
        serving_length_multiple: a serving signature cuts a request's packed inputs
            after its longest row, rounded up to this multiple (models/request_length.py);
            None for an architecture whose outputs depend on the padded length, which is
            then always called at its packed length.
    """

    name: str
    family: str
    backbone_cls: type
    presets: Mapping
    tokenizer_kind: str
    pretrainers: Mapping
    heads: Mapping = dataclasses.field(default_factory=dict)
    preprocessors: Mapping = dataclasses.field(default_factory=dict)
    special_tokens: Optional[Mapping] = None
    segment_layout: str = "bert"
    converters: Mapping = dataclasses.field(default_factory=dict)
    hf_model_types: tuple = ()
    causal: Optional[bool] = None
    paper: str = ""
    knowledge_init: Optional[Callable] = None
    links_entities: bool = False
    concept_paths: bool = False
    serving_length_multiple: Optional[int] = 8
    backends: tuple = BACKENDS
    tensorflow_only_because: str = ""

    def __post_init__(self):
        if self.causal is None:
            object.__setattr__(self, "causal", self.family == "decoder")
        if self.family not in FAMILIES:
            raise ValueError(f"Architecture {self.name!r}: family must be one of {FAMILIES}, "
                             f"got {self.family!r}")
        if self.tokenizer_kind not in _tokenizer_kinds():
            raise ValueError(f"Architecture {self.name!r}: tokenizer_kind must be one of "
                             f"{_tokenizer_kinds()}, got {self.tokenizer_kind!r}")
        if not self.presets:
            raise ValueError(f"Architecture {self.name!r} has no presets")
        if not self.pretrainers and not self.heads:  # no pretraining: trained by a head
            raise ValueError(f"Architecture {self.name!r} has no pretraining objective")
        if self.segment_layout not in SEGMENT_LAYOUTS:
            raise ValueError(f"Architecture {self.name!r}: segment_layout must be one of "
                             f"{SEGMENT_LAYOUTS}, got {self.segment_layout!r}")
        unknown = sorted(set(self.converters) - set(CHECKPOINT_FORMATS))
        if unknown:
            raise ValueError(f"Architecture {self.name!r}: unknown checkpoint format(s) "
                             f"{unknown}; known: {CHECKPOINT_FORMATS}")
        multiple = self.serving_length_multiple
        if multiple is not None and (isinstance(multiple, bool) or not isinstance(multiple, int)
                                     or multiple < 1):
            raise ValueError(f"Architecture {self.name!r}: serving_length_multiple must be a "
                             f"positive int or None, got {multiple!r}")
        unknown = sorted(set(self.backends) - set(BACKENDS))
        if unknown or "tensorflow" not in self.backends:
            raise ValueError(f"Architecture {self.name!r}: backends must include "
                             f"'tensorflow' and be among {BACKENDS}, got {self.backends!r}")
        if (set(self.backends) != set(BACKENDS)) != bool(self.tensorflow_only_because):
            raise ValueError(f"Architecture {self.name!r}: tensorflow_only_because gives the "
                             f"reason exactly when backends leaves one out")
        unknown = sorted(set(self.preprocessors) - set(self.task_kinds))
        if unknown:
            raise ValueError(f"Architecture {self.name!r}: preprocessors for {unknown}, "
                             f"which it has no head for")

    def check_backend(self, backend: str) -> None:
        """Raises a one-line error when its models cannot run on Keras backend
        ``backend``."""
        if backend not in self.backends:
            raise RuntimeError(f"Architecture {self.name!r} runs on the TensorFlow backend "
                               f"only ({self.tensorflow_only_because}); the Keras backend "
                               f"is {backend!r} (KERAS_BACKEND)")

    @property
    def objectives(self) -> tuple:
        """The pretraining objectives it trains, in registration order."""
        return tuple(self.pretrainers)

    def pretrainer(self, objective: str) -> type:
        if objective not in self.pretrainers:
            raise ValueError(f"Architecture {self.name!r} does not train objective "
                             f"{objective!r}; it trains {self.objectives}")
        return self.pretrainers[objective]

    def _family_heads(self) -> dict:
        """Its family's default heads. An architecture whose inputs carry linked entities
        keeps only those of the kinds it packs itself: the default packing of the others
        (e.g. the token classifier's) gives its backbone no entity ids."""
        heads = _FAMILY_HEADS[self.family]
        if self.links_entities:
            return {kind: head for kind, head in heads.items() if kind in self.preprocessors}
        return heads

    @property
    def task_kinds(self) -> tuple:
        """The task kinds it has a head for: its own, then its family's defaults."""
        return tuple(dict.fromkeys([*self.heads, *self._family_heads()]))

    def has_head(self, task_kind: str) -> bool:
        return task_kind in self.heads or task_kind in self._family_heads()

    def head(self, task_kind: str) -> Callable:
        """The head fine-tuned for ``task_kind`` (its own, else its family's default)."""
        if task_kind in self.heads:
            return self.heads[task_kind]
        if task_kind in self._family_heads():
            return self._family_heads()[task_kind]
        raise ValueError(f"Architecture {self.name!r} ({self.family}) has no {task_kind} "
                         f"head{self._why_no_family_head(task_kind)}; its heads: "
                         f"{list(self.task_kinds) or 'none'}")

    def _why_no_family_head(self, task_kind: str) -> str:
        if task_kind in _FAMILY_HEADS[self.family]:  # left out by `_family_heads`
            return (f": its inputs carry linked knowledge-graph entities, which the "
                    f"{task_kind} packing does not give")
        return ""

    def preprocessor(self, task_kind: str) -> Optional[Callable]:
        """Its own input packing for ``task_kind`` (e.g. GPT-1 §3.3), or None for the
        pipeline's cls/sep packing."""
        return self.preprocessors.get(task_kind)

    def converter(self, checkpoint_format: str) -> Callable:
        if checkpoint_format not in self.converters:
            raise ValueError(f"Architecture {self.name!r} has no converter for "
                             f"{checkpoint_format!r} checkpoints; it reads "
                             f"{sorted(self.converters) or 'none'}")
        return self.converters[checkpoint_format]


_ARCHITECTURES = NamedRegistry(
    "architecture", unknown="Unknown architecture {name!r}; known architectures: {names}")
register = _ARCHITECTURES.register  # each model folder's __init__ registers its record
unregister = _ARCHITECTURES.unregister
registered = _ARCHITECTURES.registered
get = _ARCHITECTURES.get


def names() -> list[str]:
    """The registered architectures, sorted."""
    return sorted(_ARCHITECTURES.names())


def find_by_backbone(backbone) -> Architecture:
    """The architecture whose ``backbone_cls`` built ``backbone`` (an instance or class)."""
    cls = backbone if isinstance(backbone, type) else type(backbone)
    for arch in _ARCHITECTURES.records():
        if cls is arch.backbone_cls:
            return arch
    for arch in _ARCHITECTURES.records():
        if issubclass(cls, arch.backbone_cls):
            return arch
    raise ValueError(f"{cls.__name__} is not the backbone of a registered architecture "
                     f"({names()})")


def find_by_hf_model_type(model_type: str) -> list[Architecture]:
    """Architectures whose Hugging Face converter reads ``model_type``."""
    return [arch for arch in _ARCHITECTURES.records() if model_type in arch.hf_model_types]
