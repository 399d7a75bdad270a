"""Studies as an entry point: every variant of a study file run through :func:`synapse_pt.run.run`.

A study (``studies/<name>.yaml``, read by :func:`synapse_pt.eval.study.load_study`) is one run
configuration's named variants. :func:`run_study` composes each variant's config
(:func:`synapse_pt.build.composed_config`), runs it into its own folder (labelled by
``experiment_name=<label>``, so the usual tables name the rows), and variants that change only
retrieval settings reuse the memory the previous variant ingested.

    python scripts/run_study.py readings --out multirun/readings
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from synapse_pt.build import composed_config
from synapse_pt.run import run


def variant_folders(study: Mapping[str, Any], out_dir: Path) -> dict[str, Path]:
    """``{label: out_dir/<i>_<label>}``: where each variant of ``study`` runs."""
    return {label: out_dir / f"{i}_{label}" for i, label in enumerate(study["variants"])}


def stale_run_folders(study: Mapping[str, Any], out_dir: Path) -> list[Path]:
    """Run folders (holding ``metrics.json``) directly in ``out_dir`` that are no variant of
    ``study``: left by an earlier study run into the same folder."""
    own = {folder.resolve() for folder in variant_folders(study, out_dir).values()}
    return sorted(p.parent for p in out_dir.glob("*/metrics.json") if p.parent.resolve() not in own)


def run_study(study: Mapping[str, Any], out_dir: Path, extra: Sequence[str] = ()
              ) -> dict[str, dict[str, Any]]:
    """Run every variant into ``out_dir/<i>_<label>``; returns ``{label: metrics}`` (each with
    the run's ``timing``)."""
    results: dict[str, dict[str, Any]] = {}
    folders = variant_folders(study, out_dir)
    for i, (label, overrides) in enumerate(study["variants"].items()):
        folder = folders[label]
        cfg = composed_config([*study["base"], *overrides, *extra, f"experiment_name={label}",
                               f"task_name={label}", f"paths.output_dir={folder}"])
        print(f"[study] {i + 1}/{len(study['variants'])} {label}: "
              f"{' '.join([*study['base'], *overrides, *extra]) or '(base config)'}")
        results[label] = run(cfg, refuse_fallback="a study")
        timing = folder / "timing.json"
        if timing.is_file():
            results[label] = {**results[label], "timing": json.loads(timing.read_text())}
    return results
