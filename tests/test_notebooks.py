"""Every notebook runs top to bottom with ``jupyter nbconvert --execute``, as a newcomer on a fresh
clone would run it: no run folders given, so each makes the small runs it needs on the shipped
sample (or reads what the repository ships) and says which."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((REPO_ROOT / "notebooks").glob("*.ipynb"))
# what each notebook must print: the source it read, and a result of its own
EXPECT = {
    "results": ["no runs in this checkout: made two runs on the shipped sample",
                "2 runs: paper_main, no_fan", "false_rejection_rate"],
    "activation": ["no run given: made a paper_main run on the shipped sample",
                   "SYNAPSE rank", "nodes drawn"],
    "scaling": ["(the recorded benchmark)", "s_per_1000_turns", "fitted exponent"],
    "gate": ["no run given: made a paper_main run on the shipped sample",
             "this run's gate: false rejection", "C_ret < 0.12 (paper)"],
    "sweeps": ["(the recorded LoCoMo-10 sweep)", "explained by each hyperparameter alone"],
}


def _outputs(notebook: dict) -> str:
    text = []
    for cell in notebook["cells"]:
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                text.append("".join(out["text"]))
            elif "data" in out and "text/plain" in out["data"]:
                text.append("".join(out["data"]["text/plain"]))
    return "\n".join(text)


def test_every_notebook_is_tested():
    assert {p.stem for p in NOTEBOOKS} == set(EXPECT)


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_executes(path, tmp_path):
    env = {k: v for k, v in os.environ.items()
           if k not in ("SYNAPSE_RUNS", "SYNAPSE_RUN", "SYNAPSE_BENCH_JSON",
                        "SYNAPSE_SWEEP_TABLE")}
    env["SYNAPSE_CACHE"] = str(tmp_path / "cache")  # a fresh clone's empty cache
    jupyter = Path(sys.executable).with_name("jupyter")
    out = subprocess.run(
        [str(jupyter), "nbconvert", "--to", "notebook", "--execute", str(path),
         "--output-dir", str(tmp_path), "--ExecutePreprocessor.timeout=600"],
        cwd=path.parent, env=env, capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr[-4000:]
    executed = json.loads((tmp_path / path.name).read_text())
    text = _outputs(executed)
    for expected in EXPECT[path.stem]:
        assert expected in text, f"{path.name}: {expected!r} not in its outputs:\n{text[-3000:]}"
    images = [o for c in executed["cells"] for o in c.get("outputs", [])
              if "image/png" in o.get("data", {})]
    assert images, f"{path.name} displays no figure"
