"""Extraction failures are flagged at the end of a run (issue 31, defect 6): ``metrics.json``
holds their count and share of the extraction requests, and the end-of-run summary says so, for
SYNAPSE's LLM concept extractor and GAAMA's LLM build, against the loopback server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from loopback import completion_body, run_sample_on_loopback
from test_configs import make_cfg  # tests/ is on sys.path (rootdir conftest)
from upstream_files import ROOT

from synapse_pt.commands.build import run_category_names
from synapse_pt.commands.run import run
from synapse_pt.data import load_locomo, sample_path
from synapse_pt.eval.records.record import extraction_summary
from synapse_pt.eval.reports.console import render_summary

FIRST_TURN = next(load_locomo(sample_path()).conversations[0].turns()).content
PROSE = "I am sorry but I cannot list anything for this excerpt."  # no list to parse


def first_user(body: dict[str, Any]) -> str:
    return next(m["content"] for m in body["messages"] if m["role"] == "user")


def is_repair(body: dict[str, Any]) -> bool:
    """The repair round re-asks with the garbled reply and an instruction appended."""
    return sum(m["role"] == "user" for m in body["messages"]) > 1


def run_against(tmp_path: Path, monkeypatch, garble, *overrides: str
                ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    def behaviour(body: dict[str, Any], n: int) -> tuple[int, str, float]:
        text = PROSE if garble(first_user(body)) else '["pottery", "class"]'
        return 200, completion_body(text, {"prompt_tokens": 50, "completion_tokens": 5}), 0.0

    cfg, metrics, bodies = run_sample_on_loopback(tmp_path, monkeypatch, behaviour, "smoke=true",
                                                   *overrides)
    on_disk = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert on_disk["extraction"] == metrics["extraction"]
    text = render_summary(metrics, run_category_names(cfg), label="t", output_dir="out")
    metrics["_summary"] = text
    return metrics, bodies


def test_every_window_failing_is_flagged(tmp_path: Path, monkeypatch) -> None:
    metrics, bodies = run_against(tmp_path, monkeypatch, lambda _: True)
    windows = [b for b in bodies if not is_repair(b)]
    assert windows and len([b for b in bodies if is_repair(b)]) == len(windows)  # one repair each
    assert metrics["extraction"] == {"failures": len(windows), "attempts": len(windows),
                                     "failure_share": 1.0}
    assert (f"EXTRACTION FAILURES: {len(windows)} of {len(windows)} LLM extraction requests "
            "(100.0%) (every one) gave no usable reply") in " ".join(metrics["_summary"].split())


def test_one_failing_window_is_counted_with_its_share(tmp_path: Path, monkeypatch) -> None:
    metrics, bodies = run_against(tmp_path, monkeypatch, lambda user: FIRST_TURN in user)
    windows = [first_user(b) for b in bodies if not is_repair(b)]
    bad = sum(FIRST_TURN in w for w in windows)
    assert 0 < bad < len(windows)
    assert metrics["extraction"] == {"failures": bad, "attempts": len(windows),
                                     "failure_share": bad / len(windows)}
    assert f"{100 * bad / len(windows):.1f}%" in metrics["_summary"]
    assert "(every one)" not in metrics["_summary"]


RETRY_SOURCE = ROOT / "gaama" / "services" / "llm_extractors.py"


@pytest.mark.skipif(not RETRY_SOURCE.is_file(), reason=f"{RETRY_SOURCE} not at hand (GAAMA's "
                    "retry prompt is in no shared data file)")
def test_gaama_llm_build_failures_are_flagged(tmp_path: Path, monkeypatch) -> None:
    # each chunk's fact request, then the code's two retries (services/llm_extractors.py 56-68);
    # no reflection request follows a chunk without facts (ltm_creator.py 176)
    head = (ROOT / "gaama" / "prompts" / "fact_generation.md").read_text().splitlines()[0]
    metrics, bodies = run_against(tmp_path, monkeypatch, lambda _: True, "memory=gaama")
    chunks = [b for b in bodies if first_user(b).startswith(head)]
    retries = [b for b in bodies if not first_user(b).startswith(head)]
    # every chunk's retries quote the same garbled reply and errors: the first chunk's are sent,
    # the others' are the same requests, answered by the response cache
    assert len(chunks) > 1 and len(retries) == 2
    assert all(len(b["messages"]) == 1 and PROSE in first_user(b) for b in retries)
    assert metrics["extraction"] == {"failures": len(chunks), "attempts": len(chunks),
                                     "failure_share": 1.0}
    assert "EXTRACTION FAILURES" in metrics["_summary"]


def test_an_llm_free_build_has_no_extraction_section(tmp_path: Path) -> None:
    cfg = make_cfg("dataset=sample", "embedder=hashing", "smoke=true", "logger=none",
                   "device=cpu", f"paths.cache_dir={tmp_path / 'cache'}",
                   output_dir=str(tmp_path / "run"))
    metrics = run(cfg)
    assert "extraction" not in metrics
    assert "EXTRACTION" not in render_summary(metrics, run_category_names(cfg), label="t",
                                              output_dir="out")


def test_more_failures_than_attempts_is_an_error() -> None:
    assert extraction_summary({"extraction_failures": 0, "extraction_attempts": 4}) == {
        "failures": 0, "attempts": 4, "failure_share": 0.0}
    with pytest.raises(ValueError, match="3 extraction failures of 2 attempts"):
        extraction_summary({"extraction_failures": 3, "extraction_attempts": 2})


def test_gaama_llm_build_failures_with_repair_rounds_are_flagged(tmp_path: Path,
                                                                 monkeypatch) -> None:
    """The same under ``memory.replies=repair`` (our repair round, which needs no GAAMA source):
    each chunk's fact request and one repair that quotes the garbled reply, every chunk a
    failure."""
    head = (ROOT / "gaama" / "prompts" / "fact_generation.md").read_text().splitlines()[0]
    metrics, bodies = run_against(tmp_path, monkeypatch, lambda _: True, "memory=gaama",
                                  "memory.replies=repair")
    chunks = [b for b in bodies if first_user(b).startswith(head) and not is_repair(b)]
    repairs = [b for b in bodies if is_repair(b)]
    assert len(chunks) > 1 and len(repairs) == len(chunks)
    assert all(PROSE in json.dumps(b["messages"]) for b in repairs)
    assert metrics["extraction"] == {"failures": len(chunks), "attempts": len(chunks),
                                     "failure_share": 1.0}
    assert "EXTRACTION FAILURES" in metrics["_summary"]
