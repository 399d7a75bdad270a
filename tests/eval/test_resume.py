"""Resuming: an interrupted QA run restarted with the same config and output folder re-asks nothing
already answered and writes byte-identical predictions.parquet and metrics.json (issue 5, item 5).

The answer model is a deterministic scripted backend behind a wrapper that dies after N answers,
underneath a real :class:`~synapse_pt.models.llm.cache.CachedLLM` with a SQLite cache in tmp_path.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

import synapse_pt.commands.run as run_module
from synapse_pt.models.llm.base import LLM, ChatRequest, ChatResponse, OnResponse
from synapse_pt.models.llm.cache import CachedLLM, ResponseCache

CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs"
OUTPUTS = ("predictions.parquet", "metrics.json")


class Interrupted(RuntimeError):
    """Stands in for a crash or a Ctrl-C in the middle of a run."""


class ScriptedBackend(LLM):
    """Deterministic answers (a function of the prompt); counts every request it answers."""

    backend = "scripted"
    model = "scripted-1"

    def __init__(self) -> None:
        self.answered = 0

    def generate(self, requests: Sequence[ChatRequest]) -> list[ChatResponse]:
        out = []
        for r in requests:
            self.answered += 1
            prompt = r.messages[-1][1]
            question = prompt.split("Question: ")[-1].splitlines()[0]
            text = f"answer {len(prompt) % 97} to {question.split()[-1]}"
            out.append(ChatResponse(text, prompt_tokens=len(prompt.split()),
                                    completion_tokens=len(text.split()),
                                    latency_s=0.01 * (len(prompt) % 50), model=self.model))
        return out

    def count_tokens(self, text: str) -> int:
        return len(text.split())


class DiesAfter(LLM):
    """Passes requests one by one to ``inner`` and raises :class:`Interrupted` after ``limit``
    answers (``None``: never). Reports each answer as it arrives, like a real backend."""

    def __init__(self, inner: LLM, limit: int | None) -> None:
        self.inner = inner
        self.limit = limit
        self.backend = inner.backend
        self.model = inner.model
        self.answered = 0

    def generate(self, requests: Sequence[ChatRequest]) -> list[ChatResponse]:
        return self.generate_incremental(requests, lambda i, r: None)

    def generate_incremental(self, requests: Sequence[ChatRequest],
                             on_response: OnResponse) -> list[ChatResponse]:
        out = []
        for i, request in enumerate(requests):
            if self.limit is not None and self.answered >= self.limit:
                raise Interrupted(f"interrupted after {self.answered} answers")
            response = self.inner.generate([request])[0]
            self.answered += 1
            on_response(i, response)
            out.append(response)
        return out

    def count_tokens(self, text: str) -> int:
        return self.inner.count_tokens(text)


def compose_cfg(out_dir: Path, cache_dir: Path, *overrides: str) -> DictConfig:
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose(config_name="run", overrides=[
            "dataset=sample", "embedder=hashing", "memory=bm25", "memory.k=10", "eval=qa",
            "eval.answer_batch_size=4", "llm=smollm2", f"paths.output_dir={out_dir}",
            f"paths.cache_dir={cache_dir}", *overrides])


def run_with(monkeypatch: pytest.MonkeyPatch, cfg: DictConfig, cache_file: Path,
             limit: int | None) -> tuple[ScriptedBackend, CachedLLM]:
    """``run(cfg)`` with the answer model ``CachedLLM(DiesAfter(ScriptedBackend, limit))``."""
    backend = ScriptedBackend()
    llm = CachedLLM(DiesAfter(backend, limit), ResponseCache(cache_file))
    monkeypatch.setattr(run_module, "build_llm", lambda _cfg, ledger=None: llm)
    try:
        run_module.run(cfg)
    finally:
        llm.cache.close()
    return backend, llm


def test_interrupted_run_resumes_without_reasking_and_writes_identical_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out_dir, cache_dir = tmp_path / "run", tmp_path / "cache"
    cfg = compose_cfg(out_dir, cache_dir)

    # the reference: one uninterrupted run (its own cache), then its folder is cleared
    backend, _ = run_with(monkeypatch, cfg, tmp_path / "reference.sqlite", limit=None)
    total = backend.answered
    assert total >= 8
    reference = {name: (out_dir / name).read_bytes() for name in OUTPUTS}
    shutil.rmtree(out_dir)

    # interrupted: same config and folder, a fresh cache; dies after 6 answers (mid-batch)
    cache_file = tmp_path / "resume.sqlite"
    with pytest.raises(Interrupted):
        run_with(monkeypatch, cfg, cache_file, limit=6)
    assert not any((out_dir / name).exists() for name in OUTPUTS)
    assert len(ResponseCache(cache_file)) == 6

    # restarted with the same config and folder: only the missing answers are asked
    backend, llm = run_with(monkeypatch, cfg, cache_file, limit=None)
    assert backend.answered == total - 6
    assert llm.hits == 6 and llm.misses == total - 6
    for name in OUTPUTS:
        assert (out_dir / name).read_bytes() == reference[name], name

    # a second restart asks nothing at all and still writes the same bytes
    backend, _ = run_with(monkeypatch, cfg, cache_file, limit=None)
    assert backend.answered == 0
    for name in OUTPUTS:
        assert (out_dir / name).read_bytes() == reference[name], name


def test_spend_counts_cache_hits_as_free_and_metrics_keep_the_method_cost(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``spend.json`` says what this run paid (a hit costs nothing); ``metrics.json``'s usage is
    what the answers cost, the same whether they came from the cache or not (issue 10, item 3)."""
    import json

    out_dir = tmp_path / "run"
    prices = "+llm.prices={scripted-1: {prompt: 1.0, completion: 2.0}}"
    cfg = compose_cfg(out_dir, tmp_path / "cache", prices)
    cache_file = tmp_path / "spend.sqlite"
    backend, _ = run_with(monkeypatch, cfg, cache_file, limit=None)
    total = backend.answered
    first = json.loads((out_dir / "spend.json").read_text())
    usage = json.loads((out_dir / "metrics.json").read_text())["usage"]
    # hand-computed from the predictions: 1 USD per 1M prompt tokens, 2 per 1M completion tokens
    import pandas as pd
    df = pd.read_parquet(out_dir / "predictions.parquet")
    expected = (df["prompt_tokens"].sum() * 1.0 + df["completion_tokens"].sum() * 2.0) / 1e6
    assert expected > 0
    assert usage["cost_usd"] == pytest.approx(expected)
    assert "cost_usd_spent" not in usage and "n_cached" not in usage
    assert (first["n_paid"], first["n_cached"]) == (total, 0)
    assert first["cost_usd_spent"] == pytest.approx(expected)

    backend, _ = run_with(monkeypatch, cfg, cache_file, limit=None)  # everything from the cache
    assert backend.answered == 0
    second = json.loads((out_dir / "spend.json").read_text())
    assert (second["n_paid"], second["n_cached"]) == (0, total)
    assert second["cost_usd_spent"] == 0.0
    assert second["cost_usd_if_uncached"] == pytest.approx(expected)
    assert json.loads((out_dir / "metrics.json").read_text())["usage"] == usage
