"""Membox's LLM build: Topic Loom decisions, box extraction and Trace Weaver verification by a
chat model (SPEC §2). The prompts are ours, written from SPEC's description of Membox's public
code, and go through the project's LLM interface, response cache and
:func:`~synapse_pt.models.structured.generate_structured`.

* :func:`loom_request` / :func:`parse_loom`: the two previous messages (``role: text``) and a new
  one; "Yes" (same topic, extends the box), "No" or "Partially Shifted" (both close it).
* :func:`box_request` / :func:`parse_box`: 3-8 keywords, one topic phrase, the explicit events and
  plans of a sealed box.
* :func:`weave_request` / :func:`parse_weave`: which new events join which candidate trace.

A reply that stays unreadable after the repair round is a counted :class:`MemboxFailure` (named in
the log and in ``describe()["extraction_failures"]``): a failed Topic Loom decision closes the
box, a failed box extraction leaves the box without keywords and events, a failed weave starts
new traces. None is turned into a silent success.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from synapse_pt.data.records import Turn
from synapse_pt.models.llm.base import ChatRequest
from synapse_pt.models.structured import StructuredOutputError, parse_json_reply

SYSTEM = "You organise the long-term memory of a conversational agent."

LOOM_PROMPT = """Previous messages:
{previous}

New message:
{new}

Does the new message continue the topic of the previous messages? Answer with exactly one of:
Yes, No, Partially Shifted."""

BOX_PROMPT = """Messages of one topic of a conversation:
{messages}

Give 3-8 keywords, one short topic phrase, and the explicit events and plans the messages state
(each one standalone sentence naming the people, with its date). Answer with JSON only, in this
form: {{"keywords": ["..."], "topic": "...", "events": ["..."]}}"""

WEAVE_PROMPT = """New events:
{events}

Existing event traces (each a storyline of related events):
{traces}

Which new events continue which trace? Link an event only when it is part of the same storyline.
Answer with JSON only, in this form: {{"links": [{{"event": 0, "trace": 3}}]}} (an empty list when
none is)."""

LOOM_ANSWERS = ("yes", "no", "partially shifted")
_LOOM = re.compile(r"\b(partially shifted|yes|no)\b", re.IGNORECASE)


@dataclass(frozen=True)
class MemboxFailure:
    stage: str  # "loom", "box" or "weave"
    sample_id: str
    where: str
    error: str


def _line(t: Turn) -> str:
    return f"{t.speaker}: {t.content}"


def loom_request(previous: Sequence[Turn], new: Turn) -> ChatRequest:
    user = LOOM_PROMPT.format(previous="\n".join(_line(t) for t in previous), new=_line(new))
    return ChatRequest((("system", SYSTEM), ("user", user)), max_tokens=8)


def parse_loom(text: str) -> str:
    """``"yes"``, ``"no"`` or ``"partially shifted"`` (the first such answer in the reply)."""
    m = _LOOM.search(text or "")
    if m is None:
        raise StructuredOutputError(f"no Yes / No / Partially Shifted in reply: {text[:80]!r}")
    return m.group(1).lower()


def box_request(lines: Sequence[str], max_tokens: int) -> ChatRequest:
    return ChatRequest((("system", SYSTEM), ("user", BOX_PROMPT.format(
        messages="\n".join(lines)))), max_tokens=max_tokens)


_WORD = re.compile(r"[A-Za-z0-9]")


def _meaningful(text: str) -> bool:
    """A value with at least one letter or digit (not the prompt's ``"..."`` placeholder)."""
    return bool(_WORD.search(text))


def parse_box(text: str) -> tuple[list[str], str, list[str]]:
    """``(keywords, topic, events)`` of a reply to :func:`box_request`. Placeholders copied from
    the prompt's example (``"..."``, no letter or digit) are not values: a reply of nothing else
    is unreadable."""
    value = parse_json_reply(text)
    if not isinstance(value, dict):
        raise StructuredOutputError('expected {"keywords": [...], "topic": "...", "events": [...]}')
    keywords, topic, events = value.get("keywords"), value.get("topic"), value.get("events", [])
    if (not isinstance(keywords, list) or not keywords
            or not all(isinstance(k, str) and k.strip() for k in keywords)):
        raise StructuredOutputError("'keywords' must be a non-empty list of strings")
    if not isinstance(topic, str) or not topic.strip():
        raise StructuredOutputError("'topic' must be a non-empty string")
    if not isinstance(events, list) or not all(isinstance(e, str) for e in events):
        raise StructuredOutputError("'events' must be a list of strings")
    keywords = [k.strip() for k in keywords if _meaningful(k)]
    if not keywords or not _meaningful(topic):
        raise StructuredOutputError("'keywords' and 'topic' hold only placeholders such as '...'")
    return keywords, topic.strip(), [e.strip() for e in events if _meaningful(e)]


def weave_request(events: Sequence[str], traces: Sequence[tuple[int, Sequence[str]]],
                  max_tokens: int = 256) -> ChatRequest:
    listed = "\n".join(f"{i}. {e}" for i, e in enumerate(events))
    shown = "\n".join(f"trace {t}: " + " | ".join(ev) for t, ev in traces)
    return ChatRequest((("system", SYSTEM), ("user", WEAVE_PROMPT.format(
        events=listed, traces=shown))), max_tokens=max_tokens)


def parse_weave(text: str) -> list[tuple[int, int]]:
    """``[(event number, trace id)]`` of a reply to :func:`weave_request`."""
    value = parse_json_reply(text)
    if not isinstance(value, dict) or not isinstance(value.get("links"), list):
        raise StructuredOutputError('expected {"links": [...]}')
    out = []
    for i, link in enumerate(value["links"]):
        if (not isinstance(link, dict) or not isinstance(link.get("event"), int)
                or not isinstance(link.get("trace"), int)):
            raise StructuredOutputError(f"link {i}: needs integer 'event' and 'trace'")
        out.append((link["event"], link["trace"]))
    return out
