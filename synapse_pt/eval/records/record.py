"""What a run records: its identity, its metrics, what its answers cost and what it paid.

:func:`run_identity` is who the run is (commit, config hash, data, memory, models);
:func:`run_metrics` assembles ``metrics.json`` from an evaluation
(:func:`~synapse_pt.eval.qa.pipeline.
evaluate`); :func:`run_timings` is ``timing.json``; :func:`run_spend` is ``spend.json``;
:func:`flatten_metrics` the flat names a logger and a sweeper read, :func:`lookup_metric` one of
them by its dotted name; :func:`build_tables` the run's own ``tables/``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from synapse_pt.data.audit import GoldAudit
from synapse_pt.data.schema import Dataset
from synapse_pt.eval.qa.aggregate import answerable_span, summarize, summary_names
from synapse_pt.eval.qa.pipeline import (
    AUDITED_PREFIX,
    PEER_PREFIX,
    EvalSettings,
    is_strict,
    upstream_files,
)
from synapse_pt.eval.qa.scorers import answer_scorers, scorer_protocol
from synapse_pt.eval.qa.settings import template_files
from synapse_pt.eval.records.outputs import (
    code_identity,
    config_hash,
    prompt_hashes,
    run_config,
)
from synapse_pt.eval.reports.report import GOLD_SUFFIX, name_gold, run_gold, run_tables
from synapse_pt.models.llm.accounting import summarize_usage
from synapse_pt.models.llm.base import LLM, ChatResponse

METRIC_PREFIXES = ("recall@", "f1_", "bleu", "judge")

# what a run's answers cost wherever they came from (metrics.json, identical when a run resumes);
# which of them were paid for in this run is in spend.json
RUN_STATE_USAGE = ("n_cached", "cost_usd_spent")


def build_label(name: str, memory: Mapping[str, Any] | None) -> str:
    """A run's label with its build named where the memory reports an LLM-free stand-in for a
    system whose method uses an LLM (GAAMA, Membox: ``describe()["llm_free"]`` and ``"build"``):
    ``"gaama_fused"`` becomes ``"gaama_fused (gaama-llm-free)"``, so a row read on its own is
    never taken for the published system (SPEC §2). Other labels are returned unchanged, as is a
    label that already names the build."""
    memory = memory or {}
    build = memory.get("build")
    if not memory.get("llm_free") or not build:
        return name
    if str(build) in name or "llm_free" in name or "llm-free" in name:
        return name
    return f"{name} ({build})"


def run_label(identity: Mapping[str, Any]) -> str:
    """The label of a run from its identity: its experiment (ablation) name, else its task name,
    with an LLM-free GAAMA / Membox build named (:func:`build_label`)."""
    name = identity.get("experiment") or identity.get("task_name") or ""
    return build_label(name, identity.get("memory"))


def run_identity(resolved: Mapping[str, Any], *, dataset: Dataset, audit: GoldAudit | None,
                 memory: Mapping[str, Any], embedder: str, llm: LLM | None, gold: str
                 ) -> dict[str, Any]:
    """Who a run is: the checkout's commit, the hash of what its config computes
    (:func:`~synapse_pt.eval.records.outputs.run_config`: without the result-neutral settings and
    the paths, so a moved folder or another cache is the same run), its task and experiment, the
    data it read (file, hashes, upstream check, subset size, notes, gold, audit), its memory's
    ``describe()``, its embedder's and LLM's names. ``dataset.question_set`` names the questions
    scored (:func:`~synapse_pt.data.schema.question_set_id`), ``dataset.gold_set`` what they were
    scored against (:func:`~synapse_pt.data.schema.gold_set_id`): tables set side by side only
    runs over the same ones, scored against the same gold."""
    return {
        **code_identity(),
        "config_hash": config_hash(run_config(resolved)),
        "task_name": resolved["task_name"],
        "experiment": resolved.get("experiment_name"),
        "dataset": {"name": dataset.name, "path": dataset.path, "sha256": dataset.sha256,
                    "content_sha256": dataset.content_sha256, "upstream": dataset.upstream,
                    "upstream_change": dataset.upstream_change,
                    "conversations": len(dataset), "questions": dataset.num_questions,
                    "question_set": dataset.question_set, "gold_set": dataset.gold_set,
                    "notes": dataset.notes, "gold": gold,
                    "audit": None if audit is None else audit.describe()},
        "memory": memory,
        "embedder": embedder,
        "llm": None if llm is None else f"{resolved['llm']['name']}:{llm.model}",
    }


def run_timings(built: Mapping[str, float], loading_seconds: float, summary: dict[str, Any],
                encoder: object) -> dict[str, float]:
    """``timing.json``: building the memory (``built``, with ``loading_seconds`` of data and
    models added to its setup), the evaluation's timings (popped from ``summary``, which keeps
    only what ``metrics.json`` holds) and the embedding cache's hits and misses of this process
    (a cold run's misses are what it embedded)."""
    timings = dict(built)
    timings["setup_seconds"] += loading_seconds
    for key in ("retrieve_seconds", "retrieve_ms_per_query", "answer_seconds"):
        timings[key] = summary.pop(key)
    cache = getattr(encoder, "cache", None)
    if cache is not None:
        timings["embedding_cache_hits"] = float(cache.hits)
        timings["embedding_cache_misses"] = float(cache.misses)
    return timings


def upstream_prompts(settings: EvalSettings, memory: Mapping[str, Any]
                     ) -> dict[str, dict[str, str]]:
    """``{"gaama/prompts/answer_from_memory.md": {"sha256": ..., "read_from": "source"}, ...}``:
    the related systems' source files whose prompts the run sent (its answers and judge,
    :func:`~synapse_pt.eval.qa.pipeline.upstream_files`, and its memory's LLM build,
    ``describe()["upstream_prompts"]``), each with its pinned sha256 and where its templates were
    read: the file itself, or ``templates.json`` with that file's sha256
    (:meth:`~synapse_pt.data.upstream.UpstreamFile.describe`); and the data files its judges'
    templates were read from (:func:`~synapse_pt.eval.qa.settings.template_files`: LoCoMo-Plus's
    ``prompts.json``), ``read_from`` ``data``."""
    from synapse_pt.data.upstream import resolve_upstream_file

    files = [*upstream_files(settings), *(memory.get("upstream_prompts") or [])]
    out = {}
    for rel in sorted(set(files)):
        found = resolve_upstream_file(rel, settings.upstream_path).describe()
        out[rel] = {k: v for k, v in found.items() if k not in ("file", "commit")}
    for rel, sha256 in template_files(settings).items():
        out[rel] = {"sha256": sha256, "read_from": "data"}
    return dict(sorted(out.items()))


@dataclass(frozen=True)
class RunCategories:
    """A run's question categories as ``metrics.json`` reports them: their ``names``, the
    ``answerable`` ones the summary means cover and the ``unanswerable`` one whose right answer
    is a refusal (the dataset's: :meth:`of`)."""

    names: Mapping[int, str]
    answerable: Sequence[int] = (1, 2, 3, 4)
    unanswerable: int | None = 5

    @classmethod
    def of(cls, dataset: Dataset, names: Mapping[int, str]) -> RunCategories:
        """The categories of a run on ``dataset`` under its category ``names``."""
        return cls(names, answerable=dataset.answerable, unanswerable=dataset.unanswerable)


def run_metrics(df: pd.DataFrame, summary: Mapping[str, Any], identity: Mapping[str, Any], *,
                settings: EvalSettings, categories: RunCategories, context_tokenizer: str,
                llm: LLM | None, prices: Mapping[str, Any], smoke: bool = False
                ) -> dict[str, Any]:
    """``metrics.json`` of a run: ``identity`` (what the caller knows of the run: commit, config
    hash, dataset, memory, models) completed with the evaluation's protocol, ``metrics`` (per
    category and both means of every per-question metric column of ``df``), ``peer_rules`` (the
    retrieval rules peers publish, :mod:`~synapse_pt.eval.qa.scorers.peer_rules`), in a run scored
    under both golds ``metrics_audited`` and ``peer_rules_audited`` (the ``audited_`` columns),
    ``retrieval``, and where present ``judge`` and ``usage`` (what the method's answers cost).
    ``categories``: their names, those the summary means cover and the refusal one."""
    names, answerable = categories.names, categories.answerable
    metric_cols = [c for c in df.columns if c.startswith(METRIC_PREFIXES)]
    qa = settings.mode == "qa"
    metrics: dict[str, Any] = {
        "identity": {
            **identity,
            "eval_mode": settings.mode,
            "scoring_protocols": [s.name for s in answer_scorers()] if qa else [],
            # one judge: its protocol; several (eval.judges): their list, judge_protocol None
            "judge_protocol": (settings.judge_protocol
                               if qa and settings.judge_runs > 0 and not settings.judges
                               else None),
            "judges": (list(settings.judges)
                       if qa and settings.judge_runs > 0 and settings.judges else None),
            # an unreadable judge reply: the protocol's rule (the one reading since issue 52)
            "judge_unreadable": "protocol" if qa and settings.judge_runs > 0 else None,
            "category_date_instruction": settings.category_date_instruction,
            "category5_options": settings.category5_options,
            "strict": is_strict(settings),
            # the strict-evidence instruction of the answer prompt (qa mode: no answers without)
            "strict_evidence": settings.strict_evidence if qa else None,
            "answer_style": settings.answer_style,
            "prompts": prompt_hashes(),
            "prompt_source": settings.prompts,
            **scorer_protocol(qa),  # what a scorer records of its protocol
            "upstream_prompts": upstream_prompts(settings, identity.get("memory") or {}),
            "context_tokenizer": context_tokenizer,
            "category_names": {str(k): v for k, v in names.items()},
            "answerable_categories": list(answerable),
            "unanswerable_category": categories.unanswerable,
            "smoke": smoke,
        },
        "metrics": summarize(df, metric_cols, names, answerable=answerable),
        "peer_rules": _summarize_prefixed(df, PEER_PREFIX, names, answerable),
        "retrieval": {k: v for k, v in summary.items() if not k.startswith("judge")},
    }
    audited = _summarize_prefixed(df, AUDITED_PREFIX, names, answerable)
    if audited:
        metrics["metrics_audited"] = {k: v for k, v in audited.items()
                                      if k.startswith(METRIC_PREFIXES)}
        metrics["peer_rules_audited"] = {k.removeprefix(PEER_PREFIX): v
                                         for k, v in audited.items()
                                         if k.startswith(PEER_PREFIX)}
    judge = {k: v for k, v in summary.items() if k.startswith("judge")}
    if judge:
        metrics["judge"] = judge
    if llm is not None and qa:
        answered = df[~df["gated"]]
        metrics["usage"] = method_usage(answered, prices, model=llm.model, num_queries=len(df))
    extraction = extraction_summary(identity.get("memory") or {})
    if extraction is not None:
        metrics["extraction"] = extraction
    return metrics


def extraction_summary(memory: Mapping[str, Any]) -> dict[str, Any] | None:
    """``{"failures", "attempts", "failure_share"}`` of a memory built by an LLM (its
    ``describe()``: extraction requests whose reply stayed unusable after the repair round, of
    all sent); ``None`` for a memory that sent none (an LLM-free build)."""
    failures = int(memory.get("extraction_failures") or 0)
    attempts = int(memory.get("extraction_attempts") or 0)
    if attempts == 0 and failures == 0:
        return None
    if failures > attempts:
        raise ValueError(f"memory describe(): {failures} extraction failures of {attempts} "
                         "attempts: the memory does not count its requests")
    return {"failures": failures, "attempts": attempts, "failure_share": failures / attempts}


def _summarize_prefixed(df: pd.DataFrame, prefix: str, names: Mapping[int, str],
                        answerable: Sequence[int] = (1, 2, 3, 4)) -> dict[str, Any]:
    """:func:`~synapse_pt.eval.qa.aggregate.summarize` of the numeric columns named ``prefix...``,
    keyed by the name without the prefix (empty where there are none)."""
    cols = [c for c in df.columns if c.startswith(prefix)
            and pd.api.types.is_numeric_dtype(df[c]) and not pd.api.types.is_bool_dtype(df[c])]
    if not cols:
        return {}
    renamed = df[["category", *cols]].rename(columns={c: c.removeprefix(prefix) for c in cols})
    return summarize(renamed, [c.removeprefix(prefix) for c in cols], names,
                     answerable=answerable)


def method_usage(answered: pd.DataFrame, prices: Mapping[str, Any], *, model: str,
                 num_queries: int) -> dict[str, Any]:
    """Tokens, latency and cost of the method's answers (the efficiency table, SPEC §1.4): the
    answers' recorded token counts, whether or not this run found them in the cache."""
    usage = summarize_usage(
        answered[["prompt_tokens", "completion_tokens", "latency_s"]].to_dict("records"),
        prices, model=model, num_queries=num_queries)
    return {k: v for k, v in usage.items() if k not in RUN_STATE_USAGE}


#: ``spend.json`` of a run that asked no language model
NO_SPEND: dict[str, Any] = {
    "n_responses": 0, "n_cached": 0, "n_paid": 0, "prompt_tokens_paid": 0,
    "completion_tokens_paid": 0, "cost_usd_spent": 0.0, "cost_usd_if_uncached": 0.0,
    "unpriced_models": []}


def run_spend(llm: LLM | None, prices: Mapping[str, Any],
              judges: Mapping[str, Sequence[ChatResponse]] | None = None) -> dict[str, Any]:
    """What this run sent to the model and paid: every response the run's LLM served (answers,
    judge, extraction), cache hits at no cost; :data:`NO_SPEND` without an LLM. An LLM without
    the response cache (``llm.cache`` empty) records no responses: its counts are ``None``,
    said in ``note``. ``judges`` (``{protocol: responses}``, :func:`~synapse_pt.eval.qa.pipeline.
    evaluate`'s ``judge_served``): each judge's part of it under ``judges.<protocol>``, counted
    alike (retries included)."""
    if llm is None:
        return dict(NO_SPEND)
    served = getattr(llm, "served", None)
    if served is None:
        spend: dict[str, Any] = {**{k: None for k in NO_SPEND},
                                 "note": "llm.cache is off: this run's responses were not recorded"}
    else:
        spend = spend_of(served, prices)
    if judges:
        spend["judges"] = {protocol: spend_of(responses, prices)
                           for protocol, responses in judges.items()}
    return spend


def spend_of(served: Sequence[ChatResponse], prices: Mapping[str, Any]) -> dict[str, Any]:
    """The :data:`NO_SPEND` fields of some served responses: how many, how many the cache
    answered (no cost), the tokens and dollars of the rest, and what all would have cost."""
    usage = summarize_usage(served, prices)
    paid = [r for r in served if not r.cached]
    return {"n_responses": usage["n_responses"], "n_cached": usage["n_cached"],
            "n_paid": len(paid),
            "prompt_tokens_paid": sum(r.prompt_tokens for r in paid),
            "completion_tokens_paid": sum(r.completion_tokens for r in paid),
            "cost_usd_spent": usage["cost_usd_spent"],
            "cost_usd_if_uncached": usage["cost_usd"],
            "unpriced_models": usage["unpriced_models"]}


def flatten_metrics(metrics: Mapping[str, Any]) -> dict[str, float]:
    """``{"recall@10/single-hop": 0.61, ..., "retrieval/false_rejection_rate": ...}``."""
    flat: dict[str, float] = {}
    for metric, per_cat in metrics.get("metrics", {}).items():
        for key, value in per_cat.items():
            if key != "n" and isinstance(value, (int, float)):
                flat[f"{metric}/{key}"] = float(value)
    for section in ("retrieval", "judge", "usage"):
        for key, value in metrics.get(section, {}).items():
            if isinstance(value, (int, float)):
                flat[f"{section}/{key}"] = float(value)
    return flat


def lookup_metric(metrics: Mapping[str, Any], name: str) -> float:
    """``"recall@10.mean_q_1_4"`` -> ``metrics["metrics"]["recall@10"]["mean_q_1_4"]``; also
    top-level sections (``"retrieval.false_rejection_rate"``). Clear error when missing."""
    missing = object()
    for root in (metrics.get("metrics", {}), metrics):
        node: Any = root
        for part in name.split("."):
            if not isinstance(node, Mapping) or part not in node:
                node = missing
                break
            node = node[part]
        if isinstance(node, (int, float)):
            return float(node)
        if node is None:
            raise ValueError(f"objective {name!r} has no value in this run (null in "
                             "metrics.json: no questions it is defined over, e.g. a category "
                             "absent from the subset); choose another objective or more data")
    available = sorted(f"{m}.{k}" for m, v in metrics.get("metrics", {}).items() for k in v
                       if k != "n")
    raise KeyError(f"objective {name!r} not found in the run's metrics; available: {available}")


def build_tables(metrics: Mapping[str, Any], names: Mapping[int, str], run_label: str
                 ) -> dict[str, pd.DataFrame]:
    """This run's own tables (one row, plus the paper's rows where the metric matches), and the
    peers' retrieval rules (``peer_rules``: one row per rule and cut-off, under each gold:
    ``peer_rules_audited`` under the audited one), each naming its gold."""
    tables = run_tables({run_label: metrics}, names)
    identity = metrics.get("identity", {})
    answerable = tuple(identity.get("answerable_categories") or (1, 2, 3, 4))
    # peer_rules holds the gold of the run's metrics (the audited one under gold=audited)
    golds = {"peer_rules": "audited" if run_gold(identity) == "audited" else "official",
             "peer_rules_audited": "audited"}
    for section, gold in golds.items():
        if metrics.get(section):
            tables[f"peer_rules{GOLD_SUFFIX[gold]}"] = name_gold(
                peer_rules_table(metrics[section], answerable), gold)
    return tables


def peer_rules_table(section: Mapping[str, Any], answerable: Sequence[int] = (1, 2, 3, 4)
                     ) -> pd.DataFrame:
    """Rows ``<rule>@<k>`` (by rule, then k); columns the mean in percent over every question
    the rule counts (all five categories, as peers publish), over the ``answerable`` categories
    (``1-4``), and the number of questions behind each."""
    micro = summary_names(answerable)[1]
    span = answerable_span(answerable)
    def key(name: str) -> tuple[str, int]:
        rule, _, k = name.rpartition("@")
        return rule, int(k)

    def pct(value: float | None) -> float:
        return float("nan") if value is None else 100 * float(value)

    rows = {name: {"all (%)": pct(v.get("overall")), "n (all)": int(v["n"].get("overall", 0)),
                   f"{span} (%)": pct(v.get(micro)), f"n ({span})": int(v["n"].get(micro, 0))}
            for name, v in sorted(section.items(), key=lambda item: key(item[0]))}
    table = pd.DataFrame.from_dict(rows, orient="index")
    table.index.name = "rule@k"
    return table
