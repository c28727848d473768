"""The Evaluator's human-readable report: ``report.md`` and a self-contained ``report.html``.

The report holds the blessing verdict and its reason, the task's official metrics, every
scalar metric (next to the baseline's when there is one), the non-scalar metrics (a per-type
breakdown as a table, anything else as JSON), the confusion matrix of a classifier, the
training curve the Trainer recorded (``trainer/training_curve.py``) and, with a transfer
control, the from-scratch model's figures, the transfer gain and both validation curves.
Both files are built from one list of blocks, so they say the same thing; the HTML embeds
its images as base64 data URIs.

Plots use matplotlib's Agg canvas on a ``Figure`` of their own; pyplot's global state is
never touched.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
import os

import numpy as np
import tensorflow as tf

# Where a task's metrics hold its confusion matrix: {"labels": [...], "matrix": [[...]]}.
CONFUSION_KEY = "confusion_matrix"
# A translation model's attention weights of one sentence (components/tasks/translation.py):
# {"source": [words], "target": [words], "weights": [target x source]}, drawn as a heat map.
ATTENTION_KEY = "attention_heatmap"
ATTENTION_PNG = "attention_heatmap.png"

REPORT_MD = "report.md"
REPORT_HTML = "report.html"
TRAINING_CURVE_PNG = "training_curve.png"
CONFUSION_MATRIX_PNG = "confusion_matrix.png"
TRANSFER_CURVES_PNG = "transfer_curves.png"


# --- confusion matrix -------------------------------------------------------------------


def _class_ids(values, num_classes: int, what: str) -> np.ndarray:
    values = np.asarray(values).ravel()
    if values.size and not np.issubdtype(values.dtype, np.integer):
        if not np.issubdtype(values.dtype, np.number):
            raise ValueError(f"{what}s must be class ids, got dtype {values.dtype}")
        fractional = values[values != np.round(values)]
        if fractional.size:
            raise ValueError(f"{what} {fractional[0]!r} is not a class id")
    outside = values[(values < 0) | (values >= num_classes)]
    if outside.size:
        raise ValueError(f"{what} {outside[0].item()!r} is outside [0, {num_classes})")
    return values.astype(np.int64)


def confusion_matrix(labels, predictions, num_classes: int) -> np.ndarray:
    """Counts of (true class, predicted class): ``matrix[t, p]`` examples of class ``t`` were
    predicted ``p``. int64, shape ``[num_classes, num_classes]``."""
    if num_classes < 1:
        raise ValueError(f"num_classes must be at least 1, got {num_classes}")
    labels = _class_ids(labels, num_classes, "label")
    predictions = _class_ids(predictions, num_classes, "prediction")
    if labels.shape != predictions.shape:
        raise ValueError(f"{labels.size} labels but {predictions.size} predictions")
    matrix = np.zeros((num_classes, num_classes), dtype=np.int64)
    np.add.at(matrix, (labels, predictions), 1)
    return matrix


# --- plots ------------------------------------------------------------------------------


def _png(figure) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(figure)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    return buffer.getvalue()


def _write_bytes(data: bytes, path: str) -> None:
    directory = os.path.dirname(path)
    if directory:
        tf.io.gfile.makedirs(directory)
    with tf.io.gfile.GFile(path, "wb") as f:
        f.write(data)


def _curve_names(curve: dict) -> list[str]:
    """The curve's metric names (training, then validation-only ones), the loss first."""
    names = list(curve["metrics"])
    names += [name for name in (curve.get("validation") or {}).get("metrics", {})
              if name not in names]
    return sorted(names, key=lambda name: name != "loss")


def _training_curve_png(curve: dict) -> bytes:
    """One subplot per metric: the training mean per interval and, where the Trainer
    validated at its checkpoints, the eval-split value at each checkpoint beside it (the gap
    between the two lines shows overfitting), the kept (best) checkpoint marked."""
    from matplotlib.figure import Figure

    names = _curve_names(curve)
    if not curve.get("steps") or not names:
        raise ValueError("The training curve has no recorded points to plot")
    steps = curve["steps"]
    validation = curve.get("validation") or {"steps": [], "metrics": {}}
    best = curve.get("best")
    figure = Figure(figsize=(7, 2.8 * len(names)), layout="constrained")
    axes = figure.subplots(len(names), 1, squeeze=False)[:, 0]
    for ax, name in zip(axes, names):
        if name in curve["metrics"]:
            values = [np.nan if v is None else v for v in curve["metrics"][name]]
            ax.plot(steps, values, marker="o" if len(steps) <= 30 else None, markersize=3,
                    label="training")
        if name in validation["metrics"]:
            values = [np.nan if v is None else v for v in validation["metrics"][name]]
            ax.plot(validation["steps"], values, marker="s", markersize=4,
                    label="validation (eval split, at each checkpoint)")
        if best is not None:
            ax.axvline(best["step"], color="gray", linestyle="--", linewidth=1,
                       label=f"kept checkpoint (best {best['monitor']})")
        ax.set_title(f"{name}")
        ax.set_xlabel("training step")
        ax.set_ylabel(name)
        ax.grid(True, alpha=0.3)
        if validation["steps"] or best is not None:
            ax.legend(fontsize="small")
    figure.suptitle("Training curve (mean per interval)"
                    + (" and validation at each checkpoint" if validation["steps"] else ""))
    return _png(figure)


def _validation_series(curve: dict | None, name: str):
    validation = (curve or {}).get("validation") or {}
    values = (validation.get("metrics") or {}).get(name)
    if not values:
        return None
    return validation["steps"], [np.nan if v is None else v for v in values]


def _transfer_curves_png(curve: dict | None, control_curve: dict | None,
                         metric: str | None) -> bytes | None:
    """Both fine-tunings' validation curves (the loss and, when logged, the blessing metric)
    on shared axes: the pretrained model's and the from-scratch control's. None when
    neither recorded a validation curve."""
    from matplotlib.figure import Figure

    names = [name for name in dict.fromkeys(("loss", metric)) if name and (
        _validation_series(curve, name) or _validation_series(control_curve, name))]
    if not names:
        return None
    figure = Figure(figsize=(5.5 * len(names), 3.8))
    axes = figure.subplots(1, len(names), squeeze=False)[0]
    for axis, name in zip(axes, names):
        for label, source, style in (("pretrained", curve, "-o"),
                                     ("from scratch (control)", control_curve, "--s")):
            series = _validation_series(source, name)
            if series:
                axis.plot(series[0], series[1], style, markersize=3, label=label)
        axis.set_xlabel("step")
        axis.set_title(f"validation {name}")
        axis.grid(alpha=0.3)
        axis.legend()
    figure.suptitle("Fine-tuning from the pretrained backbone and from scratch")
    figure.tight_layout()
    return _png(figure)


def plot_training_curve(curve: dict, path: str) -> None:
    """Writes a PNG of the curve to ``path``: one subplot per metric (the loss first), the
    global training step on the x axis."""
    _write_bytes(_training_curve_png(curve), path)


def _class_names(matrix: np.ndarray, class_names) -> list[str]:
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
        raise ValueError(f"A confusion matrix must be square, got shape {matrix.shape}")
    if class_names is None:
        return [str(i) for i in range(matrix.shape[0])]
    if len(class_names) != matrix.shape[0]:
        raise ValueError(f"{len(class_names)} class names for a {matrix.shape[0]}-class "
                         "confusion matrix")
    return [str(name) for name in class_names]


def _confusion_matrix_png(matrix, class_names) -> bytes:
    from matplotlib.figure import Figure

    matrix = np.asarray(matrix)
    names = _class_names(matrix, class_names)
    size = min(max(3.5, 0.6 * len(names) + 2.0), 20.0)
    figure = Figure(figsize=(size + 1.0, size), layout="constrained")
    ax = figure.subplots()
    image = ax.imshow(matrix, cmap="Blues", interpolation="nearest")
    figure.colorbar(image, ax=ax)
    ticks = np.arange(len(names))
    crowded = len(names) > 4
    ax.set_xticks(ticks, labels=names, rotation=45 if crowded else 0,
                  ha="right" if crowded else "center")
    ax.set_yticks(ticks, labels=names)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    ax.set_title("Confusion matrix")
    top = matrix.max() if matrix.size else 0
    fontsize = 10 if len(names) <= 10 else 7
    for (row, column), count in np.ndenumerate(matrix):
        ax.text(column, row, str(count), ha="center", va="center", fontsize=fontsize,
                color="white" if top and count > top / 2 else "black")
    return _png(figure)


def _attention_png(heatmap: dict) -> bytes:
    """The attention weights as a grey-scale grid, source words across, target words down
    (Bahdanau et al. 2015, Figure 3)."""
    from matplotlib.figure import Figure

    weights = np.asarray(heatmap["weights"], dtype=float).reshape(
        len(heatmap["target"]), len(heatmap["source"]))
    figure = Figure(figsize=(1.0 + 0.45 * weights.shape[1], 1.0 + 0.45 * weights.shape[0]))
    axes = figure.add_subplot(1, 1, 1)
    axes.imshow(weights, cmap="gray", vmin=0.0, vmax=1.0)
    axes.set_xticks(range(weights.shape[1]), heatmap["source"], rotation=90)
    axes.set_yticks(range(weights.shape[0]), heatmap["target"])
    axes.xaxis.tick_top()
    figure.tight_layout()
    return _png(figure)


def plot_attention(heatmap: dict, path: str) -> None:
    """Writes the attention heat map (``ATTENTION_KEY`` data) as a PNG file."""
    _write_bytes(_attention_png(heatmap), path)


def plot_confusion_matrix(matrix, class_names, path: str) -> None:
    """Writes a PNG heatmap of ``matrix`` (rows true, columns predicted) with each count
    written in its cell."""
    _write_bytes(_confusion_matrix_png(matrix, class_names), path)


# --- report content ---------------------------------------------------------------------


def _is_scalar(value) -> bool:
    return value is None or isinstance(value, (bool, int, float, str, np.generic))


def format_value(value) -> str:
    """A metric value as text: floats with 4 decimals, integers as they are."""
    if isinstance(value, np.generic):
        value = value.item()
    if value is None:
        return "—"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return str(value) if not math.isfinite(value) else f"{value:.4f}"
    return str(value)


def _json_default(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return str(value)


def _nested_table(value):
    """A dict of dicts of scalars (e.g. per-type entity scores) or a dict of scalars as
    (header, rows); None for anything else."""
    if not isinstance(value, dict) or not value:
        return None
    if all(_is_scalar(v) for v in value.values()):
        return ["name", "value"], [[str(k), format_value(v)] for k, v in value.items()]
    if all(isinstance(v, dict) and all(_is_scalar(x) for x in v.values())
           for v in value.values()):
        columns = []
        for inner in value.values():
            columns += [k for k in inner if k not in columns]
        rows = [[str(k)] + [format_value(inner.get(c)) for c in columns]
                for k, inner in value.items()]
        return ["name"] + [str(c) for c in columns], rows
    return None


def _transfer_blocks(outcome: dict, transfer_plot: bool) -> list[tuple]:
    """The pretrained model against the from-scratch control (components/evaluator/
    transfer.py): the blessing metric of both, the gain, and both validation curves."""
    metric = outcome.get("metric")
    control = outcome["control_metrics"]
    gain = (outcome.get("transfer_gain") or {}).get(metric)
    blocks = [("h", 2, "Transfer: pretrained against from scratch"),
              ("p", f"The same task model, data, vocabulary, steps, schedule and seed, "
                    f"fine-tuned from a freshly initialised backbone: {metric} "
                    f"{format_value(outcome.get('value'))} pretrained, "
                    f"{format_value(control.get(metric))} from scratch, transfer gain "
                    f"{format_value(gain) if gain is None else f'{gain:+.4f}'}.")]
    if outcome.get("transfer_reason"):
        blocks.append(("p", outcome["transfer_reason"]))
    if transfer_plot:
        blocks.append(("image", "validation curves of both fine-tunings", TRANSFER_CURVES_PNG))
    return blocks


def _blocks(outcome: dict, curve, confusion, class_names, attention=None,
            transfer_plot: bool = False) -> list[tuple]:
    """The report as blocks: ("h", level, text), ("p", text), ("verdict", verdict, reason),
    ("table", header, rows), ("code", text), ("image", alt, file name)."""
    task = outcome.get("task")
    blocks = [("h", 1, "Evaluation report" + (f": {task}" if task else "")),
              ("p", f"Task: {task if task else 'n/a'}"),
              ("verdict", "BLESSED" if outcome.get("blessed") else "NOT BLESSED",
               str(outcome.get("reason", "")))]
    metric = outcome.get("metric")
    if metric is not None:
        line = f"Blessing metric: {metric} = {format_value(outcome.get('value'))}"
        line += f"; threshold {format_value(outcome.get('threshold'))}"
        baseline = outcome.get("baseline_metrics")
        if baseline:
            line += f"; baseline {format_value(baseline.get(metric))}"
        blocks.append(("p", line))
    if outcome.get("control_metrics") is not None:
        blocks += _transfer_blocks(outcome, transfer_plot)

    blocks.append(("h", 2, "Official metrics"))
    official = outcome.get("official_metrics") or {}
    if official:
        blocks.append(("table", ["metric", "value"],
                       [[name, format_value(v)] for name, v in official.items()]))
    else:
        blocks.append(("p", "No official metrics are defined for this task."))

    metrics = outcome.get("metrics") or {}
    baseline = outcome.get("baseline_metrics")
    control, gain = outcome.get("control_metrics"), outcome.get("transfer_gain") or {}
    scalars = {name: v for name, v in metrics.items() if _is_scalar(v)}
    if metrics:
        blocks.append(("h", 2, "All metrics"))
    meanings = outcome.get("meanings") or {}

    def column(source, name):
        return format_value(source.get(name)) if _is_scalar(source.get(name)) else "—"

    def gain_column(name):  # transfer.gains: floats, signed
        return f"{gain[name]:+.4f}" if name in gain else "—"

    if scalars:
        header = ["metric", "value"] + (["baseline"] if baseline else []) + (
            ["from scratch (control)", "transfer gain"] if control else []) + (
            ["meaning"] if meanings else [])
        rows = [[name, format_value(v)]
                + ([column(baseline, name)] if baseline else [])
                + ([column(control, name), gain_column(name)] if control else [])
                + ([meanings.get(name, "")] if meanings else [])
                for name, v in scalars.items()]
        blocks.append(("table", header, rows))
    blocks += [("p", note) for note in outcome.get("notes") or []]
    for name, value in metrics.items():
        if name in scalars:
            continue
        blocks.append(("h", 3, name))
        table = _nested_table(value)
        if table:
            blocks.append(("table", *table))
        else:
            blocks.append(("code", json.dumps(value, indent=2, default=_json_default)))

    if confusion is not None:
        names = _class_names(np.asarray(confusion), class_names)
        blocks.append(("h", 2, "Confusion matrix"))
        blocks.append(("p", "Rows are the true classes, columns the predicted ones."))
        blocks.append(("table", ["true \\ predicted"] + names,
                       [[names[i]] + [str(int(c)) for c in row]
                        for i, row in enumerate(np.asarray(confusion))]))
        blocks.append(("image", "confusion matrix", CONFUSION_MATRIX_PNG))

    if attention is not None:
        blocks.append(("h", 2, "Attention"))
        blocks.append(("p", "Attention weights of one translation: source words across, "
                            "target words down (white = 1)."))
        blocks.append(("image", "attention heat map", ATTENTION_PNG))

    if curve is not None:
        blocks.append(("h", 2, "Training curve"))
        steps = curve["steps"]
        blocks.append(("p", f"{len(steps)} points, each the mean over the steps since the "
                            "previous point."))
        blocks.append(("image", "training curve", TRAINING_CURVE_PNG))
        blocks.append(("table", ["metric", f"first (step {steps[0]})",
                                 f"last (step {steps[-1]})"],
                       [[name, format_value(curve["metrics"][name][0]),
                         format_value(curve["metrics"][name][-1])]
                        for name in _curve_names(curve) if name in curve["metrics"]]))
        blocks += _validation_blocks(curve)
    return blocks


def _validation_blocks(curve: dict) -> list[tuple]:
    """The eval-split metrics at each checkpoint (first, best, last) and the kept one."""
    validation = curve.get("validation")
    if not validation or not validation.get("steps"):
        return []
    steps, best = validation["steps"], curve.get("best")
    blocks = [("h", 3, "Validation at each checkpoint"),
              ("p", f"The eval split evaluated at {len(steps)} checkpoints (steps "
                    f"{steps[0]} to {steps[-1]}), plotted beside the training curve above.")]
    header = ["metric", f"first (step {steps[0]})", f"last (step {steps[-1]})"]
    index = steps.index(best["step"]) if best and best["step"] in steps else None
    if index is not None:
        header.insert(2, f"kept (step {best['step']})")
    rows = []
    for name, values in validation["metrics"].items():
        row = [name, format_value(values[0]), format_value(values[-1])]
        if index is not None:
            row.insert(2, format_value(values[index]))
        rows.append(row)
    blocks.append(("table", header, rows))
    if best is not None:
        blocks.append(("p", f"Kept checkpoint: step {best['step']}, the best {best['monitor']} "
                            f"({format_value(best['value'])}); the exported model has its "
                            f"weights."))
    return blocks


def _md_cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _markdown(blocks: list[tuple]) -> str:
    parts = []
    for block in blocks:
        kind = block[0]
        if kind == "h":
            parts.append("#" * block[1] + " " + block[2])
        elif kind == "p":
            parts.append(block[1])
        elif kind == "verdict":
            parts.append(f"**{block[1]}**: {block[2]}")
        elif kind == "table":
            header, rows = block[1], block[2]
            lines = ["| " + " | ".join(_md_cell(h) for h in header) + " |",
                     "|" + "---|" * len(header)]
            lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
            parts.append("\n".join(lines))
        elif kind == "code":
            parts.append(f"```json\n{block[1]}\n```")
        elif kind == "image":
            parts.append(f"![{block[1]}]({block[2]})")
    return "\n\n".join(parts) + "\n"


_STYLE = ("body{font-family:sans-serif;max-width:60em;margin:2em auto;padding:0 1em}"
          "table{border-collapse:collapse;margin:1em 0}"
          "th,td{border:1px solid #bbb;padding:0.25em 0.6em;text-align:right}"
          "th:first-child,td:first-child{text-align:left}"
          ".blessed{color:#1a7f37}.not-blessed{color:#cf222e}"
          "img{max-width:100%}pre{background:#f6f8fa;padding:0.8em}")


def _html(blocks: list[tuple], images: dict[str, bytes]) -> str:
    escape = html.escape
    title = next((b[2] for b in blocks if b[0] == "h"), "Evaluation report")
    parts = []
    for block in blocks:
        kind = block[0]
        if kind == "h":
            parts.append(f"<h{block[1]}>{escape(block[2])}</h{block[1]}>")
        elif kind == "p":
            parts.append(f"<p>{escape(block[1])}</p>")
        elif kind == "verdict":
            css = "blessed" if block[1] == "BLESSED" else "not-blessed"
            parts.append(f'<p><strong class="{css}">{escape(block[1])}</strong>: '
                         f"{escape(block[2])}</p>")
        elif kind == "table":
            head = "".join(f"<th>{escape(h)}</th>" for h in block[1])
            body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>"
                           for row in block[2])
            parts.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
        elif kind == "code":
            parts.append(f"<pre><code>{escape(block[1])}</code></pre>")
        elif kind == "image":
            data = base64.b64encode(images[block[2]]).decode("ascii")
            parts.append(f'<p><img alt="{escape(block[1])}" '
                         f'src="data:image/png;base64,{data}"></p>')
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>{escape(title)}</title>\n<style>{_STYLE}</style>\n</head>\n<body>\n"
            + "\n".join(parts) + "\n</body>\n</html>\n")


def write_report(outcome: dict, evaluation_dir: str, curve: dict | None = None,
                 confusion: np.ndarray | None = None,
                 class_names: list[str] | None = None, attention: dict | None = None,
                 control_curve: dict | None = None) -> dict:
    """Writes ``report.md`` and ``report.html`` (and ``training_curve.png`` /
    ``confusion_matrix.png`` when a curve / confusion matrix is given) into
    ``evaluation_dir``.

    Args:
        outcome: the Evaluator's outcome (``metric``, ``value``, ``metrics``, ``task``,
            ``official_metrics``, ``baseline_metrics``, ``threshold``, ``blessed``,
            ``reason``).
        curve: the Trainer's training curve, ``{"steps": [...], "metrics": {...}}``.
        confusion: ``[true, predicted]`` counts (``confusion_matrix``).
        class_names: the name of each class, in class-id order (default: the ids).
        attention: a translation's attention weights (``ATTENTION_KEY``), drawn as
            ``attention_heatmap.png``.
        control_curve: the from-scratch control's training curve, when the outcome has
            ``control_metrics``: both validation curves go in ``transfer_curves.png``.

    Returns:
        ``{file name: path}`` of every file written.
    """
    if curve is not None and not curve.get("steps"):
        curve = None  # nothing recorded: no section, no plot
    tf.io.gfile.makedirs(evaluation_dir)
    images = {}
    if confusion is not None:
        images[CONFUSION_MATRIX_PNG] = _confusion_matrix_png(confusion, class_names)
    if curve is not None:
        images[TRAINING_CURVE_PNG] = _training_curve_png(curve)
    if attention is not None:
        images[ATTENTION_PNG] = _attention_png(attention)
    if outcome.get("control_metrics") is not None:
        transfer = _transfer_curves_png(curve, control_curve, outcome.get("metric"))
        if transfer is not None:
            images[TRANSFER_CURVES_PNG] = transfer
    blocks = _blocks(outcome, curve, confusion, class_names, attention,
                     TRANSFER_CURVES_PNG in images)
    written = {}
    for name, data in images.items():
        written[name] = os.path.join(evaluation_dir, name)
        _write_bytes(data, written[name])
    for name, text in ((REPORT_MD, _markdown(blocks)), (REPORT_HTML, _html(blocks, images))):
        written[name] = os.path.join(evaluation_dir, name)
        with tf.io.gfile.GFile(written[name], "w") as f:
            f.write(text)
    return written
