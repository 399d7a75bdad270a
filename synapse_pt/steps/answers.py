"""The answer step: a question's prompt, its context lines, and a system's way of answering.

:class:`AnswerPrompt` is what the harness decided for one question; :class:`AnswerStep` turns it
into the request's messages (our wording, or the code's own prompt read from its file under
``eval.prompts=upstream``) and names the token budget it brings.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from synapse_pt.data.render import format_day
from synapse_pt.retrieval.items import EPISODIC, SEMANTIC, RetrievedItem

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
