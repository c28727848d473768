"""The files and streams the command line writes its answers to: a full disk while writing
`evaluate --json`, `few-shot --markdown` / `--json` or `predict`'s output is one line and a
non-zero exit, with no half-written file left and an existing one as it was."""

import errno
import io
import json
import types

import pytest

from lmfactory import cli

FULL = OSError(errno.ENOSPC, "No space left on device")


class _FullDisk(io.StringIO):
    """A file whose writes fail as on a full disk."""

    def write(self, text):
        raise OSError(errno.ENOSPC, "No space left on device", self.name)

    def __init__(self, name):
        super().__init__()
        self.name = name


def _full_disk_open(real_open):
    def fake(path, mode="r", *args, **kwargs):
        if "w" in mode:
            return _FullDisk(str(path))
        return real_open(path, mode, *args, **kwargs)
    return fake


def test_write_output_is_whole_or_nothing(tmp_path, monkeypatch):
    target = tmp_path / "out.json"
    assert cli._write_output(str(target), '{"a": 1}', "--json") is None
    assert json.loads(target.read_text()) == {"a": 1}
    monkeypatch.setattr(cli, "open", _full_disk_open(open), raising=False)
    problem = cli._write_output(str(target), '{"a": 2}', "--json")
    assert problem.startswith(f"--json {target}: the disk is full") and "\n" not in problem
    assert json.loads(target.read_text()) == {"a": 1}  # the earlier file is untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]  # no staging file left


def test_evaluate_json_on_a_full_disk_is_one_line(tmp_path, monkeypatch, capsys):
    from lmfactory.cli import evaluate as evaluate_module

    monkeypatch.setattr(evaluate_module, "evaluate", lambda *a, **k: {"accuracy": 0.5})
    monkeypatch.setattr(evaluate_module, "format_result", lambda result: "accuracy: 0.5\n")
    monkeypatch.setattr(cli, "open", _full_disk_open(open), raising=False)
    out = tmp_path / "metrics.json"
    code = cli.main(["evaluate", str(tmp_path), "--data", str(tmp_path / "d.tsv"),
                     "--json", str(out)])
    captured = capsys.readouterr()
    assert code == 2 and "accuracy: 0.5" in captured.out
    assert len(captured.err.strip().splitlines()) == 1 and "the disk is full" in captured.err
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_few_shot_markdown_on_a_full_disk_is_one_line(tmp_path, monkeypatch, capsys):
    from lmfactory.components.evaluator import few_shot

    loaded = types.SimpleNamespace(task_model=None, trained_length=16, model_config={
        "architecture": "gpt2"}, artifact="m", tokenizer=None, start_token_id=None)
    result = types.SimpleNamespace(to_dict=lambda: {"k": {"0": 0.5}})
    monkeypatch.setattr(few_shot, "load_causal_lm", lambda model: loaded)
    monkeypatch.setattr(few_shot, "model_context_length", lambda model: 16)
    monkeypatch.setattr(few_shot, "evaluate_few_shot", lambda *a, **k: result)
    monkeypatch.setattr(few_shot, "format_markdown", lambda r: "| k | acc |\n")
    monkeypatch.setattr(cli, "open", _full_disk_open(open), raising=False)
    for option in ("--markdown", "--json"):
        out = tmp_path / f"table{option}"
        code = cli.main(["few-shot", "--model", "m", "--task", "sst2", option, str(out)])
        err = capsys.readouterr().err
        assert code == 2, option
        assert len(err.strip().splitlines()) == 1 and "the disk is full" in err, err
        assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("raised, code, message", [
    (FULL, 2, "writing the predictions: the disk is full"),
    (BrokenPipeError(errno.EPIPE, "Broken pipe"), 1, ""),
])
def test_predict_output_that_cannot_be_written(monkeypatch, capsys, raised, code, message):
    from lmfactory.cli import predict as predict_module

    def failing_predict(*args, **kwargs):
        raise raised

    monkeypatch.setattr(cli, "_loadable_signatures", lambda model, trusted: ("m", {}))
    monkeypatch.setattr(predict_module, "predict", failing_predict)
    assert cli.main(["predict", "m", "a sentence"]) == code
    err = capsys.readouterr().err
    assert (message in err and len(err.strip().splitlines()) == 1) if message else err == ""
