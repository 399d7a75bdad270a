"""The notebooks run: their code cells are executed (no kernel needed) on two tiny runs."""

from __future__ import annotations

import json
from pathlib import Path

from test_configs import make_cfg  # tests/ is on sys.path (rootdir conftest)

from synapse_pt.run import run

REPO_ROOT = Path(__file__).resolve().parents[1]
FAST = ("dataset=sample", "embedder=hashing", "smoke=true", "logger=none", "device=cpu")


def test_results_notebook_on_two_runs(tmp_path, monkeypatch, capsys):
    for i, experiment in enumerate(["paper_main", "no_fan"]):
        run(make_cfg(*FAST, f"experiment={experiment}", f"paths.cache_dir={tmp_path / 'c'}",
                     output_dir=str(tmp_path / "sweep" / f"{i}_{experiment}")))
    monkeypatch.setenv("SYNAPSE_RUNS", str(tmp_path / "sweep"))
    notebook = json.loads((REPO_ROOT / "notebooks" / "results.ipynb").read_text())
    namespace: dict = {}
    for cell in notebook["cells"]:
        if cell["cell_type"] == "code":
            source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
            exec(compile(source, "results.ipynb", "exec"), namespace)  # noqa: S102
    out = capsys.readouterr().out
    assert "2 runs: paper_main, no_fan" in out
    assert "ablation_recall@10" in out and "false_rejection_rate" in out
    for k in (5, 10, 30):
        png = tmp_path / "sweep" / f"recall_at_{k}.png"
        assert png.is_file() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
