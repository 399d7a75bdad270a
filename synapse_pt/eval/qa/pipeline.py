"""The QA pipeline: retrieve -> gate -> answer prompt -> LLM -> scorers (SPEC §1.2 step 7, §3).

One pipeline serves every :class:`~synapse_pt.memory.base.MemorySystem`. Retrieval runs batched
over all questions; gated questions get the no-record reply and cost no LLM call; the other answer
prompts go out as batches through the (cached) LLM interface. In ``mode="retrieval"`` no answer
model is used and only retrieval-level metrics are filled: the fast loop for sweeps.

No label leakage (SPEC §3): the memory only ever sees *blind* copies of the questions (sample id,
index and text; category, gold answer and evidence blanked), and the answer prompt reads a
question's category only through :func:`wants_date_instruction` and :func:`answer_options`, i.e.
only when the documented ``category_date_instruction`` or ``category5_options`` flag is on. Gold
answers and evidence are otherwise read by the scorers alone.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import torch

from synapse_pt import steps
from synapse_pt.common.errors import ConfigError
from synapse_pt.common.progress import Progress
from synapse_pt.data.audit import GOLDS, UNANSWERABLE, GoldAudit
from synapse_pt.data.categories import ADVERSARIAL, ANSWERABLE
from synapse_pt.data.schema import Dataset, Question
from synapse_pt.eval.qa.prompts import (
    NO_RECORD_REPLY,
    answer_messages,
    category5_options,
    format_context,
    resolve_option_reply,
)
from synapse_pt.eval.qa.scorers import answer_scorers
from synapse_pt.eval.qa.scorers.judge import JudgeResult, judge_answers, judge_inputs
from synapse_pt.eval.qa.scorers.peer_rules import peer_metrics
from synapse_pt.eval.qa.scorers.retrieval import rejection_auc, rejection_metrics, unit_recall
from synapse_pt.eval.qa.settings import (
    SYSTEM,
    EvalSettings,
    answer_limits,
    empty_pack_reply,
    for_memory,
    is_strict,
    judge_column,
    judge_protocols,
    require_upstream,
    skips_empty_pack,
    upstream_files,
)
from synapse_pt.eval.qa.tokens import TokenCounter
from synapse_pt.memory.base import MemorySystem, RetrievalResult
from synapse_pt.models.llm.base import LLM, ChatRequest, ChatResponse
from synapse_pt.retrieval.items import RetrievedItem

#: re-exported: the settings live in :mod:`synapse_pt.eval.qa.settings`
__all__ = ["SYSTEM", "EvalSettings", "answer_limits", "for_memory", "is_strict", "judge_column",
           "judge_protocols", "require_upstream", "upstream_files"]

log = logging.getLogger(__name__)

TEMPORAL = 2  # raw LoCoMo category of temporal questions (the date instruction's target)
#: per-question columns of the peers' retrieval rules (``peer_session_hit@5``, ...)
PEER_PREFIX = "peer_"
#: how the token-F1 scorers treat a category of another benchmark (``Dataset.f1_rules``): as the
#: LoCoMo category they score alike (multi-answer 1, the ';' cut 3, plain 4, refusal 5), or not
#: at all (``none``: no reference answer, LoCoMo-Plus; the answer scorers' columns are NaN)
F1_RULES: dict[str, int | None] = {"multi": 1, "cut": 3, "plain": 4, "refusal": 5, "none": None}
#: in a ``both`` run, the audited gold's columns carry this prefix (``audited_recall@10``)
AUDITED_PREFIX = "audited_"
#: the per-question columns a gold decides (the rest are the run's, whatever the gold)
GOLD_COLUMNS = ("gold", "evidence")
METRIC_PREFIXES = ("recall@", "f1_", "bleu", "judge", PEER_PREFIX)
BLIND_CATEGORY = 0  # the category a memory system sees: none


def blind(question: Question) -> Question:
    """The question as a memory system may see it: sample id, index and text only."""
    return dataclasses.replace(question, answer=None, category=BLIND_CATEGORY, evidence=(),
                               evidence_raw=(), evidence_unresolved=(), adversarial_answer=None,
                               rubric=())


def wants_date_instruction(question: Question, settings: EvalSettings) -> bool:
    """Whether the answer prompt carries the date instruction: only a temporal question, and only
    when ``category_date_instruction`` is on (the documented protocol exception, SPEC §3)."""
    return settings.category_date_instruction and question.category == TEMPORAL


def answer_options(question: Question, settings: EvalSettings) -> tuple[str, str] | None:
    """The official category-5 options of ``question``, or ``None``: only an adversarial question,
    and only when ``category5_options`` is on (the documented protocol exception, SPEC §3). The
    distractor is the item's ``adversarial_answer`` (its ``answer`` for the two items that have
    one instead)."""
    if not settings.category5_options or question.category != ADVERSARIAL:
        return None
    distractor = question.adversarial_answer or question.answer
    if not distractor:
        raise ValueError(f"question {question.key}: eval.category5_options needs the item's "
                         "adversarial_answer (or answer); it has neither")
    return category5_options(str(distractor), question.key, settings.seed)


def retrieve_all(memory: MemorySystem, questions: Sequence[Question],
                 batch_size: int = 0) -> tuple[RetrievalResult, float]:
    """Retrieve for every question (one call, or chunks of ``batch_size``); returns seconds too.

    The memory receives :func:`blind` copies of the questions.
    """
    queries = [blind(q) for q in questions]
    start = time.perf_counter()
    step = max(1, len(queries) if batch_size <= 0 else batch_size)
    parts = []
    with Progress(len(queries), "retrieve", "questions", logger=log) as bar:
        for i in range(0, max(1, len(queries)), step):  # no questions: one empty call
            parts.append(memory.retrieve(queries[i:i + step]))
            bar.update(len(parts[-1].items))
    if len(parts) == 1:
        result = parts[0]
    else:
        result = RetrievalResult([row for p in parts for row in p.items],
                                 torch.cat([p.c_ret for p in parts]),
                                 torch.cat([p.gated for p in parts]),
                                 gate_score=torch.cat([p.gate_score for p in parts]),
                                 gate_signals={k: torch.cat([p.gate_signals[k] for p in parts])
                                               for k in parts[0].gate_signals})
    seconds = time.perf_counter() - start
    if len(result.items) != len(questions):
        raise RuntimeError(f"{type(memory).__name__}.retrieve returned {len(result.items)} rows "
                           f"for {len(questions)} questions")
    return result, seconds


def answer_request(q: Question, items: Sequence[RetrievedItem], speakers: str,
                   settings: EvalSettings) -> ChatRequest:
    """The answer request of question ``q`` over the retrieved ``items`` (the prompt of the
    answer style, its token budget and stop, temperature 0, the run's seed)."""
    messages = answer_messages(q.question, items, speakers,
                               strict_evidence=settings.strict_evidence,
                               date_instruction=wants_date_instruction(q, settings),
                               style=settings.answer_style, options=answer_options(q, settings),
                               prompts=settings.prompts, upstream_path=settings.upstream_path)
    max_tokens, stop = answer_limits(settings)
    return ChatRequest.from_messages(messages, max_tokens=max_tokens, temperature=0.0,
                                     seed=settings.seed, stop=stop)


def answer_requests(dataset: Dataset, questions: Sequence[Question], result: RetrievalResult,
                    settings: EvalSettings) -> dict[int, ChatRequest]:
    """``{question position: answer request}`` for every question the gate let through (and,
    under :func:`skips_empty_pack`, whose pack is not empty)."""
    speakers = {c.sample_id: f"{c.speaker_a} and {c.speaker_b}" for c in dataset}
    requests: dict[int, ChatRequest] = {}
    skip_empty = skips_empty_pack(settings)
    for i, gated in enumerate(result.gated.tolist()):
        if gated:
            continue  # the no-record reply; no LLM call (SPEC §1.2 step 7)
        if skip_empty and not result.items[i]:
            continue  # the code's answer step asks nothing about an empty memory
        q = questions[i]
        requests[i] = answer_request(q, result.items[i], speakers[q.sample_id], settings)
    return requests


def answer_questions(llm: LLM, dataset: Dataset, questions: Sequence[Question],
                     result: RetrievalResult, settings: EvalSettings
                     ) -> list[ChatResponse | None]:
    """LLM answers for the questions that were not gated (``None`` where gated).

    Requests go out in batches of ``settings.answer_batch_size``; behind a
    :class:`~synapse_pt.models.llm.cache.CachedLLM` every answer is stored as it arrives, so an
    interrupted run restarted with the same config re-asks nothing.
    """
    requests = answer_requests(dataset, questions, result, settings)
    todo = list(requests)
    responses: list[ChatResponse | None] = [None] * len(questions)
    bs = max(1, settings.answer_batch_size)
    n_cached = 0
    with Progress(len(todo), "answer", "questions", logger=log) as bar:
        for start in range(0, len(todo), bs):
            chunk = todo[start:start + bs]
            batch = llm.generate([requests[i] for i in chunk])
            if len(batch) != len(chunk):
                raise RuntimeError(f"{type(llm).__name__}.generate answered {len(batch)} of "
                                   f"{len(chunk)} requests")
            for i, resp in zip(chunk, batch, strict=True):
                responses[i] = resp
                n_cached += bool(resp.cached)
            bar.update(len(chunk))
    log.info("answered %d questions (%d from the response cache), %d gated", len(todo), n_cached,
             len(questions) - len(todo))
    return responses


def predictions_text(questions: Sequence[Question], result: RetrievalResult,
                     responses: Sequence[ChatResponse | None],
                     settings: EvalSettings | None = None) -> list[str]:
    """The final answer of each question: the no-record reply where gated, the code's recorded
    answer where the pack is empty and :func:`skips_empty_pack`, else the LLM's text (under
    ``category5_options``, a bare option letter replaced by that option's text)."""
    out = []
    empty = (empty_pack_reply(settings) if settings is not None and skips_empty_pack(settings)
             and not all(result.items[i] for i in range(len(questions))) else None)
    for i, q in enumerate(questions):
        if bool(result.gated[i]):
            out.append(NO_RECORD_REPLY)
        elif empty is not None and not result.items[i] and responses[i] is None:
            out.append(empty)
        elif responses[i] is None:
            raise RuntimeError(f"question {q.key}: no answer returned for an ungated question")
        else:
            options = answer_options(q, settings) if settings is not None else None
            text = responses[i].text.strip()
            out.append(resolve_option_reply(text, options) if options else text)
    return out


def judge_skip_categories(unanswerable: int | None, protocol: str) -> tuple[int, ...]:
    """The categories the judge leaves out: the dataset's unanswerable one (scored by its refusal
    phrase rule, as mem0 does for LoCoMo's category 5), except under BEAM's rubric judge, whose
    rubric says what an abstention must say."""
    if steps.judge(protocol).rubric or unanswerable is None:
        return ()
    return (int(unanswerable),)


def judge_predictions(llm: LLM, questions: Sequence[Question], predictions: Sequence[str],
                      settings: EvalSettings, unanswerable: int | None = 5,
                      protocol: str | None = None, dataset: Dataset | None = None,
                      names: Mapping[int, str] | None = None) -> JudgeResult:
    """The LLM judge of ``protocol`` (default ``settings.judge_protocol``;
    :mod:`~synapse_pt.eval.qa.scorers.judge`) over ``settings.judge_runs`` runs, the
    ``unanswerable`` category skipped (:func:`judge_skip_categories`). Gated questions are judged
    too: their answer is the no-record reply. Given the ``dataset``, the judge may read each
    question's evidence turns and its category name (:func:`~synapse_pt.eval.qa.scorers.judge.
    judge_inputs`; ``names``: the run's category names)."""
    protocol = protocol or settings.judge_protocol
    evidence, category_names = (judge_inputs(dataset, questions, names) if dataset is not None
                                else (None, None))
    inputs = steps.JudgeInputs([q.question for q in questions], [q.answer for q in questions],
                               list(predictions), evidence=evidence,
                               category_names=category_names,
                               rubrics=([q.rubric for q in questions]
                                        if steps.judge(protocol).rubric else None))
    call = steps.JudgeCall(seed=settings.seed, max_tokens=settings.judge_max_tokens,
                           prompts=settings.prompts, upstream_path=settings.upstream_path)
    return judge_answers(llm, inputs, call, categories=[q.category for q in questions],
                         n_runs=settings.judge_runs, protocol=protocol,
                         skip_categories=judge_skip_categories(unanswerable, protocol),
                         batch_size=settings.answer_batch_size)


def judge_all(llm: LLM, questions: Sequence[Question], predictions: Sequence[str],
              settings: EvalSettings, unanswerable: int | None = 5,
              dataset: Dataset | None = None, names: Mapping[int, str] | None = None
              ) -> dict[str, JudgeResult]:
    """``{protocol: result}``: every judge of the run (:func:`judge_protocols`) over the same
    predictions, each asked on its own (its responses, hence its spend, kept apart)."""
    return {protocol: judge_predictions(llm, questions, predictions, settings, unanswerable,
                                        protocol, dataset, names)
            for protocol in judge_protocols(settings)}


def prediction_frame(questions: Sequence[Question], result: RetrievalResult,
                     context_tokens: list[int], responses: list[ChatResponse | None] | None,
                     settings: EvalSettings, judges: Mapping[str, JudgeResult] | None = None,
                     unit_tokens: list[list[int]] | None = None,
                     f1_rules: Mapping[int, str] | None = None,
                     peer_rules: bool = True) -> pd.DataFrame:
    """One row per question with the retrieval output, the answer and every metric.

    ``retrieved`` lists the items' ids in rank order, ``retrieved_turns`` the LoCoMo turns their
    content covers; recall@k counts the evidence covered by the first k items, and (given
    ``unit_tokens``, each item's context tokens) ``recall@<T>tok`` that within T tokens.

    Only what the config and data determine goes in (no cache flags, no wall-clock stamps beyond
    the LLM's reported latency, which the response cache replays), so a resumed run writes the
    same rows. ``prediction`` is ``None`` in retrieval mode. ``judges``: ``{protocol: result}``
    (:func:`judge_all`), each in its columns (:func:`judge_column`). ``f1_rules``: how the token-F1
    scorers treat a benchmark's categories where its numbers are not LoCoMo's
    (:data:`F1_RULES`); ``peer_rules``: add the peers' LoCoMo retrieval rules (their session
    rules read LoCoMo's ``D<session>:<turn>`` ids).
    """
    recall = recall_values(questions, result, settings, unit_tokens)
    covered = result.covered_turns()
    peers = peer_metrics(covered, [q.evidence_raw for q in questions],
                         [q.evidence for q in questions], settings.peer_ks) if peer_rules else {}
    qa = settings.mode == "qa"
    if qa and responses is None:
        raise ValueError("prediction_frame: qa mode needs the LLM responses")
    predictions = (predictions_text(questions, result, responses, settings) if qa
                   else [None] * len(questions))
    retrieved = retrieval_cells(result, covered)
    scores = {**{f"recall@{k}": v for k, v in recall.items()},
              **{f"{PEER_PREFIX}{name}": v for name, v in peers.items()}}
    rows = []
    for i, q in enumerate(questions):
        resp = responses[i] if qa else None
        row = {**question_cells(q, predictions[i]), **{k: v[i] for k, v in retrieved.items()},
               **usage_cells(context_tokens[i], resp)}
        if qa:
            row.update(answer_cells(q, predictions[i], result.items[i], f1_rules))
        row.update(judge_cells(i, judges or {}, settings))
        for col, values in scores.items():
            row[col] = _nan_to_none(values[i])
        for name, values in result.gate_signals.items():
            row[f"gate_{name}"] = float(values[i])
        rows.append(row)
    df = pd.DataFrame(rows)
    float_cols = [*scores, *(steps.scorer_columns() if qa else [])]
    for protocol in judges or {}:
        float_cols += [judge_column(settings, protocol), f"{judge_column(settings, protocol)}_std"]
    for col in float_cols:
        df[col] = df[col].astype("float64")
    return df


def recall_values(questions: Sequence[Question], result: RetrievalResult,
                  settings: EvalSettings, unit_tokens: list[list[int]] | None = None
                  ) -> dict[str, torch.Tensor]:
    """``{"<k>": per-question recall@k, "<T>tok": recall within T tokens}``: the share of each
    question's evidence covered by its first k retrieved items (``settings.recall_ks``) and,
    given ``unit_tokens`` (each item's context tokens), by the items within T tokens
    (``settings.recall_budgets``)."""
    units = result.units()
    evidence = [list(q.evidence) for q in questions]
    recall: dict[str, torch.Tensor] = {
        str(int(k)): v for k, v in unit_recall(units, evidence, settings.recall_ks).items()}
    if unit_tokens is not None:
        budget = unit_recall(units, evidence, settings.recall_budgets, unit_tokens=unit_tokens)
        recall.update({f"{int(t)}tok": v for t, v in budget.items()})
    return recall


def retrieval_cells(result: RetrievalResult, covered: Sequence[list[str]]
                    ) -> dict[str, list]:
    """Per question, what retrieval returned (columns of :func:`prediction_frame`): the items'
    ids in rank order, the turns they cover (``covered``: ``result.covered_turns()``), C_ret,
    the gate's score and decision."""
    return {"retrieved": result.node_ids(), "retrieved_turns": covered,
            "c_ret": [float(v) for v in result.c_ret],
            "gate_score": [float(v) for v in result.gate_score],
            "gated": [bool(g) for g in result.gated.tolist()]}


def question_cells(q: Question, prediction: str | None) -> dict[str, object]:
    """The question's own columns of :func:`prediction_frame` (its gold, as the scorers read
    it) and its ``prediction``."""
    return {"sample_id": q.sample_id, "qa_index": q.qa_index, "category": q.category,
            "question": q.question, "gold": q.answer, "adversarial_answer": q.adversarial_answer,
            "evidence": list(q.evidence), "prediction": prediction}


def usage_cells(context_tokens: int, resp: ChatResponse | None) -> dict[str, object]:
    """What answering the question used: its context tokens, the LLM's prompt and completion
    tokens and its reported latency (0 where no LLM was asked)."""
    return {"context_tokens": int(context_tokens),
            "prompt_tokens": int(resp.prompt_tokens) if resp is not None else 0,
            "completion_tokens": int(resp.completion_tokens) if resp is not None else 0,
            "latency_s": float(resp.latency_s) if resp is not None else 0.0}


def answer_cells(q: Question, prediction: str | None, items: Sequence[RetrievedItem],
                 f1_rules: Mapping[int, str] | None) -> dict[str, object]:
    """Every answer scorer's columns for ``prediction`` against the question's gold, the
    question's category read through ``f1_rules`` (:data:`F1_RULES`; a category scored by none
    gets ``None`` cells)."""
    scored_as = F1_RULES[f1_rules[q.category]] if f1_rules else q.category
    cells: dict[str, object] = {}
    for scorer in answer_scorers():
        cells.update(dict.fromkeys(scorer.columns) if scored_as is None else
                     scorer.score(prediction, q.answer, scored_as, items))
    return cells


def judge_cells(i: int, judges: Mapping[str, JudgeResult], settings: EvalSettings
                ) -> dict[str, object]:
    """Question ``i``'s columns of each judge (:func:`judge_column`): its mean verdict over the
    runs, their spread and the count of unreadable replies."""
    cells: dict[str, object] = {}
    for protocol, judge in judges.items():
        col = judge_column(settings, protocol)
        cells[col] = _nan_to_none(judge.mean[i])
        cells[f"{col}_std"] = _nan_to_none(judge.std[i])
        cells[f"n_{col}_failures"] = int(judge.n_failures[i])
    return cells


def metric_columns(settings: EvalSettings) -> list[str]:
    """The metric columns :func:`prediction_frame` writes in a run of :func:`evaluate` under
    ``settings`` (each becomes a metric of ``metrics.json``): evidence recall at each cut-off and
    token budget; in qa mode the answers' F1 and BLEU under the scoring protocols, and the
    judge's mean and spread when it runs."""
    columns = [f"recall@{int(k)}" for k in settings.recall_ks]
    columns += [f"recall@{int(t)}tok" for t in settings.recall_budgets]
    if settings.mode == "qa":
        columns += steps.scorer_columns()  # the answer scorers' (scorers/__init__.py)
        for protocol in judge_protocols(settings):  # the judges' columns, as prediction_frame
            column = judge_column(settings, protocol)
            columns += [column, f"{column}_std"]
    return columns


def _nan_to_none(x: float | torch.Tensor | np.floating) -> float | None:
    v = float(x)
    return None if math.isnan(v) else v


def retrieval_summary(df: pd.DataFrame, answerable: Sequence[int] = ANSWERABLE,
                      unanswerable: int | None = ADVERSARIAL) -> dict[str, float]:
    """Rejection rates and the ROC AUC of C_ret and of the gate's score (the signal it
    thresholds) for separating the unanswerable category (LoCoMo's 5; BEAM's abstention) from
    the rest; a benchmark without one (REALTALK) gets false rejection only, AUCs NaN."""
    gated = torch.tensor(df["gated"].to_numpy(dtype=bool))
    category = torch.tensor(df["category"].to_numpy(dtype="int64"))
    adversarial = -1 if unanswerable is None else unanswerable  # -1: no question is
    out = {k: float(v) for k, v in rejection_metrics(gated, category, adversarial=adversarial,
                                                     answerable=answerable).items()}
    c_ret = torch.tensor(df["c_ret"].to_numpy(dtype="float64"))
    out["c_ret_auc_adversarial"] = rejection_auc(c_ret, category, adversarial=adversarial)
    if "gate_score" in df:
        score = torch.tensor(df["gate_score"].to_numpy(dtype="float64"))
        out["gate_score_auc_adversarial"] = rejection_auc(score, category,
                                                          adversarial=adversarial)
    answerable = df["category"].isin(list(answerable))
    # questions whose retrieved context is empty (Membox's evaluation leaves them out)
    out["empty_context_questions"] = float((df["retrieved"].map(len) == 0).sum())
    out["context_tokens_mean"] = float(df["context_tokens"].mean())
    out["context_tokens_mean_answerable"] = float(df.loc[answerable, "context_tokens"].mean())
    return out


def audit_summary(df: pd.DataFrame, audit: GoldAudit, questions: Sequence[Question]
                  ) -> dict[str, float]:
    """How the run's gate treats the audit's groups (rates over categories 1-4): the questions
    the audit deems unanswerable as asked, its attribution errors (answerable by the official
    gold, but naming the wrong person, as LoCoMo's adversarial questions do), and the rest."""
    gated = df["gated"].to_numpy(dtype=bool)
    answerable = np.array([q.category in ANSWERABLE for q in questions])
    entries = [audit.entries.get(q.key) for q in questions]
    groups = {
        "unanswerable_as_asked": np.array([e is not None and e.status == UNANSWERABLE
                                           for e in entries]),
        "attribution_error": np.array([e is not None and e.error_type == "ATTRIBUTION_ERROR"
                                       for e in entries]),
        "listed": np.array([e is not None for e in entries]),
    }
    out = {"audit_listed": float(groups["listed"].sum()),
           "audit_unanswerable_as_asked": float(groups["unanswerable_as_asked"].sum())}
    for name, member in groups.items():
        rows = member & answerable
        out[f"audit_gated_rate_{name}"] = float(gated[rows].mean()) if rows.any() else math.nan
    rest = answerable & ~groups["unanswerable_as_asked"]
    out["audit_false_rejection_rest"] = float(gated[rest].mean()) if rest.any() else math.nan
    return out


def judge_summary(judge: JudgeResult, categories: Sequence[int] | None = None,
                  column: str = "judge") -> dict[str, float]:
    """Judge figures for the run summary: runs, unreadable replies (``judge_failures``, under every
    protocol; ``judge_unreadable_scored_zero`` 1 where they scored 0, GAAMA's rule, else they are
    left out and never counted as WRONG), the accuracy of
    each run and its spread over runs (the spread mem0 reports), overall and, given the questions'
    ``categories``, per category (``judge_accuracy_mean_cat<k>`` / ``..._std_over_runs_cat<k>``:
    mean and standard deviation over runs of the run's accuracy on category k). Keys start with
    ``column`` (:func:`judge_column`: ``judge_mem0_runs`` under ``eval.judges``)."""
    acc = judge.run_accuracy()
    judged = int((~judge.skipped).sum())
    out = {"judge_runs": float(len(judge.seeds)), "judge_questions": float(judged),
           "judge_failures": float(judge.total_failures),
           "judge_failure_rate": (judge.total_failures / (judged * len(judge.seeds))
                                  if judged else float("nan")),
           "judge_unreadable_scored_zero": float(judge.unreadable_scored_zero),
           "judge_questions_unjudged": float(int(np.sum(~judge.skipped & np.isnan(judge.mean)))),
           "judge_accuracy_std_over_runs": float(np.nanstd(acc)) if judged else float("nan")}
    for r, a in enumerate(acc):
        out[f"judge_accuracy_run{r}"] = float(a)
    if categories is not None:
        cats = np.asarray(categories)
        for k in sorted(set(int(c) for c in cats)):
            per_run = judge.run_accuracy(cats == k)
            if np.isnan(per_run).all():
                continue  # a category the judge skips (5)
            out[f"judge_accuracy_mean_cat{k}"] = float(np.nanmean(per_run))
            out[f"judge_accuracy_std_over_runs_cat{k}"] = float(np.nanstd(per_run))
    return {column + key.removeprefix("judge"): value for key, value in out.items()}


def evaluate(memory: MemorySystem, dataset: Dataset, *, settings: EvalSettings,
             token_counter: TokenCounter, llm: LLM | None = None,
             judge_llm: LLM | None = None, audit: GoldAudit | None = None,
             gold: str = "official",
             judge_served: dict[str, list[ChatResponse]] | None = None,
             category_names: Mapping[int, str] | None = None
             ) -> tuple[pd.DataFrame, dict[str, float]]:
    """Run retrieval (and, in qa mode, answering and the optional judge) for every question.

    Args:
        memory: a memory system that has already ingested ``dataset``'s conversations.
        dataset: the questions to evaluate, grouped by conversation.
        settings: the ``eval`` config.
        token_counter: counts the context tokens of each question's retrieved items.
        llm: the answer model (needed in qa mode).
        judge_llm: the judge model; defaults to ``llm``.
        audit: the audited gold (:func:`~synapse_pt.data.audit.load_audit`), needed unless
            ``gold`` is ``"official"``.
        gold: what the metrics score against (:data:`GOLDS`): the release's gold, the audit's
            (its listed questions take the audited evidence and answer; those it deems
            unanswerable as asked are left out of every metric and reported apart), or both
            (the audited columns prefixed :data:`AUDITED_PREFIX`). Retrieval and answers are
            the same under either: only the scoring reads the gold.
        judge_served: given a dict, filled with ``{protocol: responses}``: every response each
            judge was served (under an audited gold its re-judged questions too), so a run's
            ``spend.json`` counts each judge apart
            (:func:`~synapse_pt.eval.records.record.run_spend`).
        category_names: the run's category names, which a judge whose templates are per
            category reads where the dataset names none for it
            (:func:`~synapse_pt.eval.qa.scorers.judge.judge_inputs`).

    Returns:
        The per-question frame and the run summary (rejection, context tokens, judge figures,
        under an audit the gate's rejection of the audit's groups (``audit_*``), and the timing
        keys ``retrieve_seconds``, ``retrieve_ms_per_query``, ``answer_seconds``).
    """
    check_gold(gold, audit)
    settings = for_memory(settings, memory, dataset)
    questions = list(dataset.questions())
    if not questions:
        raise ValueError(f"{dataset.path}: no questions to evaluate")
    result, retrieve_s = retrieve_all(memory, questions, settings.retrieval_batch_size)
    context_tokens, unit_tokens = count_context_tokens(token_counter, result)
    responses = None
    judges: dict[str, JudgeResult] = {}
    answer_s = 0.0
    if settings.mode == "qa":
        responses, judges, answer_s = answer_and_judge(llm, judge_llm, dataset, questions, result,
                                                       settings, category_names)
    run = AnsweredRun(dataset, questions, result, context_tokens, unit_tokens, responses,
                      settings)
    df = run.frame(questions, judges)
    served = {protocol: list(judge.responses) for protocol, judge in judges.items()}
    summary = retrieval_summary(df, dataset.answerable, dataset.unanswerable)
    if audit is not None and gold != "official":
        scored, judges_audited = score_audited(run, audit, judges, judge_llm or llm,
                                               category_names)
        for protocol, judge in judges_audited.items():
            served[protocol] += judge.responses
        summary.update(audit_summary(df, audit, questions))
        df = with_gold(df, scored, [audit.status(q) for q in questions], gold)
        if gold == "audited":
            judges = judges_audited
    for protocol, judge in judges.items():
        summary.update(judge_summary(judge, [q.category for q in questions],
                                     judge_column(settings, protocol)))
    if judge_served is not None:
        judge_served.update(served)
    summary.update(retrieve_seconds=retrieve_s, retrieve_ms_per_query=1e3 * retrieve_s / len(df),
                   answer_seconds=answer_s, num_questions=float(len(df)))
    return df, summary


def check_gold(gold: str, audit: GoldAudit | None) -> None:
    """``gold`` is one of :data:`GOLDS`, and any but ``"official"`` comes with its ``audit``."""
    if gold not in GOLDS:
        raise ConfigError(f"dataset.gold must be one of {list(GOLDS)}, got {gold!r}")
    if gold != "official" and audit is None:
        raise ConfigError(f"dataset.gold={gold} needs the audit file (dataset.audit.path)")


def count_context_tokens(token_counter: TokenCounter, result: RetrievalResult
                         ) -> tuple[list[int], list[list[int]]]:
    """The context tokens of each question's retrieved items as the answer prompt formats them,
    and of each item on its own (per question, in rank order: the token budgets of recall)."""
    context_tokens = token_counter.count_many([format_context(items) for items in result.items])
    flat = token_counter.count_many([it.text for items in result.items for it in items])
    unit_tokens, start = [], 0
    for items in result.items:
        unit_tokens.append(flat[start:start + len(items)])
        start += len(items)
    return context_tokens, unit_tokens


def answer_and_judge(llm: LLM | None, judge_llm: LLM | None, dataset: Dataset,
                     questions: Sequence[Question], result: RetrievalResult,
                     settings: EvalSettings, category_names: Mapping[int, str] | None
                     ) -> tuple[list[ChatResponse | None], dict[str, JudgeResult], float]:
    """Qa mode: the LLM's answers (:func:`answer_questions`), every judge's result over them
    (``judge_llm``, default ``llm``; :func:`judge_all`; unreadable replies warned about) and the
    seconds both took."""
    if llm is None:
        raise ConfigError("eval.mode=qa needs an answer model (llm=...), got none")
    start = time.perf_counter()
    responses = answer_questions(llm, dataset, questions, result, settings)
    # every judge scores the same answers: none is asked twice
    judges = judge_all(judge_llm or llm, questions,
                       predictions_text(questions, result, responses, settings), settings,
                       dataset.unanswerable, dataset, category_names)
    for protocol, judge in judges.items():
        if judge.total_failures:
            log.warning("LLM judge %s: %d of %d replies unreadable (%s)", protocol,
                        judge.total_failures, int((~judge.skipped).sum()) * settings.judge_runs,
                        "scored 0" if judge.unreadable_scored_zero else "left out, not WRONG")
    return responses, judges, time.perf_counter() - start


@dataclasses.dataclass(frozen=True)
class AnsweredRun:
    """What a run retrieved and answered, which every scoring of it reads (the official gold's
    and the audit's): its questions, their retrieval ``result``, context tokens (all items'
    and each item's) and the LLM's ``responses`` (``None`` in retrieval mode)."""

    dataset: Dataset
    questions: list[Question]
    result: RetrievalResult
    context_tokens: list[int]
    unit_tokens: list[list[int]]
    responses: list[ChatResponse | None] | None
    settings: EvalSettings

    def predictions(self) -> list[str]:
        """The final answers (:func:`predictions_text`)."""
        return predictions_text(self.questions, self.result, self.responses, self.settings)

    def frame(self, questions: Sequence[Question],
              judges: Mapping[str, JudgeResult]) -> pd.DataFrame:
        """:func:`prediction_frame` of the run, scored against ``questions``' gold (the run's
        own, or the audit's copies of them) with the ``judges``' results."""
        return prediction_frame(questions, self.result, self.context_tokens, self.responses,
                                self.settings, judges, unit_tokens=self.unit_tokens,
                                f1_rules=self.dataset.f1_rules,
                                peer_rules=self.dataset.id_convention == "locomo")


def score_audited(run: AnsweredRun, audit: GoldAudit, judges: Mapping[str, JudgeResult],
                  judge_llm: LLM | None, category_names: Mapping[int, str] | None
                  ) -> tuple[pd.DataFrame, dict[str, JudgeResult]]:
    """The run scored against the audit's gold: its per-question frame (the metrics of the
    questions the audit deems unanswerable as asked left out, NaN) and, where the run has
    ``judges``, each judge's result over the audited questions (unchanged questions ask each
    judge the same: cache hits)."""
    audited = audit.questions(run.questions)
    judges_audited: dict[str, JudgeResult] = {}
    if judges:
        judges_audited = judge_all(judge_llm, audited, run.predictions(), run.settings,
                                   run.dataset.unanswerable, run.dataset, category_names)
    scored = run.frame(audited, judges_audited)
    left_out = np.array([audit.status(q) == UNANSWERABLE for q in run.questions])
    metric_cols = [c for c in scored.columns if c.startswith(METRIC_PREFIXES)]
    scored.loc[left_out, [c for c in metric_cols if c != "n_judge_failures"]] = np.nan
    return scored, judges_audited


def with_gold(df: pd.DataFrame, scored: pd.DataFrame, status: list[str], gold: str
              ) -> pd.DataFrame:
    """The run's frame under ``gold``: the audited frame ``scored`` (``"audited"``), or ``df``
    beside the audited gold and metric columns prefixed :data:`AUDITED_PREFIX` (``"both"``);
    either with each question's ``audit_status``."""
    if gold == "audited":
        return scored.assign(audit_status=status)
    df["audit_status"] = status
    metric_cols = [c for c in scored.columns if c.startswith(METRIC_PREFIXES)]
    for c in (*GOLD_COLUMNS, *metric_cols):
        df[f"{AUDITED_PREFIX}{c}"] = scored[c]
    return df
