"""Run a study (``studies/<name>.yaml``): every variant in one process, then its tables.

    python scripts/run_study.py readings --out multirun/study_readings [overrides...]

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

    python scripts/run_study.py paper_table --estimate llm=openai

prints the whole study's calls, tokens and dollars (each variant's ``synapse_pt.estimate``, and
their sum) and runs nothing.

    python scripts/run_study.py paper_table --out multirun/paper_table --max-cost-usd 40 llm=openai

caps what the whole study spends (its variants share one spend ledger, ``OUT/spend_ledger.sqlite``,
and the cap is ``llm.max_cost_usd`` of every variant), printing the study's estimate beside the
cap first. At the cap nothing more is sent and the study stops with exit status 3 and one line;
what was answered is cached, and the same command with a higher cap goes on from there (what the
study spent counts).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from pathlib import Path

from synapse_pt.errors import ConfigError
from synapse_pt.estimate import usd_line
from synapse_pt.eval.records.collect import (
    build_tables,
    legacy_table_files,
    load_runs,
    write_files,
)
from synapse_pt.eval.records.commit import commit, holding, staging
from synapse_pt.eval.reports.judge_sensitivity import has_judges, sensitivity_markdown
from synapse_pt.eval.reports.paper_table import paper_table
from synapse_pt.eval.reports.tables import to_markdown
from synapse_pt.eval.tuning.study import best_lines, load_study, study_table
from synapse_pt.models.accounting import usd_setting
from synapse_pt.models.llm.budget import BudgetExceeded
from synapse_pt.run import BUDGET_EXIT_CODE
from synapse_pt.study import (
    estimate_study,
    format_study_estimate,
    run_study,
    stale_run_folders,
    variant_folders,
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
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
    with staging(args.out) as staged:
        write_files(build_tables(runs, where, args.baseline if args.baseline in runs else None),
                    staged / "tables")
        table = study_table(results)
        best = best_lines(table)
        summary = [f"# study {args.study} ({study['path']})\n\nrecall and rates as fractions\n\n"
                   + to_markdown(table, floatfmt=".3f") + "\n",
                   "\n" + "\n".join(f"- {line}" for line in best) + "\n"]
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


if __name__ == "__main__":
    from synapse_pt.cli import USER_FACING_ERRORS, report_failures

    sys.exit(report_failures(main, errors=USER_FACING_ERRORS,
                             kept=lambda: "each variant's folder holds its last finished run's "
                                          "outputs; the caches keep what was computed (the same "
                                          "command resumes)"))
