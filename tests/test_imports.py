"""Starting a run does not import what only some runs use (the warm-run budget of issue 16):
PyTorch Geometric (SYNAPSE's graph), nltk and scikit-learn (analysers and scorers, loaded on first
use or served by the text cache) and transformers (the embedder's model, needed only on a cache
miss)."""

from __future__ import annotations

import subprocess
import sys

LAZY = ("torch_geometric", "nltk", "sklearn", "transformers")


def test_importing_the_run_entry_point_loads_none_of_the_lazy_libraries() -> None:
    code = ("import sys, synapse_pt.commands.run, synapse_pt.memory, synapse_pt.retrieval, "
            "synapse_pt.graph, synapse_pt.models.llm; "
            f"print(sorted(m for m in {LAZY!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout

