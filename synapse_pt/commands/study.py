"""Studies as an entry point: every variant of a study file run through
:func:`synapse_pt.commands.run.run`.

A study (``studies/<name>.yaml``, read by :func:`synapse_pt.eval.tuning.variants.load_study`) is one
run configuration's named variants. :func:`run_study` composes each variant's config
(:func:`synapse_pt.commands.build.composed_config`), runs it into its own folder (labelled by
``experiment_name=<label>``, so the usual tables name the rows), and variants that change only
retrieval settings reuse the memory the previous variant ingested. :func:`estimate_study` sums
each variant's :func:`synapse_pt.commands.estimate.estimate` before anything runs.

As a command (``scripts/run_study.py`` is the same command), every variant in one process, then
the study's tables:

    python -m synapse_pt.study readings --out multirun/study_readings [overrides...]

Each variant's run folder (resolved config, predictions, metrics) lands in ``OUT/<i>_<label>``;
``OUT/tables/`` gets the usual tables (``scripts/make_tables.py``) and ``OUT/study.md`` the study
table (one row per variant: context tokens a question, recall@5/10/30 and within each context budget
per category and over the answerable categories, false/true rejection, AUC of C_ret). Only this
study's variants are tabulated: run folders an earlier study left in ``OUT`` are left out of
``tables/`` and ``study.md`` (and named). ``OUT`` is locked while the study runs (a second study
into it is refused); its tables, ``study.md`` and ``judges.md`` are committed together at the end
(``synapse_pt.eval.records.commit``): the files an earlier study wrote there (its manifest) that
this one does not are removed, a user's files are never touched. Extra arguments are Hydra overrides
added to every variant. The last lines name the study's best variant at an equal context budget
(recall within the first 1,000 context tokens) and its highest recall@10 with the context each
needed (never called best: more text buys recall@10). A study whose runs were judged
(``eval=judge``, several judges with ``eval.judges=[mem0,gaama]``) also gets ``OUT/judges.md``: each
system's score under each judge and scorer, each one's order of the systems, the Kendall tau between
orders and the pairs of systems that swap (the same tables as ``judges_*`` in ``OUT/tables/``). A
study that names the published row of its variants (``published:``, e.g. studies/paper_table.yaml)
also gets its paper table in ``study.md``: each cell ours / published, under the published protocol.

    python -m synapse_pt.study paper_table --estimate llm=openai

prints the whole study's calls, tokens and dollars (each variant's
``synapse_pt.commands.estimate``, and their sum) and runs nothing.

    python -m synapse_pt.study paper_table --out multirun/paper_table --max-cost-usd 40 llm=openai

caps what the whole study spends (its variants share one spend ledger, ``OUT/spend_ledger.sqlite``,
and the cap is ``llm.max_cost_usd`` of every variant), printing the study's estimate beside the
cap first. At the cap nothing more is sent and the study stops with exit status 3 and one line;
what was answered is cached, and the same command with a higher cap goes on from there (what the
study spent counts).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from omegaconf import DictConfig

from synapse_pt.commands.build import composed_config
from synapse_pt.commands.estimate import usd_line
from synapse_pt.commands.hydra_app import USER_FACING_ERRORS, report_failures
from synapse_pt.commands.run import BUDGET_EXIT_CODE, run
from synapse_pt.common.errors import ConfigError
from synapse_pt.eval.records.collect import (
    build_tables,
    legacy_table_files,
    load_runs,
    question_groups,
    write_files,
)
from synapse_pt.eval.records.commit import commit, holding, staging
from synapse_pt.eval.reports.judge_sensitivity import has_judges, sensitivity_markdown
from synapse_pt.eval.reports.paper_table import paper_table
from synapse_pt.eval.reports.tables import to_markdown
from synapse_pt.eval.tuning.variants import best_lines, load_study, study_table
from synapse_pt.models.llm.accounting import usd_setting
from synapse_pt.models.llm.budget import BudgetExceeded


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
    :func:`synapse_pt.commands.estimate.estimate` (calls, prompt tokens, completion tokens at their
    ``max_tokens``, USD), one row per variant, and their sum in a ``total`` row; ``not
    estimated`` names the stages a variant's estimate leaves out (the GAAMA and Membox LLM
    builds, whose calls depend on the model's replies). The facts: the dataset, questions and
    model of the first variant, what the total is (``bound``, ``not_bounded``: the stages of
    each variant that are not bounded) and each variant's own facts under ``variants``."""
    from synapse_pt.commands.estimate import BOUND, ESTIMATE, UNBOUNDED, estimate

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
    from synapse_pt.commands.estimate import TOKENIZER_NOTE, retries_line, usd_line

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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m synapse_pt.study",
        description="Run a study (studies/<name>.yaml): every variant, then its tables.")
    parser.add_argument("study", help="name in studies/ or a path to a study file")
    parser.add_argument("--out", type=Path, help="folder for runs and tables")
    parser.add_argument("--estimate", action="store_true",
                        help="print the study's calls, tokens and dollars; run nothing")
    parser.add_argument("--baseline", default=None, help="label of the delta tables' base row")
    parser.add_argument("--max-cost-usd", default=None,
                        help="cap on what the whole study spends (USD; its estimate is printed "
                             "beside it)")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides added to every variant")
    args = parser.parse_intermixed_args(argv)  # overrides before or after --out
    study = load_study(args.study)
    if args.estimate:
        frame, facts = estimate_study(study, args.overrides)
        print(format_study_estimate(frame, facts), end="")
        return 0
    if args.out is None:
        parser.error("--out is required to run a study (or --estimate to price it)")
    overrides = list(args.overrides)
    if args.max_cost_usd is not None:
        try:
            cap = usd_setting(args.max_cost_usd, "--max-cost-usd")
        except ConfigError as err:
            print(f"[study] error: {err}", file=sys.stderr)
            return 2
        overrides.append(f"llm.max_cost_usd={cap!r}")
        print(cap_line(cap, estimate_study(study, overrides)[1]))
    args.out.mkdir(parents=True, exist_ok=True)
    with holding(args.out):  # one study at a time in a folder; its summary committed at the end
        return run_and_summarise(args, study, overrides)


def run_and_summarise(args: argparse.Namespace, study: dict, overrides: list[str]) -> int:
    """Every variant, then the study's tables, ``study.md`` and ``judges.md``, staged and
    committed into ``--out`` (the files an earlier study wrote there and this one does not are
    removed; nothing else); a budget stop: exit status 3 and one line."""
    try:
        results = run_study(study, args.out, overrides)
    except BudgetExceeded as err:
        print(f"[study] stopped: {err}; to go on, the same command with --max-cost-usd above "
              f"{err.spent_usd:.4f} (what the study spent counts, ledger {err.ledger})",
              file=sys.stderr)
        return BUDGET_EXIT_CODE
    runs, where = load_runs(list(variant_folders(study, args.out).values()),
                            baseline=args.baseline)
    stale = stale_run_folders(study, args.out)
    if stale:
        print(f"[study] left out of the tables: {', '.join(str(p) for p in stale)} (run folders "
              f"in {args.out} that are no variant of {args.study})")
    groups = question_groups(runs, where)
    with staging(args.out) as staged:
        for folder, labels in table_folders(groups).items():
            group = {label: runs[label] for label in labels}
            write_files(build_tables(group, {label: where[label] for label in labels},
                                     args.baseline if args.baseline in group else None),
                        staged / folder)
        table = study_table(results)
        best = best_lines(table)
        summary = [f"# study {args.study} ({study['path']})\n\nrecall and rates as fractions\n\n"
                   + to_markdown(table, floatfmt=".3f") + "\n",
                   "\n" + "\n".join(f"- {line}" for line in best) + "\n"]
        if len(groups) > 1:  # rows over other questions are named, and tabulated apart
            said = questions_line(groups)
            summary.insert(1, f"\n{said}\n")
            print(f"[study] {said}")
        print(to_markdown(table, floatfmt=".3f"))
        print("\n".join(best))
        if has_judges(runs):  # eval.judges: each judge's and scorer's order of the systems
            report = sensitivity_markdown(runs, f"judge sensitivity: study {args.study}")
            (staged / "judges.md").write_text(report)
            print(report)
        if study["published"]:
            paper = to_markdown(paper_table(results, study["published"]))
            summary.append("\n## Beside the published numbers (ours / published, %)\n\n"
                           + paper + "\n")
            print(paper)
        (staged / "study.md").write_text("".join(summary))
        commit(args.out, legacy=legacy_study_files)
    return 0


def table_folders(groups: Sequence[Sequence[str]]) -> dict[str, Sequence[str]]:
    """Where each group of variants scored on the same questions gets its tables: the first
    group (the study's first variant's) in ``tables``, each other one in
    ``tables/<its first variant's label>``."""
    return {("tables" if i == 0 else f"tables/{labels[0]}"): labels
            for i, labels in enumerate(groups)}


def questions_line(groups: Sequence[Sequence[str]]) -> str:
    """What a study whose variants were scored on different questions says about its rows."""
    folders = table_folders(groups)
    return ("the variants were scored on different questions, so their rows compare only within "
            "a group; " + "; ".join(f"{', '.join(labels)}: {folder}/"
                                    for folder, labels in folders.items()))


def legacy_study_files(out: Path) -> list[str]:
    """What a study of a version before manifests wrote into ``--out``: ``study.md``,
    ``judges.md`` and its tables (:func:`~synapse_pt.eval.records.collect.legacy_table_files`)."""
    return ["study.md", "judges.md", *legacy_table_files(out, "tables/")]


def cap_line(cap: float, facts: dict) -> str:
    """The study's cap beside its estimate (``estimate_study``'s facts)."""
    usd = facts["usd_max"]
    estimate = ("no price for the model: tokens only" if usd is None or math.isnan(usd)
                else f"the study's estimate: {usd_line(usd, facts, 'for the whole study')}")
    return (f"[study] --max-cost-usd {cap:g}: the whole study stops once it has spent ${cap:.6g} "
            f"({estimate}; `--estimate` prints it per variant)")


def cli(argv: Sequence[str] | None = None) -> int:
    """:func:`main` inside the error boundary
    (:func:`~synapse_pt.commands.hydra_app.report_failures`): an error
    of :data:`~synapse_pt.commands.hydra_app.USER_FACING_ERRORS`, an OSError or an interruption is
    one line."""
    return report_failures(lambda: main(argv), errors=USER_FACING_ERRORS,
                           kept=lambda: "each variant's folder holds its last finished run's "
                                        "outputs; the caches keep what was computed (the same "
                                        "command resumes)")

