r"""Optional LLM judge: the mem0-style CORRECT/WRONG grading (SPEC §3).

The prompt is mem0's ``ACCURACY_PROMPT`` (mem0ai/mem0 ``evaluation/metrics/llm_judge.py``), with
its typographic quotes written as ASCII. mem0 asks once per question at temperature 0 with
``response_format=json_object`` and skips category 5; its parse is
``json.loads(extract_json(text))["label"] == "CORRECT"``, which crashes on a reply without JSON and
counts any other label (even "Correct") as wrong.

Here:

* the judge runs ``n_runs`` times (default once, as mem0 and GAAMA ask) with seeds
  ``base_seed + r`` (one ``llm.generate`` batch per run), and each question gets the mean and the
  spread of its labels over the runs;
* :func:`parse_judge_label` accepts a JSON object with a ``label`` key (any case, fenced or not),
  else exactly one bare upper-case ``CORRECT`` / ``WRONG`` word;
* an unparseable reply is a **failure**, counted in ``n_failures`` under every protocol; it is
  NaN in that run (left out, never silently WRONG) unless the protocol's code scores it 0
  (:attr:`~synapse_pt.steps.Judge.unreadable_zero`: GAAMA's);
* category 5 is skipped by default (NaN, not a failure), as in mem0: it is scored by the official
  phrase rule instead.

A related system's own judge lives in its package and is found by name in the registry
(:mod:`synapse_pt.steps`): GAAMA's (``protocol="gaama"``, :mod:`synapse_pt.memory.gaama.
judge`) scores the fraction of the reference's key facts covered, retries as its code does, and
scores an unreadable reply 0.

``protocol="realtalk"`` is the LLM score REALTALK's authors report beside LoCoMo's official F1
(danny911kr/REALTALK ``eval_memory/qa_tool.py``, ``gpt_score``): the judge gives the prediction a
correctness score in [0, 1] as JSON ``{"score": ...}`` (:data:`SCORE_PROMPT`, our wording of that
instruction; :func:`parse_coverage_score` reads it). Their code raises on an unreadable reply; here
it is a counted failure.

``protocol="beam_rubric"`` is BEAM's rubric judge (mohammadtavakoli78/BEAM
``src/evaluation/compute_metrics.py``): every item of the question's rubric is judged on its own
(one request per item), and the question's score is the share of items satisfied,

.. math::
    s_q = \frac{1}{|R_q|} \sum_{r \in R_q} \mathbb{1}[\text{judge}(q, r, \hat a) = 1].

Upstream's prompt offers 0, 0.5 and 1 per item and then casts with ``int()``, so a half mark counts
as not satisfied; ours (:data:`RUBRIC_PROMPT`, our wording) asks for the binary verdict directly.
An unreadable item makes that question's run a failure (NaN, counted), never a silent 0 or 1.

``protocol="locomo_plus"`` is the LoCoMo-Plus authors' judge (github xjtuleeyf/Locomo-Plus
``evaluation_framework/task_eval/llm_as_judge.py`` at 143cdeb): one template per category name,
read from their ``prompt.py`` extracted as data (``prompts.json``, sha256-pinned:
:func:`~synapse_pt.data.locomo_plus.judge_templates`), a category without its own template judged
by ``default``; the template filled with ``gold`` (``""`` where the item has none, as their code
does), ``pred`` and ``evidence`` (the question's evidence turns, one ``speaker：text`` line each,
the full-width colon of their ``unified_input.py``); 512 completion tokens as their call; the
reply's JSON ``label`` scores correct 1, partial 0.5, wrong 0. LoCoMo-Plus's items are all their
category ``Cognitive``, whose template reads the evidence and the prediction only. Their parse
falls back on the words "correct", "wrong", "partial" anywhere in a reply that is not JSON (so
"incorrect" reads correct); ours reads the JSON label only, and a reply without one is a counted
failure scored 0, as their code scores an unknown label.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np

from synapse_pt.common.progress import Progress
from synapse_pt.data.locomo_plus import judge_templates
from synapse_pt.data.schema import Dataset, Question, Turn
from synapse_pt.data.source import sha256_file
from synapse_pt.models.llm.base import LLM, ChatRequest, ChatResponse
from synapse_pt.models.llm.recording import RecordingLLM
from synapse_pt.steps import (
    JSON_FENCE,
    JSON_OBJECT,
    JUDGES,
    Judge,
    JudgeCall,
    JudgeInputs,
    json_dicts,
    parse_coverage_score,
    register,
)

__all__ = ["ACCURACY_PROMPT", "JUDGE_PROTOCOLS", "LOCOMO_PLUS_LABELS", "RUBRIC_PROMPT",
           "SCORE_PROMPT", "JudgeCall", "JudgeInputs", "JudgeResult", "build_judge_requests",
           "judge_answers", "judge_inputs", "parse_coverage_score", "parse_judge_label",
           "parse_label_score", "parse_rubric_verdict"]

log = logging.getLogger(__name__)

Label = Literal["CORRECT", "WRONG"]

ACCURACY_PROMPT = """
Your task is to label an answer to a question as 'CORRECT' or 'WRONG'. You will be given the following data:
    (1) a question (posed by one user to another user), 
    (2) a 'gold' (ground truth) answer, 
    (3) a generated answer
which you will score as CORRECT/WRONG.

The point of the question is to ask about something one user should know about the other user based on their prior conversations.
The gold answer will usually be a concise and short answer that includes the referenced topic, for example:
Question: Do you remember what I got the last time I went to Hawaii?
Gold answer: A shell necklace
The generated answer might be much longer, but you should be generous with your grading - as long as it touches on the same topic as the gold answer, it should be counted as CORRECT. 

For time related questions, the gold answer will be a specific date, month, year, etc. The generated answer might be much longer or use relative time references (like "last Tuesday" or "next month"), but you should be generous with your grading - as long as it refers to the same date or time period as the gold answer, it should be counted as CORRECT. Even if the format differs (e.g., "May 7th" vs "7 May"), consider it CORRECT if it's the same date.

Now it's time for the real question:
Question: {question}
Gold answer: {gold_answer}
Generated answer: {generated_answer}

First, provide a short (one sentence) explanation of your reasoning, then finish with CORRECT or WRONG. 
Do NOT include both CORRECT and WRONG in your response, or it will break the evaluation script.

Just return the label CORRECT or WRONG in a json format with the key as "label".
"""  # noqa: E501, W291 - kept line for line (trailing spaces included) as mem0 sends it

SCORE_PROMPT = """Judge how correct a model's prediction is, given the question and its ground-truth
answer.

Question: {question}
Ground truth: {gold_answer}
Prediction: {generated_answer}

Give a score from 0 to 1: 0 means the prediction is entirely wrong, 1 means it is entirely correct.
Reply with a JSON object only, for example {{"score": 0.7}}."""

RUBRIC_PROMPT = """You check one criterion of a grading rubric against a response to a user's
question.

Question: {question}
Criterion: {rubric_item}
Response: {generated_answer}

The criterion is satisfied when the response addresses the question and meets the criterion in
meaning (paraphrases, synonyms and equivalent numbers or dates count; tone and length do not). A
criterion that forbids something is satisfied only when the response addresses the question and
does not contain it. Reply with a JSON object only: {{"score": 1}} if the criterion is satisfied,
{{"score": 0}} if it is not."""

_BARE = re.compile(r"\b(CORRECT|WRONG)\b")


def parse_judge_label(text: str) -> Label | None:
    """The judge's label, or ``None`` when the reply cannot be read.

    1. A JSON object (inside a code fence or anywhere in the text) with a string ``label`` that is
       ``correct`` or ``wrong`` in any case decides. A JSON ``label`` with another value is
       unreadable (``None``).
    2. Otherwise the reply must contain bare upper-case ``CORRECT`` or ``WRONG`` words of one kind
       only (``INCORRECT`` does not count; both kinds present -> ``None``).
    """
    fenced = JSON_FENCE.search(text)
    for obj in json_dicts(([fenced.group(1)] if fenced else []) + JSON_OBJECT.findall(text)):
        if "label" in obj:
            label = obj["label"]
            if isinstance(label, str) and label.strip().upper() in ("CORRECT", "WRONG"):
                return label.strip().upper()  # type: ignore[return-value]
            return None
    words = set(_BARE.findall(text))
    if len(words) == 1:
        return words.pop()  # type: ignore[return-value]
    return None


def parse_rubric_verdict(text: str) -> float | None:
    """A rubric item's verdict: 1.0 or 0.0 from the last JSON object with a ``score`` of exactly
    0 or 1 (``None``: unreadable, or another value such as a half mark)."""
    score = parse_coverage_score(text)
    return score if score in (0.0, 1.0) else None


class PromptJudge(Judge):
    """A judge of one request per question (per rubric item under ``rubric``): ``prompt`` filled
    with the question, the gold (or the rubric item) and the answer; ``parse`` reads a reply."""

    def __init__(self, name: str, prompt: str, parse: Callable[[str], float | None], rank: int,
                 rubric: bool = False) -> None:
        self.name, self.prompt, self.parse, self.rank, self.rubric = (name, prompt, parse, rank,
                                                                       rubric)

    def requests(self, inputs: JudgeInputs, call: JudgeCall) -> list[ChatRequest]:
        if self.rubric:
            rubrics = inputs.rubrics
            if rubrics is None or len(rubrics) != len(inputs.questions):
                raise ValueError(f"judge protocol {self.name!r} needs one rubric per question")
            return [call.request(self.prompt.format(question=q, rubric_item=item,
                                                    generated_answer=p))
                    for q, p, rubric in zip(inputs.questions, inputs.predictions, rubrics,
                                            strict=True)
                    for item in rubric]
        return [call.request(self.prompt.format(question=q, gold_answer=str(g),
                                                generated_answer=p))
                for q, g, p in zip(inputs.questions, inputs.golds, inputs.predictions,
                                   strict=True)]

    def verdict(self, text: str, prompts: str = "upstream") -> float | None:
        return self.parse(text)


def _label_verdict(text: str) -> float | None:
    label = parse_judge_label(text)
    return None if label is None else (1.0 if label == "CORRECT" else 0.0)


#: the LoCoMo-Plus authors' labels and scores (``llm_as_judge.py``: ``LABEL_TO_SCORE``, as
#: prompts.json's ``judge_scores`` records them)
LOCOMO_PLUS_LABELS = {"correct": 1.0, "partial": 0.5, "wrong": 0.0}
#: their judge call's completion budget (``llm_as_judge.py``: ``--max-tokens`` default)
LOCOMO_PLUS_MAX_TOKENS = 512
#: the separator of an evidence line in their judge input (``unified_input.py``)
LOCOMO_PLUS_COLON = "\uff1a"


def parse_label_score(text: str) -> float | None:
    """The score of the ``label`` of the first JSON object (fenced or not) that has one:
    ``correct`` 1, ``partial`` 0.5, ``wrong`` 0, in any case; ``None`` for a reply without such
    an object or with another label."""
    for obj in json_dicts(JSON_FENCE.findall(text) + JSON_OBJECT.findall(text)):
        if "label" in obj:
            label = obj["label"]
            return LOCOMO_PLUS_LABELS.get(label.strip().lower()) if isinstance(label, str) \
                else None
    return None


class LocomoPlusJudge(Judge):
    """The LoCoMo-Plus authors' judge (module docstring): the same under both ``prompts``
    (their templates are the only ones; ``ours`` keeps the configured token budget)."""

    name = "locomo_plus"
    rank = 4
    unreadable_zero = True  # llm_as_judge.py: an unknown or empty label scores 0.0
    needs_gold = False  # the Cognitive template reads the evidence, not a reference answer

    def template_files(self, prompts: str) -> dict[str, str]:
        _, path = judge_templates()
        return {"locomo_plus/prompts.json": sha256_file(path)}

    def requests(self, inputs: JudgeInputs, call: JudgeCall) -> list[ChatRequest]:
        n = len(inputs.questions)
        evidence, category_names = inputs.evidence, inputs.category_names
        if evidence is None or category_names is None or len(evidence) != n \
                or len(category_names) != n:
            raise ValueError(f"judge protocol {self.name!r} needs each of the {n} questions' "
                             "evidence turns and category name")
        templates, _ = judge_templates()
        budget = LOCOMO_PLUS_MAX_TOKENS if call.prompts == "upstream" else call.max_tokens
        out = []
        for gold, pred, turns, category in zip(inputs.golds, inputs.predictions, evidence,
                                               category_names, strict=True):
            text = "\n".join(f"{t.speaker}{LOCOMO_PLUS_COLON}{t.text.strip()}" for t in turns)
            template = templates.get(category) or templates["default"]
            out.append(call.request(template.format(gold="" if gold is None else str(gold),
                                                    pred=pred, evidence=text), max_tokens=budget))
        return out

    def verdict(self, text: str, prompts: str = "upstream") -> float | None:
        return parse_label_score(text)


register(PromptJudge("mem0", ACCURACY_PROMPT, _label_verdict, rank=0))
register(PromptJudge("realtalk", SCORE_PROMPT, parse_coverage_score, rank=2))
register(PromptJudge("beam_rubric", RUBRIC_PROMPT, parse_rubric_verdict, rank=3, rubric=True))
register(LocomoPlusJudge())
#: every judge protocol, in rank order (the registry, :mod:`synapse_pt.steps`)
JUDGE_PROTOCOLS = tuple(JUDGES)
#: the request settings where none are given (:class:`~synapse_pt.steps.JudgeCall`'s
#: defaults)
DEFAULT_CALL = JudgeCall()


def build_judge_requests(inputs: JudgeInputs, call: JudgeCall = DEFAULT_CALL, *,
                         protocol: str = "mem0") -> list[ChatRequest]:
    """The first requests of one run of ``protocol``'s judge under ``call`` (:meth:`~synapse_pt.
    steps.Judge.requests`): one per question of ``inputs`` (:data:`ACCURACY_PROMPT` for
    ``"mem0"``, :data:`SCORE_PROMPT` for ``"realtalk"``, the LoCoMo-Plus authors' template of the
    question's category for ``"locomo_plus"`` (``evidence`` and ``category_names`` needed), a
    related system's own judge as its package writes it), or for ``"beam_rubric"`` one per rubric
    item (:data:`RUBRIC_PROMPT`), question by question in rubric order (``rubrics`` needed)."""
    return _judge(protocol).requests(inputs, call)


def judge_inputs(dataset: Dataset, questions: Sequence[Question],
                 names: Mapping[int, str] | None = None
                 ) -> tuple[list[tuple[Turn, ...]], list[str]]:
    """What a judge may read of each question besides its text and gold: its evidence turns (the
    dataset's records of the ids it cites, in that order) and its category as the judge's
    templates name it (the dataset's :attr:`~synapse_pt.data.schema.Dataset.judge_categories`,
    else ``names``, the run's category names, else the number)."""
    wanted = {(q.sample_id, e) for q in questions for e in q.evidence}
    turns = {(t.sample_id, t.dia_id): t for t in dataset.turns()
             if (t.sample_id, t.dia_id) in wanted}
    evidence = [tuple(turns[(q.sample_id, e)] for e in q.evidence) for q in questions]
    names = names or {}
    categories = [dataset.judge_categories.get(q.category) or names.get(q.category)
                  or str(q.category) for q in questions]
    return evidence, categories


def _judge(protocol: str) -> Judge:
    if protocol not in JUDGES:
        raise ValueError(f"judge protocol must be one of {list(JUDGES)}, got {protocol!r}")
    return JUDGES[protocol]


@dataclass
class JudgeResult:
    """Judge labels over ``R`` runs for ``B`` questions.

    Attributes:
        labels: ``[R, B]``: 1.0 CORRECT, 0.0 WRONG (``"gaama"``: the covered fraction), NaN for a
            skipped question and for a failure unless ``unreadable_scored_zero`` (then 0.0).
        mean: ``[B]``: mean label over the runs that parsed (NaN if none did or skipped).
        std: ``[B]``: population standard deviation (ddof = 0) over the runs that parsed.
        n_failures: ``[B]``: runs whose reply could not be parsed (scored 0 or left out).
        skipped: ``[B]`` bool: questions not judged (category in ``skip_categories``).
        replies: ``[R][B]`` raw reply texts (``None`` for skipped questions).
        seeds: the seed of each run.
        unreadable_scored_zero: whether a failure scored 0 (in ``labels`` and the means) rather
            than being left out.
        responses: every response the judge was served, retries included (``cached`` where the
            response cache answered): what this judge cost (``spend.json``).
    """

    labels: np.ndarray
    mean: np.ndarray
    std: np.ndarray
    n_failures: np.ndarray
    skipped: np.ndarray
    replies: list[list[str | None]]
    seeds: list[int]
    unreadable_scored_zero: bool = False
    responses: list[ChatResponse] = field(default_factory=list)

    @property
    def total_failures(self) -> int:
        return int(self.n_failures.sum())

    def run_accuracy(self, mask: np.ndarray | None = None) -> np.ndarray:
        """``[R]``: each run's accuracy over the questions it parsed (the run-to-run spread mem0
        reports is the std of this); ``mask`` (``[B]`` bool) restricts it to some questions,
        e.g. one category."""
        labels = self.labels if mask is None else self.labels[:, np.asarray(mask, dtype=bool)]
        with np.errstate(invalid="ignore"):
            judged = ~np.isnan(labels)
            return np.where(judged.sum(1) > 0,
                            np.nansum(labels, 1) / np.maximum(judged.sum(1), 1), np.nan)


def judge_answers(llm: LLM, inputs: JudgeInputs, call: JudgeCall = DEFAULT_CALL, *,
                  categories: Sequence[int] | None = None, n_runs: int = 1,
                  skip_categories: Sequence[int] = (5,), protocol: str = "mem0",
                  batch_size: int = 64) -> JudgeResult:
    """Judge every answer of ``inputs`` ``n_runs`` times (run ``r`` under ``call`` with seed
    ``call.seed + r``).

    Args:
        llm: any backend with ``generate(requests) -> responses`` (``.text`` is read).
        inputs: per question its text, gold (an integer is sent as ``str``), prediction and what
            else its judge reads: ``rubrics`` (``"beam_rubric"`` only); ``evidence`` and
            ``category_names`` (:func:`judge_inputs`), read by a judge that judges against the
            evidence (``"locomo_plus"``), which needs no gold.
        call: how the requests are sent (:class:`~synapse_pt.steps.JudgeCall`): its
            ``prompts`` ``"upstream"``: a judge with its code's prompts sends them, read from the
            files in ``upstream_path`` (:meth:`~synapse_pt.steps.Judge.ask`); ``"ours"``:
            our wording. mem0's, REALTALK's and BEAM's judges are the same under both.
        categories: raw category numbers; questions in ``skip_categories`` are not sent (needed
            when ``skip_categories`` is non-empty).
        n_runs: judge runs (1, as GAAMA's and mem0's code ask; a retry after an unreadable
            reply is not a run); over several, the spread is the judge's own noise.
        protocol: a registered judge (:func:`~synapse_pt.steps.judge`): ``"mem0"``
            (CORRECT/WRONG, 1/0), ``"realtalk"`` (a correctness score in [0, 1]),
            ``"beam_rubric"`` (share of the rubric's items satisfied) or a related system's own.
            An unreadable reply is counted in ``n_failures``; it scores 0 where the protocol's
            code does so (:attr:`~synapse_pt.steps.Judge.unreadable_zero`; under a rubric
            an unreadable item then counts as not satisfied), else it is left out.
        batch_size: judge requests per ``llm.generate`` call (the progress a log shows,
            :mod:`synapse_pt.common.progress`, advances between calls; GAAMA's code judges a run's
            questions in one call).

    Raises:
        ValueError: on misaligned inputs, a judged question whose gold is ``None`` or, under
            ``"beam_rubric"``, one without rubric items.
    """
    judge = _judge(protocol)
    skipped = _skipped(inputs, categories, n_runs, skip_categories)
    todo = [i for i in range(len(inputs.questions)) if not skipped[i]]
    _check_judged(judge, protocol, inputs, todo)
    rubrics = inputs.rubrics if judge.rubric else None
    judged = replace(inputs, rubrics=rubrics).select(todo)
    # the request of each rubric item belongs to question owner[j]
    owner = [i for i in todo for _ in rubrics[i]] if rubrics is not None else todo
    served = RecordingLLM(llm)  # what this judge is served: its own spend
    tally = _Tally.empty(n_runs, len(inputs.questions), judge.unreadable_zero)
    seeds = [call.seed + r for r in range(n_runs)]
    with Progress(n_runs * len(owner), "judge", "requests", logger=log) as bar:
        for r, seed in enumerate(seeds):
            run = replace(call, seed=seed)
            asked = judge.ask(served, replace(judged, golds=[str(g) for g in judged.golds]), run)
            if asked is not None:  # the judge's code asks its own way (retries)
                for i, score, text in zip(todo, *asked, strict=True):
                    tally.record(r, i, [score], text)
                bar.update(len(todo))
                continue
            requests = judge.requests(judged, run)
            responses = _send(served, requests, batch_size, bar, f"run {r}, seed {seed}")
            _tally_replies(tally, r, judge, run.prompts, owner, responses)
    return _result(tally, skipped, seeds, served.served)


def _skipped(inputs: JudgeInputs, categories: Sequence[int] | None, n_runs: int,
             skip_categories: Sequence[int]) -> np.ndarray:
    """``[B]`` bool: the questions in ``skip_categories``, once the inputs, categories and
    ``n_runs`` are checked."""
    n = len(inputs.questions)
    golds, predictions = inputs.golds, inputs.predictions
    if not (len(golds) == len(predictions) == n):
        raise ValueError(f"judge_answers: {n} questions, {len(golds)} golds, "
                         f"{len(predictions)} predictions")
    if n_runs < 1:
        raise ValueError(f"judge_answers: n_runs must be >= 1, got {n_runs}")
    if skip_categories and categories is None:
        raise ValueError("judge_answers: categories are needed to skip categories "
                         f"{tuple(skip_categories)} (pass skip_categories=() to judge all)")
    if categories is not None and len(categories) != n:
        raise ValueError(f"judge_answers: {n} questions but {len(categories)} categories")
    return np.array([categories is not None and int(c) in set(skip_categories)
                     for c in (categories if categories is not None else [None] * n)],
                    dtype=bool)


def _check_judged(judge: Judge, protocol: str, inputs: JudgeInputs, todo: Sequence[int]) -> None:
    """Every judged question (``todo``) has what ``judge`` reads: its rubric items under a
    rubric, else its gold where the judge needs one; evidence and category names, when given,
    one per question."""
    n = len(inputs.questions)
    rubrics, questions = inputs.rubrics, inputs.questions
    if judge.rubric and (rubrics is None or len(rubrics) != n):
        raise ValueError(f"judge_answers: protocol 'beam_rubric' needs {n} rubrics, got "
                         f"{None if rubrics is None else len(rubrics)}")
    for i in todo:
        if judge.rubric and not rubrics[i]:  # type: ignore[index]
            raise ValueError(f"judge_answers: question {i} ({questions[i]!r}) has no rubric items "
                             "for judge protocol 'beam_rubric'")
        if not judge.rubric and judge.needs_gold and inputs.golds[i] is None:
            raise ValueError(f"judge_answers: question {i} ({questions[i]!r}) has no gold answer "
                             f"for judge protocol {protocol!r} (a benchmark without reference "
                             "answers is judged by its own judge: eval.judge_protocol=system)")
    for name, values in (("evidence", inputs.evidence),
                         ("category_names", inputs.category_names)):
        if values is not None and len(values) != n:
            raise ValueError(f"judge_answers: {n} questions but {len(values)} {name}")


def _send(llm: LLM, requests: list[ChatRequest], batch_size: int, bar: Progress,
          run: str) -> list[ChatResponse]:
    """``llm``'s responses to ``requests``, ``batch_size`` per ``generate`` call (``bar``
    advancing between calls); one response per request, else an error naming the ``run``."""
    step = max(1, batch_size)
    responses: list[ChatResponse] = []
    for start in range(0, len(requests), step):
        chunk = requests[start:start + step]
        responses += llm.generate(chunk)
        bar.update(len(chunk))
    if len(responses) != len(requests):
        raise ValueError(f"judge_answers: the LLM answered {len(responses)} of "
                         f"{len(requests)} requests ({run})")
    return responses


@dataclass
class _Tally:
    """The runs' verdicts so far, ``[R, B]``: labels (NaN until scored), failures and replies;
    ``zero``: an unreadable verdict scores 0 (:attr:`~synapse_pt.steps.Judge.
    unreadable_zero`) rather than leaving the label out."""

    labels: np.ndarray
    failed: np.ndarray
    replies: list[list[str | None]]
    zero: bool

    @classmethod
    def empty(cls, n_runs: int, n: int, zero: bool) -> _Tally:
        return cls(np.full((n_runs, n), np.nan), np.zeros((n_runs, n), dtype=bool),
                   [[None] * n for _ in range(n_runs)], zero)

    def record(self, r: int, i: int, verdicts: Sequence[float | None], reply: str) -> None:
        """Question ``i``'s verdicts in run ``r`` (a rubric's items; one otherwise): its label
        is their mean, unreadable when any is (then 0 under the zero rule, else none)."""
        self.replies[r][i] = reply
        self.failed[r, i] = any(v is None for v in verdicts)
        if not self.failed[r, i] or self.zero:
            self.labels[r, i] = float(np.mean([0.0 if v is None else v for v in verdicts]))


def _tally_replies(tally: _Tally, r: int, judge: Judge, prompts: str, owner: Sequence[int],
                   responses: Sequence[ChatResponse]) -> None:
    """Run ``r``'s responses, one per request (the request ``j`` of question ``owner[j]``), read
    by ``judge`` and recorded per question in ``tally``."""
    verdicts: dict[int, list[float | None]] = {}
    texts: dict[int, list[str]] = {}
    for i, resp in zip(owner, responses, strict=True):
        verdicts.setdefault(i, []).append(judge.verdict(resp.text, prompts))
        texts.setdefault(i, []).append(resp.text)
    for i, items in verdicts.items():
        tally.record(r, i, items, "\n---\n".join(texts[i]))


def _result(tally: _Tally, skipped: np.ndarray, seeds: list[int],
            responses: list[ChatResponse]) -> JudgeResult:
    """The runs' labels with each question's mean and population spread over the runs that
    parsed, and its failures (none for a skipped question)."""
    labels = tally.labels
    parsed = ~np.isnan(labels)
    n_ok = parsed.sum(0)
    n_failures = np.where(skipped, 0, tally.failed.sum(0)).astype(np.int64)
    safe = np.where(parsed, labels, 0.0)
    mean = np.where(n_ok > 0, safe.sum(0) / np.maximum(n_ok, 1), np.nan)
    var = np.where(parsed, (safe - mean) ** 2, 0.0).sum(0) / np.maximum(n_ok, 1)
    std = np.where(n_ok > 0, np.sqrt(var), np.nan)
    return JudgeResult(labels=labels, mean=mean, std=std, n_failures=n_failures, skipped=skipped,
                       replies=tally.replies, seeds=seeds, unreadable_scored_zero=tally.zero,
                       responses=responses)
