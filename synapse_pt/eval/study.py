"""Studies: named variants of one run configuration, run in one process, tabulated together.

A study file (``studies/<name>.yaml``) holds ``base`` (Hydra overrides every variant shares)
and ``variants`` (``{label: [overrides]}``); :func:`load_study` reads and checks it, and
:func:`synapse_pt.study.run_study` runs its variants. :func:`study_table` gives one row per
variant: evidence recall@5/10/30 per category and over the questions of categories 1-4, context
tokens, and the gate figures.

    python scripts/run_study.py readings --out multirun/readings
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
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


def study_table(runs: Mapping[str, Mapping[str, Any]], ks: Sequence[int] = (5, 10, 30),
                categories: Sequence[int] | None = None) -> pd.DataFrame:
    """One row per run: recall@k per category and ``mean_q_1_4``, recall within each context-token
    budget (``recall@<T>tok``, per category and ``mean_q_1_4``), context tokens, gate figures and
    the build (ingest) seconds where the run built its memory (NaN where it reused one)."""
    rows = {}
    for label, m in runs.items():
        names = {int(k): v for k, v in m["identity"]["category_names"].items()}
        cats = categories or m["identity"].get("answerable_categories", (1, 2, 3, 4))
        row: dict[str, float | None] = {}
        for k in ks:
            rec = m["metrics"].get(f"recall@{k}", {})
            for c in cats:
                row[f"R@{k} {names[c]}"] = rec.get(names[c])
            row[f"R@{k} (1-4)"] = rec.get("mean_q_1_4")
        budgets = sorted((int(key[7:-3]), key) for key in m["metrics"]
                         if key.startswith("recall@") and key.endswith("tok"))
        for t, key in budgets:
            rec = m["metrics"][key]
            for c in cats:
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
