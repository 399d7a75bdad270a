"""Run a study: the same command as ``python -m synapse_pt.study``
(:mod:`synapse_pt.commands.study` says what it does and writes).

    python scripts/run_study.py readings --out multirun/study_readings [overrides...]
    python scripts/run_study.py paper_table --estimate llm=openai
"""

from __future__ import annotations

import sys

from synapse_pt.commands.study import cli, main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(cli())
