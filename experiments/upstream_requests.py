"""Hash every request a run on the shipped sample sends, and its predictions (issue 57).

    python experiments/upstream_requests.py            # the checkout this file is run against

Runs ``memory=gaama eval=qa`` and ``memory=membox eval=qa`` with their LLM builds
(``extractor=llm``, the hashing embedder) and GAAMA's and Membox's answer steps and judges,
against the loopback server of the suite scripted with the suite's replies
(``tests/test_related_llm_loopback.py``), and prints per run the number of requests, the sha256 of
the request bodies (each as canonical JSON, sorted: answers and judges are sent concurrently, so
their order of arrival varies) and of ``predictions.parquet``'s columns (values as strings; the
``latency_s`` timing column left out). Run it against two checkouts (``PYTHONPATH=<checkout>``),
each with the upstream prompts it reads (``SYNAPSE_UPSTREAM``): equal hashes mean the same
requests and predictions. The last line is ``runs_hashed: <n>``.
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path

import pytest

import synapse_pt

TESTS = Path(synapse_pt.__file__).resolve().parents[1] / "tests"
sys.path.insert(0, str(TESTS))

import test_related_llm_loopback as suite  # noqa: E402
from gaama_replies import gaama_upstream_reply  # noqa: E402


def judged(reply):
    """``reply``, and a judge's reply (a reward, read by GAAMA's judge) to what it does not
    script."""
    def answer(prompt: str) -> str:
        try:
            return reply(prompt)
        except AssertionError:
            return '{"reward": 0.5, "justification": "half of the facts"}'
    return answer


RUNS = {
    "gaama_qa_llm_build": (gaama_upstream_reply, ("memory=gaama",)),
    "membox_qa_llm_build": (lambda p: suite.membox_reply(p, garble_chains=False),
                            ("memory=membox",)),
    "membox_qa_garbled_chains": (lambda p: suite.membox_reply(p, garble_chains=True),
                                 ("memory=membox",)),
    "gaama_qa_gaama_judge": (judged(gaama_upstream_reply), ("memory=gaama", "eval.judge_runs=1")),
}


def digest(obj: object) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()


def main() -> int:
    print(f"synapse_pt from {Path(synapse_pt.__file__).parent}")
    for name, (reply, overrides) in RUNS.items():
        with tempfile.TemporaryDirectory() as tmp:
            mp = pytest.MonkeyPatch()
            try:
                _, bodies, preds = suite.run_against(Path(tmp), mp, reply, *overrides)
            finally:
                mp.undo()
        columns = {c: preds[c].astype(str).tolist() for c in sorted(preds.columns)
                   if c != "latency_s"}
        requests = sorted(json.dumps(b, sort_keys=True) for b in bodies)
        print(f"{name}: requests {len(bodies)} sha256 {digest(requests)[:16]}; predictions "
              f"{len(preds)} rows sha256 {digest(columns)[:16]}")
    print(f"runs_hashed: {len(RUNS)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
