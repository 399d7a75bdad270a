"""Studies: named variants of one run configuration, run in one process, tabulated together.

A study file (``studies/<name>.yaml``) holds ``base`` (Hydra overrides every variant shares),
``variants`` (``{label: [overrides]}``) and optionally ``published`` (``{label: published row}``,
the number each variant sits beside: :mod:`synapse_pt.eval.reports.paper_table`); :func:`load_study`
reads and checks it, and
:func:`synapse_pt.commands.study.run_study` runs its variants. :func:`study_table` gives one row per
variant: context tokens a question, evidence recall@5/10/30 and within each context budget per
category and over the questions of the answerable categories, and the gate figures;
:func:`best_lines` names the best variant at an equal context budget.

    python scripts/run_study.py readings --out multirun/readings
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from omegaconf import OmegaConf

from synapse_pt.common.resources import study_dir
from synapse_pt.eval.qa.aggregate import answerable_span, run_summary_names
from synapse_pt.eval.reports.paper_numbers import PUBLISHED_ROWS

_LABEL = re.compile(r"[A-Za-z0-9_.+-]+")


def load_study(name_or_path: str | Path) -> dict[str, Any]:
    """``{"base", "variants": {label: [overrides]}}`` of ``studies/<name>.yaml`` or a path."""
    path = Path(name_or_path)
    if not path.suffix:
        path = study_dir() / f"{name_or_path}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in study_dir().glob("*.yaml"))
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
    published = study.get("published") or {}
    if not isinstance(published, dict):
        raise ValueError(f"{path}: 'published' must map variant labels to published rows")
    for label, system in published.items():
        if label not in study["variants"]:
            raise ValueError(f"{path}: published.{label}: no such variant")
        if system not in PUBLISHED_ROWS:
            raise ValueError(f"{path}: published.{label}: {system!r} is no published row of "
                             f"paper_numbers.PUBLISHED_ROWS (known: {sorted(PUBLISHED_ROWS)})")
    return {"base": base, "variants": study["variants"], "published": published,
            "path": str(path)}


#: the context budget (tokens a question) at which a study names its best system: recall within
#: the first 1,000 context tokens (``recall@1000tok``), so a system showing more text is not
#: named best for it
EQUAL_BUDGET = 1000
CONTEXT = "context tokens"


def study_table(runs: Mapping[str, Mapping[str, Any]], ks: Sequence[int] = (5, 10, 30),
                categories: Sequence[int] | None = None) -> pd.DataFrame:
    """One row per run: the mean context tokens a question first (what every recall beside it
    was measured at), recall@k per category and over the questions of the answerable categories
    (``R@10 (1-4)`` on LoCoMo, ``R@10 (2-10)`` on BEAM), recall within each context-token budget
    (``recall@<T>tok``, per category and over those questions), gate figures and the build
    (ingest) seconds where the run built its memory (NaN where it reused one)."""
    rows = {}
    for label, m in runs.items():
        identity = m["identity"]
        names = {int(k): v for k, v in identity["category_names"].items()}
        answerable = identity.get("answerable_categories") or (1, 2, 3, 4)
        cats = categories or answerable
        span, micro = answerable_span(answerable), run_summary_names(identity)[1]
        ret = m.get("retrieval", {})
        row: dict[str, float | None] = {CONTEXT: ret.get("context_tokens_mean")}
        for k in ks:
            rec = m["metrics"].get(f"recall@{k}", {})
            for c in cats:
                row[f"R@{k} {names[c]}"] = rec.get(names[c])
            row[f"R@{k} ({span})"] = rec.get(micro)
        budgets = sorted((int(key[7:-3]), key) for key in m["metrics"]
                         if key.startswith("recall@") and key.endswith("tok"))
        for t, key in budgets:
            rec = m["metrics"][key]
            for c in cats:
                row[f"R@{t}tok {names[c]}"] = rec.get(names[c])
            row[f"R@{t}tok ({span})"] = rec.get(micro)
        row[f"FR ({span})"] = ret.get("false_rejection_rate")
        row[f"TR ({identity.get('unanswerable_category', 5)})"] = ret.get("true_rejection_rate")
        row["AUC C_ret"] = ret.get("c_ret_auc_adversarial")
        row["AUC gate"] = ret.get("gate_score_auc_adversarial")
        timing = m.get("timing", {})
        built = timing.get("ingest_seconds") if not timing.get("ingest_reused") else None
        row["build s"] = built
        rows[label] = row
    df = pd.DataFrame.from_dict(rows, orient="index").astype("float64")
    df.index.name = "variant"
    return df


def best_lines(table: pd.DataFrame, budget: int = EQUAL_BUDGET) -> list[str]:
    """What a study's summary says of its best system (of :func:`study_table`): the best at an
    equal context budget, by recall over the answerable questions within the first ``budget``
    context tokens, then the highest recall@10 with the context each system needed for it
    (recall@10 alone favours a system that shows more text: it is never called best)."""
    def tokens(label: str) -> str:
        value = table.loc[label, CONTEXT]
        return "?" if pd.isna(value) else f"{value:,.0f}"

    lines = []
    at_budget = [c for c in table.columns if c.startswith(f"R@{budget}tok (")]
    if at_budget and table[at_budget[0]].notna().any():
        column = at_budget[0]
        best = table[column].idxmax()
        lines.append(f"study_best_at_{budget}_tokens: {table.loc[best, column]:.4f} ({best}; "
                     f"recall within the first {budget:,} context tokens, {column}; it shows "
                     f"{tokens(best)} context tokens a question in all)")
    else:
        lines.append(f"study_best_at_{budget}_tokens: none named (the runs record no "
                     f"recall@{budget}tok: set eval.recall_budgets to include {budget})")
    at_10 = [c for c in table.columns if c.startswith("R@10 (")]
    if at_10 and table[at_10[0]].notna().any():
        column = at_10[0]
        top = table[column].idxmax()
        lines.append(f"highest {column}, at any context size: {table.loc[top, column]:.4f} "
                     f"({top}, {tokens(top)} context tokens a question)")
    return lines
