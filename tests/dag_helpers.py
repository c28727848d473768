"""Small data and tiny training settings shared by the end-to-end DAG tests."""

from pathlib import Path

# direct_running_mode=auto: the recipe default; these small inputs run in_memory (beam_options)
TINY_TRAINING = [
    "pretraining.steps=12", "pretraining.batch_size=8", "pretraining.eval_steps=2",
    "finetuning.steps=12", "finetuning.batch_size=8", "finetuning.eval_steps=2",
    "runtime.steps_per_checkpoint=6", "runtime.beam.direct_running_mode=auto",
    "runtime.beam.direct_num_workers=1", "objective.max_seq_length=32",
    "objective.dupe_factor=1", "objective.max_predictions_per_seq=5",
    "overrides={max_sequence_length: 64}",
]


def small_corpus(demo_data: Path, path: Path, documents: int) -> str:
    docs = (demo_data / "corpus.txt").read_text(encoding="utf-8").split("\n\n")[:documents]
    path.write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    return str(path)


def small_tsv(source: Path, path: Path, rows: int) -> str:
    lines = source.read_text(encoding="utf-8").splitlines()
    path.write_text("\n".join(lines[: rows + 1]) + "\n", encoding="utf-8")
    return str(path)
