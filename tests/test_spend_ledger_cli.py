"""One spend ledger per command (issue 58) through the commands a user types, against a loopback
server that bills: a study's variants and a multirun's jobs share one cap, a run stopped at its
cap in a stamped folder keeps the folder and resumes there with what it spent counted, and money
that is not a finite number >= 0 is refused in one line."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from loopback import completion_body, serve
from scripts_loader import load_script  # tests/ is on sys.path (rootdir conftest)
from test_configs import make_cfg

from synapse_pt.common.errors import ConfigError
from synapse_pt.models.llm.accounting import ModelPrice
from synapse_pt.models.llm.ledger import LEDGER_FILE, SpendLedger

REPO_ROOT = Path(__file__).resolve().parents[1]
MINI = ModelPrice(0.15, 0.60)
#: each answer's bill: 100 prompt + 10 completion tokens (USD 0.000021), less than any answer
#: request of the sample can cost (an honest bill: the cap is never passed)
USAGE = {"prompt_tokens": 100, "completion_tokens": 10}
PER_ANSWER = MINI.cost(100, 10)
QA = ("eval=qa", "dataset=sample", "embedder=hashing", "device=cpu", "logger=none", "llm=openai",
      "llm.backend.max_retries=0")


def answer(body: dict[str, Any], n: int) -> tuple[int, str, float]:
    return 200, completion_body("a pottery class", USAGE), 0.0


def bodies_key(body: dict[str, Any]) -> str:
    return json.dumps(body["messages"], sort_keys=True)


def test_a_study_shares_one_cap_and_stops_with_exit_3(tmp_path: Path, monkeypatch, capsys
                                                      ) -> None:
    """The issue's probe: a three-variant QA study with llm.max_cost_usd=0.5 spent $0.93 and
    exited 0 (the cap was per run). Here its variants share the ledger in --out: the study stops
    at the cap with exit status 3 and one line, having spent no more than the cap; the same
    command with a higher cap finishes, asking nothing twice."""
    study = tmp_path / "three.yaml"
    study.write_text("base: [memory=bm25]\nvariants:\n  k3: [memory.k=3]\n  k5: [memory.k=5]\n"
                     "  k7: [memory.k=7]\n")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("TQDM_DISABLE", "1")
    out, cap = tmp_path / "out", 20 * PER_ANSWER  # the study asks 42 answers (14 a variant)
    main = load_script("run_study").main
    with serve(answer) as server:
        args = [str(study), "--out", str(out), *QA, f"llm.backend.base_url={server.url}",
                f"paths.cache_dir={tmp_path / 'cache'}"]
        assert main([*args, "--max-cost-usd", str(cap)]) == 3
        err = capsys.readouterr()
        sent = len(server.bodies)
        assert main([*args, "--max-cost-usd", "1"]) == 0
        keys = [bodies_key(b) for b in server.bodies]
    assert "[study] --max-cost-usd" in err.out and "the study's estimate: at most $" in err.out
    stopped = [line for line in err.err.splitlines() if line.startswith("[study] stopped")]
    assert len(stopped) == 1 and "Traceback" not in err.err
    assert "to go on, the same command with --max-cost-usd above" in stopped[0]
    spent = float(re.search(r"reached: \$([0-9.]+) spent by this command", stopped[0]).group(1))
    assert spent == pytest.approx(sent * PER_ANSWER, abs=1e-6) and spent <= cap
    assert 14 < sent < 42  # the cap stopped the study in its second variant
    assert len(keys) == len(set(keys)) == 42  # nothing asked twice
    ledger = SpendLedger(out / LEDGER_FILE)
    assert ledger.totals()["billed"] == 42 and ledger.spent() == pytest.approx(42 * PER_ANSWER)


@pytest.mark.slow
def test_a_multirun_shares_one_cap(tmp_path: Path) -> None:
    """`-m memory.k=3,5,7`: the jobs share the ledger in the sweep folder; the multirun stops
    at the cap with exit status 3 and one line naming the sweep folder to resume in."""
    cap = 20 * PER_ANSWER
    env = {**os.environ, "OPENAI_API_KEY": "sk-test", "TQDM_DISABLE": "1"}
    sweep = tmp_path / "sweep"
    with serve(answer) as server:
        proc = subprocess.run(
            [sys.executable, "-m", "synapse_pt.run", "-m", *QA, "memory=bm25", "memory.k=3,5,7",
             f"llm.max_cost_usd={cap}", f"llm.backend.base_url={server.url}",
             f"paths.cache_dir={tmp_path / 'cache'}", f"hydra.sweep.dir={sweep}"],
            cwd=REPO_ROOT, capture_output=True, text=True, timeout=600, env=env)
        sent = len(server.bodies)
    assert proc.returncode == 3, proc.stderr[-3000:]
    stopped = [line for line in proc.stderr.splitlines() if "[synapse_pt] stopped" in line]
    assert len(stopped) == 1 and "Traceback" not in proc.stderr
    assert f"hydra.sweep.dir={sweep.resolve()}" in stopped[0]
    assert 14 < sent < 42
    spent = SpendLedger(sweep / LEDGER_FILE).spent()
    assert spent == pytest.approx(sent * PER_ANSWER) and spent <= cap


@pytest.mark.slow
def test_a_stamped_run_stopped_at_its_cap_is_kept_and_resumes_with_its_spending(tmp_path: Path
                                                                                ) -> None:
    """A run in a stamped folder that hits its cap keeps the folder (its ledger), names it in
    its one line; the same command there counts what was spent (the same cap sends nothing
    more) and, with a higher cap, finishes, asking nothing twice."""
    usage = {"prompt_tokens": 800, "completion_tokens": 10}
    per, cap = MINI.cost(800, 10), 0.001

    def bills(body: dict[str, Any], n: int) -> tuple[int, str, float]:
        return 200, completion_body("a pottery class", usage), 0.0

    env = {**os.environ, "OPENAI_API_KEY": "sk-test", "TQDM_DISABLE": "1"}
    base = [sys.executable, "-m", "synapse_pt.run", *QA, "memory=bm25",
            f"paths.cache_dir={tmp_path / 'cache'}"]
    with serve(bills) as server:
        url = f"llm.backend.base_url={server.url}"
        first = subprocess.run(
            [*base, url, f"llm.max_cost_usd={cap}",
             f"hydra.run.dir={tmp_path}/outputs/${{now:%H-%M-%S_%f}}"],
            cwd=REPO_ROOT, capture_output=True, text=True, timeout=600, env=env)
        assert first.returncode == 3, first.stderr[-3000:]
        folder = Path(re.search(r"hydra\.run\.dir=(\S+)", first.stderr).group(1))
        sent = len(server.bodies)
        spent = SpendLedger(folder / LEDGER_FILE).spent()
        assert 0 < sent < 14 and spent == pytest.approx(sent * per) and spent <= cap
        again = subprocess.run([*base, url, f"llm.max_cost_usd={cap}", f"hydra.run.dir={folder}"],
                               cwd=REPO_ROOT, capture_output=True, text=True, timeout=600,
                               env=env)
        assert again.returncode == 3 and SpendLedger(folder / LEDGER_FILE).spent() <= cap
        done = subprocess.run([*base, url, "llm.max_cost_usd=1", f"hydra.run.dir={folder}"],
                              cwd=REPO_ROOT, capture_output=True, text=True, timeout=600, env=env)
        assert done.returncode == 0, done.stderr[-3000:]
        keys = [bodies_key(b) for b in server.bodies]
    assert len(keys) == len(set(keys)) == 14
    spend = json.loads((folder / "spend.json").read_text())
    assert spend["ledger"]["command_usd_spent"] == pytest.approx(14 * per)


@pytest.mark.parametrize(("override", "key"), [
    ("llm.max_cost_usd=nan", "llm.max_cost_usd"),
    ("llm.max_cost_usd=-1", "llm.max_cost_usd"),
    ("llm.max_cost_usd='$1'", "llm.max_cost_usd"),
    ("llm.prices.gpt-4o-mini.prompt=-5", "llm.prices.gpt-4o-mini.prompt"),
    ("llm.prices.gpt-4o-mini.completion=nan", "llm.prices.gpt-4o-mini.completion"),
], ids=["cap-nan", "cap-negative", "cap-dollar-sign", "price-negative", "price-nan"])
def test_money_settings_are_refused_in_one_line(override: str, key: str) -> None:
    """The issue's probes: ``llm.max_cost_usd=nan`` removed the cap, a negative price gave
    ``cost_usd_spent: -52.41`` and "at most $-0.0613", ``'$1'`` was a traceback."""
    from synapse_pt.commands.build import build_llm
    from synapse_pt.commands.estimate import estimate

    cfg = make_cfg(*QA, "memory=bm25", override)
    with pytest.raises(ConfigError, match=rf"^{re.escape(key)}=") as err:
        build_llm(cfg.llm)
    assert "\n" not in str(err.value)
    if "prices" in override:
        with pytest.raises(ConfigError, match=rf"^{re.escape(key)}="):
            estimate(cfg)
