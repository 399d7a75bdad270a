"""The compact, titled table a run prints when it ends (the full metrics stay in ``metrics.json``).

Rows are the run's headline metrics (recall@10 in retrieval mode; F1 under both protocols, BLEU-1
and every judge the run asked in QA mode), columns the categories and the two means of the
answerable categories (``mean_q_1_4`` on LoCoMo, ``mean_q_2_10`` on BEAM); below it the mean
context tokens a question the recall was measured at, then the gate figures. The title names the
run and the data it actually loaded, and says so loudly when that was the shipped sample
conversation rather than LoCoMo-10, or a file that is not its upstream release (what differs, in
one line).
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from synapse_pt.data.source import SAMPLE_FALLBACK_NOTE
from synapse_pt.eval.qa.aggregate import OVERALL, run_summary_names
from synapse_pt.eval.qa.scorers import table_columns
from synapse_pt.eval.reports.report import run_judges

RETRIEVAL_HEADLINE = ("recall@10", "recall@1000tok")
#: the qa headline's rows: the answer scorers', then each judge the run asked
#: (:func:`~synapse_pt.eval.reports.report.run_judges`: ``judge``, or ``judge_mem0``,
#: ``judge_gaama``, ... under ``eval.judges``)
QA_HEADLINE = tuple(table_columns())
GATE_FIGURES = (("false_rejection_rate", "false rejection (answerable)"),
                ("true_rejection_rate", "true rejection (unanswerable)"),
                ("c_ret_auc_adversarial", "C_ret ROC AUC, unanswerable vs rest"),
                ("gate_score_auc_adversarial", "gate signal ROC AUC, unanswerable vs rest"))
#: more categories than this (BEAM's ten abilities) turn the table: categories as rows
WIDE = 6
SAMPLE_WARNING = "SAMPLE DATA: the shipped smoke-test conversation, not LoCoMo-10"
CHANGED_WARNING = "CHANGED DATA"
MANIFESTS = "synapse_pt/data/manifests"


def is_sample(identity: Mapping[str, Any]) -> bool:
    """Whether the run loaded the shipped sample (``synapse_pt/data/sample/``), chosen or fallen
    back to: the dataset is named ``sample`` then (a note of a changed LoCoMo file that mentions
    a sample does not make it one)."""
    data = identity.get("dataset", {})
    return data.get("name") == "sample" or SAMPLE_FALLBACK_NOTE in data.get("notes", [])


def changed_data_line(identity: Mapping[str, Any]) -> str | None:
    """One line naming a data file that is not its upstream release (its sha256 differs from the
    pinned manifest and so does its content): the file, the manifest and what differs
    (conversations missing, added or reordered, content edited); ``None`` for upstream data, the
    sample, or data with no manifest."""
    data = identity.get("dataset", {})
    if data.get("upstream") != "different" or is_sample(identity):
        return None
    name = data.get("name")
    what = data.get("upstream_change") or "see identity.dataset.notes in metrics.json"
    return (f"{CHANGED_WARNING}: {data.get('path')} is not the {name} release (its sha256 differs "
            f"from the pinned manifest {MANIFESTS}/{name}.json): {what}")


def run_title(identity: Mapping[str, Any], label: str) -> str:
    """``"<label>: <memory> on <dataset> (<n> conversations, <m> questions)"``, sample flagged."""
    data = identity.get("dataset", {})
    memory = identity.get("memory", {}).get("memory", "?")
    title = (f"{label}: {memory} on {data.get('name')} ({data.get('conversations')} "
             f"conversations, {data.get('questions')} questions, {identity.get('eval_mode')} "
             "mode)")
    if identity.get("smoke"):
        title += " [smoke subset]"
    if is_sample(identity):
        title += f" [{SAMPLE_WARNING}]"
    elif changed_data_line(identity):
        title += f" [{CHANGED_WARNING}: not the {data.get('name')} release]"
    return title


def _fmt(value: Any) -> str:
    return "-" if value is None else f"{100 * float(value):.1f}"


def headline_table(metrics: Mapping[str, Any], names: Mapping[int, str],
                   headline: Sequence[str] | None = None, section: str = "metrics") -> Table:
    """The rich table of the run's headline metrics (values in percent; its title is
    :func:`run_title`, printed above it by :func:`render_summary`); ``section``: the metrics
    of ``metrics.json`` it shows (``metrics_audited``: the audited gold's)."""
    identity = metrics.get("identity", {})
    if headline is None:
        headline = ((*QA_HEADLINE, *run_judges(identity)) if identity.get("eval_mode") == "qa"
                    else RETRIEVAL_HEADLINE)
    table = Table()
    columns = [str(names[c]) for c in sorted(names)] + [*run_summary_names(identity), OVERALL]
    entries = {m: metrics.get(section, {}).get(m) for m in headline}
    entries = {m: e for m, e in entries.items() if e is not None}
    if len(names) > WIDE:  # many categories: one row each, the metrics as columns
        table.add_column("category")
        for metric in entries:
            table.add_column(f"{metric} (%)", justify="right")
        for column in columns:
            table.add_row(column, *(_fmt(e.get(column)) for e in entries.values()))
        return table
    table.add_column("metric (%)")
    for column in columns:
        table.add_column(column, justify="right")
    for metric, entry in entries.items():
        table.add_row(metric, *(_fmt(entry.get(c)) for c in columns))
    return table


def context_line(metrics: Mapping[str, Any]) -> str | None:
    """What the recall in the table above it was measured at: the mean context tokens a question
    (counted by the run's context tokenizer); ``None`` where the run records none."""
    tokens = metrics.get("retrieval", {}).get("context_tokens_mean")
    if tokens is None or tokens != tokens:
        return None
    tokenizer = metrics.get("identity", {}).get("context_tokenizer")
    return (f"context: {float(tokens):,.0f} tokens a question (mean"
            + (f", {tokenizer} tokens" if tokenizer else "") + "); recall@<T>tok counts only "
            "the evidence within the first T")


def gate_lines(metrics: Mapping[str, Any]) -> list[str]:
    """One line of gate figures (percent, AUC as a fraction), naming the gate's signal and the
    threshold it used."""
    retrieval = metrics.get("retrieval", {})
    memory = metrics.get("identity", {}).get("memory", {})
    parts = []
    if memory.get("gate") is not None:
        tau = memory.get("gate_tau") if memory.get("gate") != "c_ret" else memory.get("tau_gate")
        parts.append(f"signal {memory['gate']}, threshold "
                     + ("none (nothing gated)" if tau is None else f"{float(tau):.4g}"))
    for key, text in GATE_FIGURES:
        value = retrieval.get(key)
        if value is None or value != value:  # absent, or NaN (no questions it is defined over)
            continue
        shown = f"{float(value):.3f}" if "auc" in key else f"{100 * float(value):.1f}%"
        parts.append(f"{text} {shown}")
    return ["gate: " + "; ".join(parts)] if parts else []


def extraction_warning(extraction: Mapping[str, Any]) -> str:
    """The end-of-run flag of LLM extraction failures (``metrics.json`` ``extraction``)."""
    share = extraction["failure_share"]
    worst = " (every one)" if extraction["failures"] == extraction["attempts"] else ""
    return (f"EXTRACTION FAILURES: {extraction['failures']} of {extraction['attempts']} LLM "
            f"extraction requests ({100 * share:.1f}%){worst} gave no usable reply after the "
            "repair round; their windows added nothing to the memory, so these numbers do not "
            "measure the configured build (each is named in the log; metrics.json: extraction)")


def render_summary(metrics: Mapping[str, Any], names: Mapping[int, str], label: str,
                   output_dir: str, width: int = 120) -> str:
    """The whole end-of-run text: table, the context its recall was measured at, gate line,
    where the outputs went."""
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, force_terminal=False, color_system=None)
    identity = metrics.get("identity", {})
    gold = identity.get("dataset", {}).get("gold", "official")
    console.print(run_title(identity, label), soft_wrap=True)
    if gold != "official":
        console.print("official gold:" if gold == "both" else
                      "audited gold (the LoCoMo audit's corrections; its unanswerable questions "
                      "left out):", soft_wrap=True)
    context = context_line(metrics)
    console.print(headline_table(metrics, names))
    if context:
        console.print(context, soft_wrap=True)
    if "metrics_audited" in metrics:
        audit = identity.get("dataset", {}).get("audit") or {}
        console.print(f"audited gold ({audit.get('entries', '?')} questions corrected, "
                      f"{audit.get('unanswerable_as_asked', '?')} unanswerable as asked left "
                      "out):", soft_wrap=True)
        console.print(headline_table(metrics, names, section="metrics_audited"))
        if context:
            console.print(context, soft_wrap=True)
    for line in gate_lines(metrics):
        console.print(line)
    extraction = metrics.get("extraction")
    if extraction and extraction["failures"]:
        console.print(extraction_warning(extraction), soft_wrap=True)
    if is_sample(metrics.get("identity", {})):
        console.print(f"{SAMPLE_WARNING}: these numbers say nothing about the method; provide "
                      "LoCoMo-10 (dataset.path=..., SYNAPSE_DATA=...)", soft_wrap=True)
    changed = changed_data_line(metrics.get("identity", {}))
    if changed:
        console.print(changed, soft_wrap=True, markup=False)
    console.print(f"full metrics: {output_dir}/metrics.json; tables: {output_dir}/tables/")
    return buffer.getvalue()
