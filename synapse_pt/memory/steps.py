"""What the QA harness asks of a memory's code beyond retrieval: answer steps, judges, scorers.

A related system whose code answers, judges or scores in its own way declares that step in its
own package (``memory/gaama/answer.py``, ``memory/membox/score.py``, ...) and registers it here by
name; the harness (:mod:`synapse_pt.eval.qa.pipeline`) looks every step up by name and knows no
system.
A memory names its own answer step and judge in :attr:`~synapse_pt.memory.base.MemorySystem.
own_steps` (``eval.answer_style=system``, ``eval.judge_protocol=system``); any registered name may
also be asked for directly (``eval.answer_style=gaama`` for another memory).

* :class:`AnswerStep`: the answer request's messages (our wording, and the code's own prompt read
  from its file under ``eval.prompts=upstream``), the token budget it brings, the upstream files it
  reads, and the reply its code records for an empty pack without asking a model;
* :class:`Judge`: the judge requests of one run, the reading of a reply, whether an unreadable
  reply scores 0, and (a judge whose code retries) its own way of asking;
* :class:`Scorer`: a per-question answer metric: its name, the columns it writes, the function;
* :class:`Published`: the system's published numbers, beside the build of ours they match.

Each kind is registered once (:func:`register`); ``rank`` orders the kind's entries (the column
order of ``predictions.parquet``). :mod:`synapse_pt.memory` imports the related systems' packages,
so their names exist whenever this module is imported.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from synapse_pt.data.records import Turn
from synapse_pt.data.render import format_day
from synapse_pt.errors import ConfigError
from synapse_pt.models.llm.base import LLM, ChatRequest

from .base import EPISODIC, SEMANTIC, RetrievedItem

Messages = list[dict[str, str]]
#: ``(max tokens, stop sequences)`` of an answer request
Budget = tuple[int, tuple[str, ...]]


def format_timestamp(ts: datetime | None) -> str:
    """The session date of an item (``"8 May 2023"``). The clock time is left out: within a
    session it carries the loader's synthetic per-turn offset, not a time the speakers gave."""
    return "" if ts is None else format_day(ts)


def format_item(item: RetrievedItem) -> str:
    """One context line: ``- [date] <turn as the memory rendered it>`` for a turn (no date added
    when the turn template already carries it), ``- [concept] text`` for a semantic node (and
    ``- [<kind>] text`` for any other undated item a system returns)."""
    if item.kind == SEMANTIC:
        return f"- [concept] {item.text}"
    if item.timestamp is None and item.kind != EPISODIC:
        return f"- [{item.kind}] {item.text}"
    when = "" if item.dated else format_timestamp(item.timestamp)
    return f"- [{when}] {item.text}" if when else f"- {item.text}"


def time_ordered(items: Sequence[RetrievedItem]) -> list[RetrievedItem]:
    """Episodic-style ordering: dated items by time, undated ones last."""
    return sorted(items, key=lambda it: (it.timestamp is None, it.timestamp or datetime.min))


@dataclass(frozen=True)
class AnswerPrompt:
    """One question's answer prompt, its protocol pieces already decided by the harness (which
    alone reads a category, and only under its flags, SPEC §3).

    Attributes:
        question: the question, the category-5 options appended where they are on.
        items: the retrieved pack, in rank order.
        speakers: ``"<speaker a> and <speaker b>"``.
        system: the harness's system message.
        strict: the strict-evidence instruction (``""`` when off).
        date_instruction: the date instruction of a temporal question (``""`` when off).
    """

    question: str
    items: Sequence[RetrievedItem]
    speakers: str
    system: str
    strict: str = ""
    date_instruction: str = ""


@dataclass(frozen=True)
class AnswerStep:
    """An answer step (``eval.answer_style=<name>``).

    Attributes:
        name: the style's name.
        messages: the request's messages in our wording (``eval.prompts=ours``, and under
            ``upstream`` for a step without an upstream prompt).
        upstream_messages: the messages as the system's code sends them, its prompt read from its
            file (``eval.prompts=upstream``; the upstream folder is the second argument).
        budget: ``(max tokens, stop)`` our wording brings (``eval.answer_budget=style``); ``None``:
            the configured ones.
        upstream_budget: the code's budget under ``eval.prompts=upstream``.
        upstream_files: the files (``<system>/<path>``) its upstream prompt is read from.
        empty_pack: under ``eval.prompts=upstream``, ``(file, function, variable)`` of the answer
            the code records for an empty pack without asking a model (``None``: it asks).
    """

    name: str
    messages: Callable[[AnswerPrompt], Messages]
    upstream_messages: Callable[[AnswerPrompt, str | None], Messages] | None = None
    budget: Budget | None = None
    upstream_budget: Budget | None = None
    upstream_files: tuple[str, ...] = ()
    empty_pack: tuple[str, str, str] | None = None
    rank: int = 0

    def upstream(self, prompts: str) -> bool:
        """Whether the code's own prompt is sent under ``eval.prompts=<prompts>``."""
        return prompts == "upstream" and self.upstream_messages is not None

    def build(self, prompt: AnswerPrompt, prompts: str, upstream_path: str | None) -> Messages:
        if self.upstream(prompts):
            return self.upstream_messages(prompt, upstream_path)  # type: ignore[misc]
        return self.messages(prompt)

    def own_budget(self, prompts: str) -> Budget | None:
        return self.upstream_budget if self.upstream(prompts) else self.budget


def user_request(content: str, *, max_tokens: int, temperature: float = 0.0, seed: int = 0,
                 extra: Mapping[str, Any] | None = None) -> ChatRequest:
    """One user message, no system message: a judge's request."""
    return ChatRequest.from_messages([{"role": "user", "content": content}],
                                     max_tokens=max_tokens, temperature=temperature, seed=seed,
                                     extra=dict(extra or {}))


#: a judge reply's JSON: a code fence's body, or any brace-delimited object
JSON_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL | re.IGNORECASE)
JSON_OBJECT = re.compile(r"\{.*?\}", re.DOTALL)


def json_dicts(chunks: Iterable[str]) -> Iterator[dict[str, Any]]:
    """The ``chunks`` (code fences' bodies, brace-delimited spans of a reply) that parse as JSON
    objects, in order, parsed; the others skipped."""
    for chunk in chunks:
        try:
            obj = json.loads(chunk.strip())
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            yield obj


def parse_coverage_score(text: str) -> float | None:
    """The fraction in the last JSON object with a numeric ``score`` in [0, 1] (``None``: the
    reply cannot be read, or its score lies outside [0, 1])."""
    for obj in json_dicts(reversed(JSON_FENCE.findall(text) + JSON_OBJECT.findall(text))):
        if "score" in obj:
            score = obj["score"]
            if isinstance(score, bool) or not isinstance(score, (int, float)):
                return None
            return float(score) if 0.0 <= score <= 1.0 else None
    return None


@dataclass(frozen=True)
class JudgeInputs:
    """What a judge reads of each question, aligned per question.

    Attributes:
        questions: the question texts.
        golds: the reference answers (an integer is sent as ``str``; ``None``: the item has
            none, judged only by a judge that does not need one).
        predictions: the answers to judge.
        rubrics: each question's rubric items (a ``rubric`` judge's only).
        evidence: each question's evidence turns, in the order it cites them
            (:func:`~synapse_pt.eval.qa.scorers.judge.judge_inputs`).
        category_names: each question's category as the judge's templates name it
            (:attr:`~synapse_pt.data.records.Dataset.judge_categories`, else the run's names).
    """

    questions: Sequence[str]
    golds: Sequence[Any]
    predictions: Sequence[str]
    rubrics: Sequence[Sequence[str]] | None = None
    evidence: Sequence[Sequence[Turn]] | None = None
    category_names: Sequence[str] | None = None

    def select(self, indices: Sequence[int]) -> JudgeInputs:
        """The questions at ``indices``, in that order (a field that is ``None`` stays so)."""
        def pick(values: Sequence[Any] | None) -> list[Any] | None:
            return None if values is None else [values[i] for i in indices]

        return JudgeInputs([self.questions[i] for i in indices],
                           [self.golds[i] for i in indices],
                           [self.predictions[i] for i in indices], rubrics=pick(self.rubrics),
                           evidence=pick(self.evidence), category_names=pick(self.category_names))


@dataclass(frozen=True)
class JudgeCall:
    """How a judge's requests are sent (``eval.*``): the same for every question of a run.

    Attributes:
        seed: the request seed (``judge_answers``: the seed of the first run; run ``r`` sends
            ``seed + r``).
        max_tokens: the completion budget (a judge whose code sets its own sends that instead).
        temperature: the sampling temperature.
        extra: backend parameters passed through (e.g. a JSON response format).
        prompts: ``"upstream"``: a judge with its code's prompts sends them, read from the files
            in ``upstream_path``; ``"ours"``: our wording.
        upstream_path: where the related systems' sources are read (``None``: the default).
    """

    seed: int = 0
    max_tokens: int = 128
    temperature: float = 0.0
    extra: Mapping[str, Any] | None = None
    prompts: str = "upstream"
    upstream_path: str | None = None

    def request(self, content: str, max_tokens: int | None = None) -> ChatRequest:
        """``content`` as one user request under these settings (``max_tokens``: a judge's own
        budget in place of :attr:`max_tokens`)."""
        budget = self.max_tokens if max_tokens is None else max_tokens
        return user_request(content, max_tokens=budget, temperature=self.temperature,
                            seed=self.seed, extra=self.extra)


class Judge:
    """An LLM judge protocol (``eval.judge_protocol=<name>``, ``eval.judges``).

    The harness (:func:`~synapse_pt.eval.qa.scorers.judge.judge_answers`) sends :meth:`requests` and
    reads each reply with :meth:`verdict`, unless :meth:`ask` runs the judge its own way.

    Attributes:
        name: the protocol's name.
        rank: its place among the judges (the column order under ``eval.judges``).
        unreadable_zero: an unreadable reply scores 0 (the protocol's code does so); else it is
            left out. Counted as a failure either way.
        rubric: one request per rubric item (the question's score: the share satisfied); the
            dataset's unanswerable category is judged too (the rubric says what it must say).
        needs_gold: its prompt reads the reference answer (a question without one cannot be
            judged); ``False``: it judges against the question's evidence (LoCoMo-Plus, whose
            items have no reference answer).
    """

    name: str = ""
    rank: int = 0
    unreadable_zero: bool = False
    rubric: bool = False
    needs_gold: bool = True

    def upstream_files(self, prompts: str) -> tuple[str, ...]:
        """The files (``<system>/<path>``) its prompts are read from under ``prompts``."""
        return ()

    def template_files(self, prompts: str) -> dict[str, str]:
        """Data files (not a related system's sources) its prompts are read from under
        ``prompts``, found and sha256-checked: ``{file: sha256}`` (a run records them beside its
        upstream files and stops before building its memory when one is missing)."""
        return {}

    def requests(self, inputs: JudgeInputs, call: JudgeCall) -> list[ChatRequest]:
        """The first requests of one run under ``call``: one per question of ``inputs`` (per
        rubric item under ``rubric``). A judge whose prompt reads neither the evidence nor the
        category names ignores them."""
        raise NotImplementedError

    def verdict(self, text: str, prompts: str = "upstream") -> float | None:
        """A reply's score (``None``: unreadable)."""
        raise NotImplementedError

    def ask(self, llm: LLM, inputs: JudgeInputs, call: JudgeCall
            ) -> tuple[list[float | None], list[str]] | None:
        """One run under ``call`` asked its code's way (retries): per question of ``inputs`` (its
        golds as ``str``) the score (``None``: unreadable) and the replies; ``None``: the harness
        asks (:meth:`requests`, :meth:`verdict`)."""
        return None


@dataclass(frozen=True)
class Scorer:
    """A per-question answer metric (a scoring protocol).

    Attributes:
        name: the protocol's name (``metrics.json`` ``identity.scoring_protocols``).
        columns: the columns it writes (float64; ``None`` is a question it does not score).
        score: ``(prediction, gold, category scored as, retrieved pack) -> {column: value}``.
        rank: its place among the scorers (the column order).
        protocol: identity fields it records in a qa run (``metrics.json``; compared between runs).
        protocol_before: the value of such a field in a run recorded before the field existed.
    """

    name: str
    columns: tuple[str, ...]
    score: Callable[[str, Any, int, Sequence[RetrievedItem]], Mapping[str, float | None]]
    rank: int = 0
    protocol: Mapping[str, Any] = field(default_factory=dict)
    protocol_before: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Published:
    """A related system's published LoCoMo numbers, as data its package declares (SPEC §2): the
    row the paper tables put beside a build of ours (:mod:`synapse_pt.eval.reports.paper_numbers`).

    Attributes:
        name: the system as tables name it (``"Membox"``).
        values: per category name, in percent.
        mean: its headline mean (percent).
        metric: the metric of ours scored under its protocol (a key of ``metrics.json``).
        protocol: what the numbers were measured under, in words.
        our_build: the config of ours the row sits beside.
        source: where the numbers are printed.
        rank: its place among the published rows.
    """

    name: str
    values: Mapping[str, float]
    mean: float
    metric: str
    protocol: str
    our_build: str
    source: str
    rank: int = 0


ANSWER_STEPS: dict[str, AnswerStep] = {}
JUDGES: dict[str, Judge] = {}
SCORERS: dict[str, Scorer] = {}
PUBLISHED: dict[str, Published] = {}
_REGISTRIES: dict[type, dict] = {AnswerStep: ANSWER_STEPS, Judge: JUDGES, Scorer: SCORERS,
                                 Published: PUBLISHED}

Entry = AnswerStep | Judge | Scorer | Published


def register(entry: Entry) -> Entry:
    """Add ``entry`` to its kind's registry under its name (once: a second entry of the same
    name is an error)."""
    registry = next(r for kind, r in _REGISTRIES.items() if isinstance(entry, kind))
    if entry.name in registry and registry[entry.name] is not entry:
        raise ValueError(f"{type(entry).__name__} {entry.name!r} is registered twice")
    registry[entry.name] = entry
    ordered = sorted(registry.items(), key=lambda kv: kv[1].rank)
    registry.clear()
    registry.update(ordered)
    return entry


def _lookup(registry: Mapping[str, Any], kind: str, name: str) -> Any:
    if name not in registry:
        raise ConfigError(f"{kind} must be one of {list(registry)}, got {name!r}")
    return registry[name]


def answer_step(name: str) -> AnswerStep:
    return _lookup(ANSWER_STEPS, "eval.answer_style", name)


def judge(name: str) -> Judge:
    return _lookup(JUDGES, "eval.judge_protocol", name)


def scorers() -> list[Scorer]:
    return list(SCORERS.values())


def scorer_columns() -> list[str]:
    """The columns the scorers write, in rank order."""
    return [c for s in SCORERS.values() for c in s.columns]
