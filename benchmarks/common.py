"""Shared pieces of the benchmark scripts: timing, the machine's measured matmul peak,
Markdown tables, plots and the result record every script returns to ``run_all.py``.

A benchmark module ``benchmarks/<name>.py`` defines ``run(scales, out_dir, quick=False) ->
Result`` (``scales``: the data / length multipliers of its scaling study, e.g. (1, 4, 16))
and a ``main()`` for running it alone. Times are the best (minimum) of a few repeats after a
warm-up (tracing, compilation): the minimum is the least disturbed by other processes on a
shared machine. Nothing here asserts a speed; the scripts print and record figures.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import time
from typing import Callable, Sequence

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEMO_CORPUS = os.path.join(REPO, "data", "demo", "corpus.txt")
# The shared task data sit beside the checkout (as the tests expect: ../shared/data).
WIKITEXT_VALID = os.path.join(os.path.dirname(REPO), "shared", "data", "wikitext-2",
                              "valid.txt")


@dataclasses.dataclass
class Table:
    """A Markdown table: ``columns`` names, ``rows`` of values (floats shown with
    ``digits`` significant figures), a ``title`` and a ``note`` printed under it."""
    title: str
    columns: Sequence[str]
    rows: list
    note: str = ""
    digits: int = 4

    def markdown(self) -> str:
        def cell(value):
            if isinstance(value, float):
                return f"{value:.{self.digits}g}" if abs(value) < 1e6 else f"{value:,.0f}"
            return str(value)

        lines = [f"### {self.title}", "", "| " + " | ".join(self.columns) + " |",
                 "|" + "|".join("---" for _ in self.columns) + "|"]
        lines += ["| " + " | ".join(cell(value) for value in row) + " |" for row in self.rows]
        if self.note:
            lines += ["", self.note]
        return "\n".join(lines) + "\n"


@dataclasses.dataclass
class Result:
    """What a benchmark module's ``run`` returns: its tables, the plots it wrote (paths),
    free-text findings, and raw figures (JSON-serialisable) for the report's JSON file."""
    name: str
    tables: list
    plots: list = dataclasses.field(default_factory=list)
    findings: list = dataclasses.field(default_factory=list)
    figures: dict = dataclasses.field(default_factory=dict)
    seconds: float = 0.0

    def markdown(self) -> str:
        parts = [f"## {self.name}", ""]
        parts += [table.markdown() for table in self.tables]
        parts += [f"![{os.path.basename(path)}]({os.path.basename(path)})\n"
                  for path in self.plots]
        parts += [f"- {finding}" for finding in self.findings]
        parts.append(f"\n_{self.seconds:.0f} s_\n")
        return "\n".join(parts)


def best_time(fn: Callable[[], object], repeats: int = 3, warmup: int = 1,
              budget_seconds: float | None = None) -> float:
    """The fastest of ``repeats`` timed calls of ``fn`` after ``warmup`` untimed ones (fewer
    repeats once ``budget_seconds`` of timed calls have passed)."""
    for _ in range(warmup):
        fn()
    best, spent = float("inf"), 0.0
    for _ in range(max(1, repeats)):
        started = time.perf_counter()
        fn()
        elapsed = time.perf_counter() - started
        best, spent = min(best, elapsed), spent + elapsed
        if budget_seconds is not None and spent > budget_seconds:
            break
    return best


def matmul_peak_flops(size: int = 2048, dtype: str = "float32", repeats: int = 5) -> float:
    """This machine's dense-matmul throughput (FLOP/s) measured now with TensorFlow: a
    ``size`` x ``size`` matmul chain in one tf.function, the best of ``repeats``."""
    import tensorflow as tf

    a = tf.random.normal((size, size), dtype=dtype)
    b = tf.random.normal((size, size), dtype=dtype)
    chain = 8

    @tf.function
    def chained(x, y):
        for _ in range(chain):
            x = tf.matmul(x, y) * 1e-3  # keeps values finite; the scale is negligible work
        return tf.reduce_sum(x)

    seconds = best_time(lambda: chained(a, b).numpy(), repeats=repeats, warmup=2)
    return chain * 2.0 * size ** 3 / seconds


def machine_info() -> dict:
    import tensorflow as tf

    return {"cpu_count": os.cpu_count(), "platform": platform.platform(),
            "python": platform.python_version(), "tensorflow": tf.__version__,
            "devices": [device.name for device in tf.config.list_physical_devices()]}


def line_plot(path: str, title: str, x_label: str, y_label: str, series: dict,
              log_x: bool = False, log_y: bool = False) -> str:
    """A PNG line plot: ``series`` = {label: (xs, ys)}."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(6.4, 4.2), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot(1, 1, 1)
    for label, (xs, ys) in series.items():
        axes.plot(xs, ys, marker="o", label=label)
    axes.set_title(title)
    axes.set_xlabel(x_label)
    axes.set_ylabel(y_label)
    if log_x:
        axes.set_xscale("log", base=2)
    if log_y:
        axes.set_yscale("log")
    axes.grid(alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path)
    return path


def bar_plot(path: str, title: str, y_label: str, bars: dict) -> str:
    """A PNG bar chart: ``bars`` = {label: value}."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(6.4, 4.2), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot(1, 1, 1)
    labels = list(bars)
    axes.bar(range(len(labels)), [bars[label] for label in labels])
    axes.set_xticks(range(len(labels)), labels, rotation=20, ha="right")
    axes.set_title(title)
    axes.set_ylabel(y_label)
    axes.grid(alpha=0.3, axis="y")
    figure.tight_layout()
    figure.savefig(path)
    return path


def write_json(value, path: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=2, sort_keys=True, default=str)


def corpus_lines(path: str, scale: float, base_lines: int) -> list[str]:
    """``base_lines * scale`` non-empty lines of a text file, cycling through it when it is
    shorter (so a 16x scale keeps growing the data)."""
    with open(path, encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f if line.strip()]
    if not lines:
        raise ValueError(f"{path} has no text lines")
    wanted = max(1, int(base_lines * scale))
    return [lines[i % len(lines)] for i in range(wanted)]


def save_result(result: Result, out_dir: str) -> None:
    """Writes ``result.md`` and ``result.json`` (tables, plots, findings, figures) into
    ``out_dir`` (what ``run_all.py`` collects from each benchmark's subprocess)."""
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "result.md"), "w", encoding="utf-8") as f:
        f.write(result.markdown())
    write_json({"name": result.name, "seconds": result.seconds, "plots": result.plots,
                "findings": result.findings, "figures": result.figures,
                "tables": [dataclasses.asdict(table) for table in result.tables]},
               os.path.join(out_dir, "result.json"))


def argument_parser(doc: str):
    """The command line every benchmark module shares: --out-dir, --quick, --scales."""
    import argparse

    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--out-dir", default="benchmark_results")
    parser.add_argument("--quick", action="store_true", help="smoke run, under a minute")
    parser.add_argument("--scales", default="1,4,16", help="comma-separated, e.g. 1,4,16")
    return parser


def print_and_save(result: Result, out_dir: str, json_name: str) -> None:
    """What a module's ``main`` ends with: the raw figures as JSON, the Markdown printed."""
    os.makedirs(out_dir, exist_ok=True)
    write_json(result.figures, os.path.join(out_dir, json_name))
    print(result.markdown())
