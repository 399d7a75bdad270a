"""The paper's API path against a real OpenAI-compatible server nobody here wrote (issue 31):
``transformers serve`` (transformers' own FastAPI/uvicorn server, the ``dev`` extra) serving a
safetensors copy of the bundled SmolLM2 (:mod:`synapse_pt.models.llm.safetensors_copy`, made once
into the cache). ``eval=qa llm=vllm`` on the sample: every answer asked, usage as the server
counts it, a wrong model name one clear line, and with the server stopped the same command answered
from the response cache. On 127.0.0.1, a port the kernel hands out, bounded waits, stopped by its
pid."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pandas as pd
import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("SYNAPSE_CACHE") or REPO_ROOT / ".cache")
START_TIMEOUT_S = 180


def transformers_cli() -> str | None:
    """The ``transformers`` command of this interpreter's environment, when ``serve`` can run
    (it needs FastAPI and uvicorn)."""
    missing = [m for m in ("fastapi", "uvicorn") if importlib.util.find_spec(m) is None]
    cli = Path(sys.executable).parent / "transformers"
    if missing or not cli.is_file():
        reason = f"transformers serve needs {missing or 'the transformers command'}"
        if os.environ.get("CI"):  # CI installs the dev extra: a missing piece is a failure
            pytest.fail(f"{reason}; install the dev extra (pip install -e '.[dev]')")
        pytest.skip(f"{reason}: pip install -e '.[dev]'")
    return str(cli)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def transformers_serve(model: Path, log: Path) -> Iterator[str]:
    """``transformers serve <model>`` on 127.0.0.1; yields its ``/v1`` URL; stopped by pid."""
    port = free_port()
    cmd = [transformers_cli(), "serve", "--host", "127.0.0.1", "--port", str(port),
           "--device", "cpu", "--dtype", "float32", "--log-level", "warning", str(model)]
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, "HF_HUB_OFFLINE": "1",
                                     "TRANSFORMERS_OFFLINE": "1"})
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"transformers serve exited {proc.returncode}: "
                                     f"{log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise AssertionError(f"transformers serve not up in {START_TIMEOUT_S}s: "
                                         f"{log.read_text()[-3000:]}") from None
                time.sleep(1)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)


def locked_copy() -> Path:
    """The safetensors copy in the cache, made by one process at a time: a pytest-xdist worker
    that finds the other one making it (a fresh clone) waits for that copy instead of making a
    second one beside it."""
    from filelock import FileLock

    from synapse_pt.models.llm.safetensors_copy import safetensors_copy

    CACHE.mkdir(parents=True, exist_ok=True)
    with FileLock(str(CACHE / "safetensors_copy.lock")):
        return safetensors_copy(CACHE)


def run_cli(tmp_path: Path, name: str, *overrides: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "synapse_pt.run", "eval=qa", "llm=vllm", "dataset=sample",
         "memory=bm25", "embedder=hashing", "device=cpu", "logger=none",
         "llm.backend.max_concurrency=2", "llm.backend.timeout_s=300", "llm.backend.max_retries=0",
         *overrides, f"paths.cache_dir={tmp_path / 'cache'}", f"hydra.run.dir={tmp_path / name}"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=900,
        env={**os.environ, "VLLM_API_KEY": "unused", "TQDM_DISABLE": "1"})


@pytest.mark.slow
def test_safetensors_copy_matches_the_gguf_model(tmp_path: Path) -> None:
    """The copy is the GGUF model: the same logits on a prompt; a second call reuses it."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from synapse_pt.models.llm.safetensors_copy import MARKER, safetensors_copy
    from synapse_pt.models.llm.transformers_local import resolve_llm

    folder = locked_copy()
    assert (folder / "model.safetensors").is_file() and (folder / MARKER).is_file()
    stamp = (folder / "model.safetensors").stat().st_mtime_ns
    assert safetensors_copy(CACHE) == folder
    assert (folder / "model.safetensors").stat().st_mtime_ns == stamp  # made once
    spec = resolve_llm("bundled:smollm2")
    kw = {"gguf_file": spec.gguf_file, "local_files_only": True}
    gguf = AutoModelForCausalLM.from_pretrained(spec.source, dtype="float32", **kw).eval()
    copy = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True).eval()
    ids = AutoTokenizer.from_pretrained(folder)("Caroline went to a pottery class.",
                                                return_tensors="pt").input_ids
    assert ids.equal(AutoTokenizer.from_pretrained(spec.source, **kw)(
        "Caroline went to a pottery class.", return_tensors="pt").input_ids)
    with torch.no_grad():
        assert torch.equal(gguf(ids).logits, copy(ids).logits)
    with pytest.raises(ValueError, match="no GGUF model"):
        safetensors_copy(tmp_path, str(folder))


@pytest.mark.slow
def test_qa_on_the_sample_through_transformers_serve(tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    transformers_cli()  # skip (or, in CI, fail) before the copy when serve cannot run
    model = locked_copy()
    with transformers_serve(model, tmp_path / "serve.log") as url:
        common = (f"llm.backend.base_url={url}",)
        first = run_cli(tmp_path, "run", f"llm.backend.model={model}", *common)
        assert first.returncode == 0, first.stderr[-3000:]
        wrong = run_cli(tmp_path, "wrong", "llm.backend.model=no-such-model", *common)
    # the server is stopped: the same command is answered from the response cache alone
    again = run_cli(tmp_path, "again", f"llm.backend.model={model}", *common)
    assert again.returncode == 0, again.stderr[-3000:]

    preds = pd.read_parquet(tmp_path / "run" / "predictions.parquet")
    answered = preds[~preds["gated"]]
    assert len(answered) == 14 and answered["prediction"].str.len().gt(0).all()
    # usage as the server counts it: SmolLM2's chat template around the same messages
    tokenizer = AutoTokenizer.from_pretrained(model)
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    usage = metrics["usage"]
    assert usage["n_responses"] == 14
    spend = json.loads((tmp_path / "run" / "spend.json").read_text())
    assert (spend["n_paid"], spend["n_cached"]) == (14, 0)  # every answer asked of the server
    assert usage["prompt_tokens_total"] == int(answered["prompt_tokens"].sum())
    assert (answered["completion_tokens"] >= 1).all()
    assert (answered["completion_tokens"] <= 32).all()  # eval.max_answer_tokens
    # each response's prompt_tokens is what SmolLM2's chat template makes of its request's
    # messages (read back from the response cache): the server's count, not a local estimate
    with sqlite3.connect(tmp_path / "cache" / "llm_responses.sqlite") as db:
        rows = db.execute("SELECT request, response FROM responses").fetchall()
    assert len(rows) == 14
    for request, response in rows:
        messages = [{"role": r, "content": c} for r, c in json.loads(request)["messages"]]
        expected = len(tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                                      tokenize=True, return_dict=False))
        assert json.loads(response)["prompt_tokens"] == expected
    # the rerun: no server, every answer from the cache, the same predictions
    cached = json.loads((tmp_path / "again" / "spend.json").read_text())
    assert (cached["n_paid"], cached["n_cached"]) == (0, 14)
    pd.testing.assert_series_equal(
        pd.read_parquet(tmp_path / "again" / "predictions.parquet")["prediction"],
        preds["prediction"])
    # a wrong model name: one line naming it and the server's reply
    assert wrong.returncode == 1
    lines = wrong.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("[synapse_pt] error: "), wrong.stderr[-3000:]
    assert "(model no-such-model)" in lines[0] and "HTTP 400" in lines[0]
    assert "Traceback" not in wrong.stderr
