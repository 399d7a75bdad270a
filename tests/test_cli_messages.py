"""What a newcomer sees (issue 31, defect 7): ``--help`` and README name the LLM settings; an LLM
server's timeout, refused connection or unknown model ends the run in one line, no traceback;
progress bars stay silent when stderr is not a terminal (the run log shows the progress)."""

from __future__ import annotations

import ast
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from loopback import completion_body, serve

REPO_ROOT = Path(__file__).resolve().parents[1]
LLM_KEYS = ("llm.backend.model", "llm.backend.base_url", "llm.max_cost_usd")
BASE = ("eval=qa", "llm=vllm", "dataset=sample", "memory=bm25", "embedder=hashing", "device=cpu",
        "logger=none", "llm.backend.max_retries=0", "llm.backend.model=served-model")


def cli(tmp_path: Path, *overrides: str, env: dict[str, str] | None = None
        ) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k != "TQDM_DISABLE"}
    return subprocess.run(
        [sys.executable, "-m", "synapse_pt.run", *overrides,
         f"paths.cache_dir={tmp_path / 'cache'}", f"hydra.run.dir={tmp_path / 'run'}"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, env={**environ, **(env or {})})


def test_help_and_readme_name_the_llm_settings() -> None:
    proc = subprocess.run([sys.executable, "-m", "synapse_pt.run", "--help"], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    readme = (REPO_ROOT / "README.md").read_text()
    for key in LLM_KEYS:
        assert f"{key}=" in proc.stdout, key
        assert f"{key}=" in readme, key


def closed_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def slow(body: dict[str, Any], n: int) -> tuple[int, str, float]:
    return 200, completion_body("late"), 3.0


def unknown_model(body: dict[str, Any], n: int) -> tuple[int, str, float]:
    error = {"error": {"message": f"The model `{body['model']}` does not exist.",
                       "type": "invalid_request_error", "code": "model_not_found"}}
    return 404, json.dumps(error), 0.0


@pytest.mark.parametrize(("behaviour", "extra", "expected"), [
    (None, (), "connection error after 1 attempts"),
    (slow, ("llm.backend.timeout_s=0.5",), "timeout after 0.5s"),
    (unknown_model, (), "HTTP 404"),
], ids=["connection", "timeout", "wrong-model"])
def test_an_llm_server_error_is_one_line(tmp_path: Path, behaviour, extra: tuple[str, ...],
                                         expected: str) -> None:
    env = {"VLLM_API_KEY": "sk-test"}
    if behaviour is None:
        proc = cli(tmp_path, *BASE, *extra,
                   f"llm.backend.base_url=http://127.0.0.1:{closed_port()}/v1", env=env)
    else:
        with serve(behaviour) as server:
            proc = cli(tmp_path, *BASE, *extra, f"llm.backend.base_url={server.url}", env=env)
    assert proc.returncode == 1, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr[-3000:]
    assert lines[0].startswith("[synapse_pt] error: http://127.0.0.1:")
    assert "(model served-model)" in lines[0] and expected in lines[0]
    assert "Traceback" not in proc.stdout + proc.stderr
    assert "LLMError: " in (tmp_path / "run" / "run.log").read_text()  # the log keeps it


def test_progress_is_logged_not_drawn_when_stderr_is_a_file(tmp_path: Path) -> None:
    """Seven retrieval batches of 2 of the sample's 14 questions, stderr captured (not a TTY):
    no bar is drawn, and the run log shows the step's progress (issue 50, item 4: on main it
    showed nothing): its start, each batch (a seventh, more than a tenth) and its end."""
    proc = cli(tmp_path, "dataset=sample", "memory=bm25", "embedder=hashing", "device=cpu",
               "logger=none", "eval.retrieval_batch_size=2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "retrieve" not in proc.stderr and "it/s" not in proc.stderr, proc.stderr[-2000:]
    log = (tmp_path / "run" / "run.log").read_text()
    done = [int(line.split("retrieve: ")[1].split("/")[0]) for line in log.splitlines()
            if "retrieve: " in line and "/14 questions" in line]
    assert done == [0, 2, 4, 6, 8, 10, 12, 14], log
    assert "retrieve: 14/14 questions (100%)" in log and " in all" in log


def test_every_progress_bar_of_the_package_turns_off_off_a_terminal() -> None:
    """Each ``tqdm(...)`` call passes ``disable=`` whose value can be ``None`` (tqdm's "off when
    not a TTY"): the literal ``None`` or ``<condition> or None``."""
    calls = []
    for path in (REPO_ROOT / "synapse_pt").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "tqdm":
                disable = next((k.value for k in node.keywords if k.arg == "disable"), None)
                ok = disable is not None and (
                    (isinstance(disable, ast.Constant) and disable.value is None)
                    or (isinstance(disable, ast.BoolOp) and isinstance(disable.op, ast.Or)
                        and isinstance(disable.values[-1], ast.Constant)
                        and disable.values[-1].value is None))
                calls.append((f"{path.name}:{node.lineno}", ok))
    assert len(calls) >= 2  # synapse_pt/common/progress.py (the package's bars) and the download
    assert [c for c, ok in calls if not ok] == []
