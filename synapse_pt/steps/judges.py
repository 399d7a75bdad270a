"""The judge step: one run's judge requests, the reading of a reply, a judge's own way of asking.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from synapse_pt.data.schema import Turn
from synapse_pt.models.llm.base import LLM, ChatRequest


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
            (:attr:`~synapse_pt.data.schema.Dataset.judge_categories`, else the run's names).
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
