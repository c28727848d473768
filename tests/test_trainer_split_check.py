"""The hashed train/eval split warns when the eval share lands far from ``eval_fraction``
(0.2 on a 35-article SQuAD file gives 10.3%): logged and recorded in
the ingestion report."""

import logging

import pytest

from lmfactory.components.example_gen import ingest
from lmfactory.components.example_gen.report import split_check


def _counts(train: int, evaluation: int) -> dict:
    return {"train": {"good": train, "bad": 1}, "eval": {"good": evaluation, "bad": 0}}


def test_split_check_flags_a_share_far_from_the_request():
    close = split_check(0.2, _counts(80, 18))  # 18.4%: within a quarter of 20%
    assert close["warning"] is None and close["eval_fraction"] == pytest.approx(18 / 98, 1e-5)
    far = split_check(0.2, _counts(87, 10))  # 10.3%, the case
    assert far["eval_examples"] == 10 and far["examples"] == 97
    assert far["eval_fraction"] == pytest.approx(0.103093, abs=1e-6)
    assert far["warning"].startswith("eval_fraction 0.2 gave an eval split of 10.3% of the 97 "
                                     "good examples (10)")
    assert split_check(0.2, _counts(60, 40))["warning"]  # too many is flagged too


def test_ingestion_report_records_and_logs_the_split_warning(tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    documents = [f"Document number {i} says something about topic {i}.\n"
                 f"A second line for document {i}." for i in range(6)]
    (tmp_path / "corpus.txt").write_text("\n\n".join(documents) + "\n", encoding="utf-8")
    report = ingest({"format": "text", "path": str(tmp_path / "corpus.txt"),
                     "eval_fraction": 0.2}, str(tmp_path / "out"),
                    ["--direct_running_mode=in_memory"])
    check = report["split_check"]
    assert report["splits"]["eval"]["good"] == check["eval_examples"] == 2  # 2 of 6: 33%
    assert check["requested_eval_fraction"] == 0.2 and check["warning"]
    assert "TextExampleGen: eval_fraction 0.2 gave an eval split of 33.3%" in caplog.text
    # Named split files are not a hashed split: nothing to check.
    named = ingest({"format": "text", "splits": {"train": str(tmp_path / "corpus.txt"),
                                                 "eval": str(tmp_path / "corpus.txt")}},
                   str(tmp_path / "named"), ["--direct_running_mode=in_memory"])
    assert "split_check" not in named
