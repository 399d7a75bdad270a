"""Studies: named variants of one run configuration, run in one process, tabulated together.

A study file (``studies/<name>.yaml``) holds ``base`` (Hydra overrides every variant shares)
and ``variants`` (``{label: [overrides]}``). :func:`run_study` composes each variant's config from
the real ``configs/``, runs it through :func:`synapse_pt.run.run` into its own folder (labelled by
``experiment_name=<label>``, so the usual tables name the rows), and variants that change only
retrieval settings reuse the memory the previous variant ingested. :func:`study_table` gives one
row per variant: evidence recall@5/10/30 per category and over the questions of categories 1-4,
context tokens, and the gate figures.

    python scripts/run_study.py readings --out multirun/readings
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs"
STUDY_DIR = CONFIG_DIR.parent / "studies"
_LABEL = re.compile(r"[A-Za-z0-9_.+-]+")


def load_study(name_or_path: str | Path) -> dict[str, Any]:
    """``{"base", "variants": {label: [overrides]}}`` of ``studies/<name>.yaml`` or a path."""
    path = Path(name_or_path)
    if not path.suffix:
        path = STUDY_DIR / f"{name_or_path}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in STUDY_DIR.glob("*.yaml"))
        raise FileNotFoundError(f"study {name_or_path!r}: no file {path} (studies: {known})")
    study = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    if not isinstance(study, dict) or not isinstance(study.get("variants"), dict):
        raise ValueError(f"{path}: a study needs a 'variants' mapping {{label: [overrides]}}")
    base = study.get("base") or []
    if not isinstance(base, list) or not all(isinstance(o, str) for o in base):
        raise ValueError(f"{path}: 'base' must be a list of override strings")
    for label, overrides in study["variants"].items():
        if not _LABEL.fullmatch(str(label)):
            raise ValueError(f"{path}: variant label {label!r} may hold only letters, digits and "
                             "_ . + -")
        if not isinstance(overrides, list) or not all(isinstance(o, str) for o in overrides):
            raise ValueError(f"{path}: variant {label!r} must be a list of override strings")
    return {"base": base, "variants": study["variants"], "path": str(path)}


def compose_variant(overrides: Sequence[str]):
    """The run config of ``configs/run.yaml`` with ``overrides`` (as the CLI composes it)."""
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose(config_name="run", overrides=list(overrides))


def run_study(study: Mapping[str, Any], out_dir: Path, extra: Sequence[str] = ()
              ) -> dict[str, dict[str, Any]]:
    """Run every variant into ``out_dir/<i>_<label>``; returns ``{label: metrics}``."""
    from synapse_pt.run import run

    results: dict[str, dict[str, Any]] = {}
    for i, (label, overrides) in enumerate(study["variants"].items()):
        folder = out_dir / f"{i}_{label}"
        cfg = compose_variant([*study["base"], *overrides, *extra, f"experiment_name={label}",
                               f"task_name={label}", f"paths.output_dir={folder}"])
        print(f"[study] {i + 1}/{len(study['variants'])} {label}: "
              f"{' '.join([*study['base'], *overrides, *extra]) or '(base config)'}")
        results[label] = run(cfg, refuse_fallback="a study")
        timing = folder / "timing.json"
        if timing.is_file():
            results[label] = {**results[label], "timing": json.loads(timing.read_text())}
    return results


def study_table(runs: Mapping[str, Mapping[str, Any]], ks: Sequence[int] = (5, 10, 30),
                categories: Sequence[int] = (1, 2, 3, 4)) -> pd.DataFrame:
    """One row per run: recall@k per category and ``mean_q_1_4``, recall within each context-token
    budget (``recall@<T>tok``, per category and ``mean_q_1_4``), context tokens, gate figures and
    the build (ingest) seconds where the run built its memory (NaN where it reused one)."""
    rows = {}
    for label, m in runs.items():
        names = {int(k): v for k, v in m["identity"]["category_names"].items()}
        row: dict[str, float | None] = {}
        for k in ks:
            rec = m["metrics"].get(f"recall@{k}", {})
            for c in categories:
                row[f"R@{k} {names[c]}"] = rec.get(names[c])
            row[f"R@{k} (1-4)"] = rec.get("mean_q_1_4")
        budgets = sorted((int(key[7:-3]), key) for key in m["metrics"]
                         if key.startswith("recall@") and key.endswith("tok"))
        for t, key in budgets:
            rec = m["metrics"][key]
            for c in categories:
                row[f"R@{t}tok {names[c]}"] = rec.get(names[c])
            row[f"R@{t}tok (1-4)"] = rec.get("mean_q_1_4")
        ret = m.get("retrieval", {})
        row["context tokens"] = ret.get("context_tokens_mean")
        row["FR (1-4)"] = ret.get("false_rejection_rate")
        row["TR (5)"] = ret.get("true_rejection_rate")
        row["AUC C_ret"] = ret.get("c_ret_auc_adversarial")
        row["AUC gate"] = ret.get("gate_score_auc_adversarial")
        timing = m.get("timing", {})
        built = timing.get("ingest_seconds") if not timing.get("ingest_reused") else None
        row["build s"] = built
        rows[label] = row
    df = pd.DataFrame.from_dict(rows, orient="index").astype("float64")
    df.index.name = "variant"
    return df
