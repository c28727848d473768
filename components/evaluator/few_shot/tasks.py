"""Few-shot task data: the task readers (`read_sst2`, `read_commonsenseqa`) -> `TaskSplit` of
`Example` ``(context, completions, gold)``, and the tasks in `TASKS`."""

from __future__ import annotations

import dataclasses
import os
from typing import Callable, NamedTuple

# Brown et al. 2020 §2.4: the unconditional probability of a completion is its probability
# after "Answer: "; the completion carries its leading space, so the context is "Answer:".
ANSWER_CONTEXT = "Answer:"


class FewShotError(ValueError):
    """Bad input to few-shot evaluation (a malformed data line, a prompt that cannot fit)."""


class Example(NamedTuple):
    """One evaluation item: the text the model conditions on, the candidate completions
    (each with its leading space) and the index of the correct one."""

    context: str
    completions: tuple[str, ...]
    gold: int


@dataclasses.dataclass
class TaskSplit:
    """The examples read from one file, and the malformed lines skipped (``"path:line:
    reason"``; empty unless the reader was asked to skip instead of raising)."""

    examples: list[Example]
    skipped: list[str] = dataclasses.field(default_factory=list)
    path: str = ""

    def __len__(self) -> int:
        return len(self.examples)

    def __iter__(self):
        return iter(self.examples)

    def __getitem__(self, index):
        return self.examples[index]


class _LineErrors:
    """Raises on a malformed line, or records it when skipping (never drops it silently)."""

    def __init__(self, path: str, skip_malformed: bool):
        self.path, self.skip_malformed, self.skipped = path, skip_malformed, []

    def __call__(self, line_number: int, reason: str) -> None:
        message = f"{self.path}:{line_number}: {reason}"
        if not self.skip_malformed:
            raise FewShotError(f"Malformed line {message} (pass skip_malformed=True / "
                               f"--skip-malformed to skip such lines and count them)")
        self.skipped.append(message)


def _open_lines(path: str) -> list[str]:
    # Imported here: the example_gen package pulls in TFX, which scoring does not need.
    from lmfactory.components.example_gen import multiple_choice_readers

    return multiple_choice_readers.read_text(path, FewShotError, "Task data file").splitlines()


SST2_LABEL_WORDS = (" negative", " positive")


def read_sst2(path: str, skip_malformed: bool = False) -> TaskSplit:
    """SST-2 as GLUE ships it: a header naming the columns ``sentence`` and ``label``, then
    one tab-separated sentence and label (0 = negative, 1 = positive) a line.

    Each example reads ``Review: <sentence>\\nSentiment:`` and is completed by the label
    word " negative" or " positive" (Brown et al. 2020 §2.4: binary classification with
    semantically meaningful label words). Blank lines are not records and are passed over;
    any other line without both fields, with an empty sentence or a label other than 0 / 1
    raises a `FewShotError` naming the file and line, or, with ``skip_malformed``, is
    skipped and listed in ``TaskSplit.skipped``.
    """
    lines = _open_lines(path)
    if not lines:
        raise FewShotError(f"{path}: empty file; expected a header 'sentence<TAB>label'")
    header = lines[0].rstrip("\r").split("\t")
    if "sentence" not in header or "label" not in header:
        raise FewShotError(f"{path}:1: the header must name the columns 'sentence' and "
                           f"'label' (tab-separated), got {lines[0][:80]!r}")
    sentence_at, label_at = header.index("sentence"), header.index("label")
    errors = _LineErrors(path, skip_malformed)
    examples = []
    for number, line in enumerate(lines[1:], start=2):
        line = line.rstrip("\r")
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != len(header):
            errors(number, f"expected {len(header)} tab-separated fields, got {len(fields)}")
            continue
        sentence, label = fields[sentence_at].strip(), fields[label_at].strip()
        if not sentence:
            errors(number, "empty sentence")
            continue
        if label not in ("0", "1"):
            errors(number, f"label must be 0 or 1, got {label!r}")
            continue
        examples.append(Example(f"Review: {sentence}\nSentiment:", SST2_LABEL_WORDS,
                                int(label)))
    return TaskSplit(examples, errors.skipped, path)


def read_commonsenseqa(path: str, skip_malformed: bool = False) -> TaskSplit:
    """CommonsenseQA (Talmor et al. 2019) JSONL: one JSON object a line with
    ``question.stem``, ``question.choices`` (a list of ``{label, text}``) and ``answerKey``
    (the label of the correct choice), read by the fine-tuning reader
    (``components/example_gen/multiple_choice_readers.py`` `read_commonsenseqa`), here with any
    number of choices per question.

    Each example reads ``Question: <stem>\\nAnswer:`` and is completed by each choice's
    text (with a leading space), scored as multiple choice (Brown et al. 2020 §2.4). Blank
    lines are passed over; a malformed line (not JSON, not a CommonsenseQA question,
    repeated choice labels, no ``answerKey`` or one that names no choice) raises a
    `FewShotError` naming the file and line, or, with ``skip_malformed``, is skipped and
    listed in ``TaskSplit.skipped``. A file the reader rejects as a whole (not
    CommonsenseQA, no answers at all as in the released test split, no question read)
    raises a `FewShotError` with the reader's message.
    """
    from lmfactory.components.example_gen import multiple_choice_readers

    try:
        data = multiple_choice_readers.read_commonsenseqa(path, varying_choices=True)
    except multiple_choice_readers.MultipleChoiceDataError as error:
        raise FewShotError(str(error)) from None
    errors = _LineErrors(path, skip_malformed)
    for line in data.malformed:
        errors(line.line, line.reason)
    examples = [Example(f"Question: {example.context.strip()}\nAnswer:",
                        tuple(" " + choice.strip() for choice in example.choices),
                        example.label)
                for example in data.examples]
    return TaskSplit(examples, errors.skipped, path)


@dataclasses.dataclass(frozen=True)
class FewShotTask:
    """A task for in-context evaluation.

    Attributes:
        name: the CLI name.
        description: the natural-language task description that opens every prompt
            (Figure 2.1's "Translate English to French:").
        read: ``read(path, skip_malformed) -> TaskSplit``.
        train_file, eval_file: paths under the data folder; demonstrations come from the
            train file, evaluated examples from the eval file.
        separator: joins the description, the demonstrations and the query.
        answer_context: the context of the unconditional probability of a completion.
    """

    name: str
    description: str
    read: Callable[..., TaskSplit]
    train_file: str
    eval_file: str
    separator: str = "\n\n"
    answer_context: str = ANSWER_CONTEXT

    def demonstration(self, example: Example) -> str:
        """A solved example: its context followed by its correct completion."""
        return example.context + example.completions[example.gold]


TASKS = {
    "sst2": FewShotTask(
        name="sst2",
        description="Classify the sentiment of each movie review as positive or negative.",
        read=read_sst2,
        train_file=os.path.join("glue", "SST-2", "train.tsv"),
        eval_file=os.path.join("glue", "SST-2", "dev.tsv")),
    "commonsenseqa": FewShotTask(
        name="commonsenseqa",
        description="Answer each question with the most sensible choice.",
        read=read_commonsenseqa,
        train_file=os.path.join("commonsenseqa", "train_rand_split.jsonl"),
        eval_file=os.path.join("commonsenseqa", "dev_rand_split.jsonl")),
}


def get_task(task) -> FewShotTask:
    if isinstance(task, FewShotTask):
        return task
    if task not in TASKS:
        raise FewShotError(f"Unknown few-shot task {task!r}; tasks: {sorted(TASKS)}")
    return TASKS[task]
