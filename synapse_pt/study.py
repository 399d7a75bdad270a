"""Studies as an entry point: every variant of a study file run through :func:`synapse_pt.run.run`.

A study (``studies/<name>.yaml``, read by :func:`synapse_pt.eval.tuning.study.load_study`) is one
run
configuration's named variants. :func:`run_study` composes each variant's config
(:func:`synapse_pt.build.composed_config`), runs it into its own folder (labelled by
``experiment_name=<label>``, so the usual tables name the rows), and variants that change only
retrieval settings reuse the memory the previous variant ingested. :func:`estimate_study` sums
each variant's :func:`synapse_pt.estimate.estimate` before anything runs.

    python scripts/run_study.py readings --out multirun/readings
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from omegaconf import DictConfig

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


def variant_config(study: Mapping[str, Any], label: str, folder: Path,
                   extra: Sequence[str] = ()) -> DictConfig:
    """The composed config of one variant: the study's base, the variant's overrides, then
    ``extra`` (the command line's), labelled ``label`` and writing into ``folder``."""
    return composed_config([*study["base"], *study["variants"][label], *extra,
                            f"experiment_name={label}", f"task_name={label}",
                            f"paths.output_dir={folder}"])


def estimate_study(study: Mapping[str, Any], extra: Sequence[str] = ()
                   ) -> tuple[pd.DataFrame, dict[str, Any]]:
    """What the whole study will cost, before it runs: each variant's
    :func:`synapse_pt.estimate.estimate` (calls, prompt tokens, completion tokens at their
    ``max_tokens``, USD), one row per variant, and their sum in a ``total`` row; ``not
    estimated`` names the stages a variant's estimate leaves out (the GAAMA and Membox LLM
    builds, whose calls depend on the model's replies). The facts: the dataset, questions and
    model of the first variant, what the total is (``bound``, ``not_bounded``: the stages of
    each variant that are not bounded) and each variant's own facts under ``variants``."""
    from synapse_pt.estimate import BOUND, ESTIMATE, UNBOUNDED, estimate

    rows, facts = {}, {}
    for label in study["variants"]:
        frame, fact = estimate(variant_config(study, label, Path("outputs/estimate"), extra))
        stages = frame.drop(index="total")
        left = [f"{stage} ({basis})" for stage, basis, kind in
                zip(stages.index, stages["basis"], stages["bound"], strict=True) if kind != BOUND]
        total = frame.loc["total"]
        rows[label] = {"calls": int(total["calls"]), "prompt_tokens": int(total["prompt_tokens"]),
                       "completion_tokens_max": int(total["completion_tokens_max"]),
                       "usd_max": float(total["usd_max"]), "not bounded": "; ".join(left)}
        facts[label] = fact
    out = pd.DataFrame.from_dict(rows, orient="index")
    cols = ["calls", "prompt_tokens", "completion_tokens_max", "usd_max"]
    out.loc["total"] = {**out[cols].sum(min_count=1).to_dict(), "not bounded": ""}
    out.index.name = "variant"
    first = next(iter(facts.values()))
    kinds = {fact["bound"] for fact in facts.values()}
    return out, {"dataset": first["dataset"], "questions": first["questions"],
                 "model": first["model"], "usd_max": float(out.loc["total", "usd_max"]),
                 "bound": (UNBOUNDED if UNBOUNDED in kinds else ESTIMATE if ESTIMATE in kinds
                           else BOUND),
                 "not_bounded": [f"{label}: {part}" for label, fact in facts.items()
                                 for part in fact["not_bounded"]],
                 "max_retries": first["max_retries"], "variants": facts}


def format_study_estimate(frame: pd.DataFrame, facts: Mapping[str, Any]) -> str:
    """The study estimate as console text: one row per variant and the total, then the total's
    dollars and what the figures rest on."""
    from synapse_pt.estimate import TOKENIZER_NOTE, retries_line, usd_line

    shown = frame.copy()
    for col in ("calls", "prompt_tokens", "completion_tokens_max"):
        shown[col] = shown[col].map(lambda v: f"{int(v):,}")
    shown["usd_max"] = shown["usd_max"].map(lambda v: "n/a" if pd.isna(v) else f"{v:,.4f}")
    usd = facts["usd_max"]
    lines = [f"# Study estimate: {facts['dataset']} ({facts['questions']:,} questions a "
             f"variant), model {facts['model']}", "", shown.to_markdown(), "",
             (f"no price for {facts['model']!r} in llm.prices: tokens only" if pd.isna(usd)
              else usd_line(usd, facts, "for the whole study") + " (completions at their "
              "max_tokens)"),
             *([retries_line(usd, facts["max_retries"])]
               if facts["max_retries"] and not pd.isna(usd) else []),
             "no model was called; each variant's stages: python -m synapse_pt.estimate "
             "<its overrides>",
             "a sum of per-variant bounds: a request two variants both send (the same "
             "extraction) is paid once, the response cache answers the repeat", TOKENIZER_NOTE,
             f"study_estimate_usd_max: {'n/a' if pd.isna(usd) else usd} USD"]
    return "\n".join(lines) + "\n"


def run_study(study: Mapping[str, Any], out_dir: Path, extra: Sequence[str] = ()
              ) -> dict[str, dict[str, Any]]:
    """Run every variant into ``out_dir/<i>_<label>``; returns ``{label: metrics}`` (each with
    the run's ``timing``). The variants share one spend ledger, ``out_dir``'s
    (:data:`~synapse_pt.models.llm.ledger.LEDGER_FILE`): ``llm.max_cost_usd`` caps the whole
    study, and a study run again into ``out_dir`` counts what it spent before."""
    from synapse_pt.models.llm.ledger import LEDGER_FILE

    results: dict[str, dict[str, Any]] = {}
    folders = variant_folders(study, out_dir)
    for i, (label, overrides) in enumerate(study["variants"].items()):
        folder = folders[label]
        cfg = variant_config(study, label, folder, extra)
        print(f"[study] {i + 1}/{len(study['variants'])} {label}: "
              f"{' '.join([*study['base'], *overrides, *extra]) or '(base config)'}")
        results[label] = run(cfg, refuse_fallback="a study", ledger=out_dir / LEDGER_FILE)
        timing = folder / "timing.json"
        if timing.is_file():
            results[label] = {**results[label], "timing": json.loads(timing.read_text())}
    return results
