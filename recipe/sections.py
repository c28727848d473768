"""The recipe's sections other than the training stages, data, knowledge graph and teacher:
``tokenizer``, ``objective``, ``evaluation``, ``serving`` and ``runtime`` (with its Beam
options). Each frozen dataclass holds its defaults; its ``from_dict`` checks the resolved
mapping of the section and raises one `RecipeError` line naming the field. A check that
depends on the architecture asks the registry it is given (its tokenizer kind, objectives,
the task kind's metrics), never a list of names.
"""

from __future__ import annotations

import dataclasses

from lmfactory.components import beam_options
from lmfactory.components.trainer import config as trainer_config
from lmfactory.components.trainer.config import TrainerConfig
from lmfactory.components.trainer.precision import PRECISIONS
from lmfactory.components.trainer.strategy import STRATEGIES
from lmfactory.recipe.checker import Checker
from lmfactory.recipe.section import NO_DEFAULT, Section

VOCABULARY_SOURCES = ("corpus", "target_corpus")
RUNNING_MODES = ("auto", "in_memory", "multi_threading", "multi_processing")


def _trainer(name: str):
    """`TrainerConfig`'s default of ``name``, the one home of a runtime default."""
    return dataclasses.field(default=TrainerConfig.__dataclass_fields__[name].default)


@dataclasses.dataclass(frozen=True)
class Tokenizer(Section):
    """``tokenizer``: the kind is the architecture's (``Architecture.tokenizer_kind``);
    ``learn_from``: the data sections whose text the vocabulary is learned from (ULMFiT's
    target task words need ``[corpus, target_corpus]``)."""

    kind: str | None = dataclasses.field(default=None, metadata=NO_DEFAULT)
    vocab_size: int = 8000
    lowercase: bool = True
    strip_accents: bool = True
    min_frequency: int = 2
    learn_from: tuple = ("corpus",)

    @classmethod
    def from_dict(cls, values: dict, architecture=None) -> "Tokenizer":
        """With ``architecture`` (an `Architecture`: the vocabulary is learned in the run),
        also the kind and the size it needs, as VocabularyGen checks them."""
        check = Checker(values, "tokenizer")
        if architecture is not None:
            check.choice("kind", (architecture.tokenizer_kind,))
        check.positive_int("vocab_size")
        check.positive_int("min_frequency")
        check.boolean("lowercase")
        check.boolean("strip_accents")
        sources = check.get("learn_from")
        if (not isinstance(sources, list) or not sources or sources[0] != "corpus"
                or len(set(sources)) != len(sources)
                or any(source not in VOCABULARY_SOURCES for source in sources)):
            check.fail("learn_from", f"must be [corpus] or [corpus, target_corpus], got "
                                     f"{sources!r}")
        tokenizer = cls.from_values(values)
        if architecture is not None:
            tokenizer.check_size(architecture)
        return tokenizer

    def check_size(self, architecture) -> None:
        """``vocab_size`` against what the kind must hold (the architecture's special
        tokens plus the kind's own symbols, e.g. 256 bytes), so a size that cannot work
        fails before any stage runs."""
        from lmfactory.components.vocabulary.executor import VocabularyConfig

        try:
            VocabularyConfig(kind=architecture.tokenizer_kind, vocab_size=self.vocab_size,
                             min_frequency=self.min_frequency,
                             special_tokens=architecture.special_tokens)
        except ValueError as error:
            Checker({}, "tokenizer").fail("vocab_size", f"{error} ({architecture.name})")


@dataclasses.dataclass(frozen=True)
class Objective(Section):
    """``objective``: the pretraining objective (one of the architecture's) and the
    settings PretrainingExampleGen takes (``seed`` is its random seed)."""

    name: str | None = dataclasses.field(default=None, metadata=NO_DEFAULT)
    max_seq_length: int = 128
    masked_lm_prob: float = 0.15
    max_predictions_per_seq: int = 20
    short_seq_prob: float = 0.1
    dupe_factor: int = 5
    whole_word_masking: bool = False
    dynamic_masking: bool = False
    ngram_masking: int = 0
    mask_token_rate: float = 0.8
    random_token_rate: float = 0.1
    seed: int = 12345
    window: int = 5
    subsample_threshold: float = 1e-3

    @classmethod
    def from_dict(cls, values: dict, architecture=None) -> "Objective":
        """With ``architecture`` (the recipe pretrains it), ``name`` must be one of its
        objectives."""
        check = Checker(values, "objective")
        if architecture is not None:
            check.choice("name", architecture.objectives)
        check.positive_int("max_seq_length")
        check.fraction("masked_lm_prob", 0.0, 1.0)
        check.positive_int("max_predictions_per_seq")
        check.fraction("short_seq_prob")
        check.positive_int("dupe_factor")
        check.boolean("whole_word_masking")
        check.boolean("dynamic_masking")
        check.non_negative_int("ngram_masking", " (the longest masked n-gram; 0 = off)")
        check.fraction("mask_token_rate")
        check.fraction("random_token_rate")
        if values["mask_token_rate"] + values["random_token_rate"] > 1:
            check.fail("random_token_rate", "mask_token_rate + random_token_rate must not "
                                            "exceed 1")
        check.positive_int("window")
        check.fraction("subsample_threshold", 0.0, 0.999)
        check.non_negative_int("seed")
        return cls.from_values(values)

    def example_gen_settings(self) -> dict:
        """PretrainingExampleGen's objective arguments (all but the name and the seed)."""
        return {key: value for key, value in self.to_dict().items()
                if key not in ("name", "seed")}


@dataclasses.dataclass(frozen=True)
class Evaluation(Section):
    """``evaluation``: the blessing metric (one of the task kind's) and threshold, the
    evaluation batches, and the transfer control (components/evaluator/transfer.py:
    ``control: from_scratch`` adds it, checked there with the whole recipe)."""

    metric: str | None = dataclasses.field(default=None, metadata=NO_DEFAULT)
    threshold: float | None = None
    batch_size: int = 64
    max_batches: int | None = None
    control: str | None = None
    require_transfer_gain: bool = False

    @classmethod
    def from_dict(cls, values: dict, task_kind) -> "Evaluation":
        check = Checker(values, "evaluation")
        check.choice("metric", task_kind.metrics)
        if values.get("threshold") is not None:
            # a correlation (Matthews, Pearson, Spearman) may be blessed above a negative
            # value
            check.fraction("threshold", -1.0, 1e9)
        check.positive_int("batch_size")
        check.positive_int("max_batches", required=False)
        return cls.from_values(values)


@dataclasses.dataclass(frozen=True)
class Generation(Section):
    """``serving.generation``: the settings of a causal LM's ``generate_default``
    signature (components/tasks/language_model_serving.py checks them at export)."""

    max_length: int = 64
    sampler: str = "top_k"
    k: int = 10
    temperature: float = 1.0


@dataclasses.dataclass(frozen=True)
class Serving(Section):
    """``serving``: the model's folder name under the serving directory, and generation."""

    model_name: str | None = dataclasses.field(default=None, metadata=NO_DEFAULT)
    generation: Generation = dataclasses.field(default_factory=Generation)

    @classmethod
    def from_dict(cls, values: dict) -> "Serving":
        check = Checker(values, "serving")
        check.folder_name("model_name")
        check.mapping("generation", "must be a mapping of generation settings")
        return cls(model_name=values["model_name"],
                   generation=Generation.from_values(values["generation"]))


@dataclasses.dataclass(frozen=True)
class Beam(Section):
    """``runtime.beam``: ``auto`` runs a stage whose input is below ``in_memory_below_mb``
    in memory and a larger one in ``direct_num_workers`` processes
    (components/beam_options.py); ``extra_args``: further ``--flag=value`` options."""

    direct_running_mode: str = "auto"
    direct_num_workers: int = 2
    in_memory_below_mb: float = beam_options.DEFAULT_IN_MEMORY_BELOW_BYTES // 2**20
    extra_args: tuple = ()

    @classmethod
    def from_dict(cls, values: dict) -> "Beam":
        check = Checker(values, "runtime.beam")
        check.choice("direct_running_mode", RUNNING_MODES)
        check.positive_int("direct_num_workers")
        check.fraction("in_memory_below_mb", 0.0, 1e9)
        if not isinstance(check.get("extra_args"), list):
            check.fail("extra_args", "must be a list of --flag=value strings")
        return cls.from_values(values)

    def pipeline_args(self) -> list[str]:
        """The Beam arguments of every Beam stage (``auto`` adds the size policy)."""
        return beam_options.policy_args(self.direct_running_mode, self.direct_num_workers,
                                        list(self.extra_args),
                                        int(self.in_memory_below_mb * 2**20))


@dataclasses.dataclass(frozen=True)
class Runtime(Section):
    """``runtime``: the distribution strategy (``tpu``: its address), XLA, precision
    (float32, or mixed_bfloat16: bfloat16 compute, float32 variables and losses), the
    checkpoint interval, the seed, and the Beam options. ``validate_checkpoints``:
    eval_steps eval batches at each checkpoint (the validation curve), with a progress line
    (step, loss, rate, ETA) at least every ``progress_seconds``; ``export_every_stage``: a
    serving SavedModel for every training stage, not only the stage whose model is evaluated
    and pushed (the others feed a later stage only)."""

    strategy: str = _trainer("strategy")
    tpu: str | None = _trainer("tpu")
    jit_compile: bool = _trainer("jit_compile")
    precision: str = _trainer("precision")
    steps_per_checkpoint: int = _trainer("steps_per_checkpoint")
    seed: int = _trainer("seed")
    validate_checkpoints: bool = _trainer("validate_checkpoints")
    progress_seconds: float = _trainer("progress_seconds")
    export_every_stage: bool = False
    beam: Beam = dataclasses.field(default_factory=Beam)

    @classmethod
    def from_dict(cls, values: dict) -> "Runtime":
        check = Checker(values, "runtime")
        check.choice("strategy", STRATEGIES)
        check.boolean("jit_compile")
        check.choice("precision", PRECISIONS)
        check.positive_int("steps_per_checkpoint")
        check.fraction("progress_seconds", *trainer_config.PROGRESS_SECONDS_RANGE)
        check.boolean("validate_checkpoints")
        check.boolean("export_every_stage")
        check.non_negative_int("seed")
        check.mapping("beam", "must be a mapping of Beam options")
        return cls(**{**{key: value for key, value in values.items() if key != "beam"},
                      "beam": Beam.from_dict(values["beam"])})

    def trainer_settings(self) -> dict:
        """The runtime settings every Trainer takes (`TrainerConfig` fields; and ``seed``)."""
        return {"strategy": self.strategy, "tpu": self.tpu, "jit_compile": self.jit_compile,
                "precision": self.precision, "steps_per_checkpoint": self.steps_per_checkpoint,
                "validate_checkpoints": self.validate_checkpoints,
                "progress_seconds": self.progress_seconds}


__all__ = ["Beam", "Evaluation", "Generation", "Objective", "RUNNING_MODES", "Runtime",
           "Serving", "Tokenizer", "VOCABULARY_SOURCES"]
