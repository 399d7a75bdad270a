"""Membox's LLM build: Topic Loom decisions, box extraction and Trace Weaver verification by a
chat model (SPEC §2). The prompts are ours, written from SPEC's description of Membox's public
code, and go through the project's LLM interface, response cache and
:func:`~synapse_pt.models.structured.generate_structured`.

* :func:`loom_request` / :func:`parse_loom`: the two previous messages (``role: text``) and a new
  one; "Yes" (same topic, extends the box), "No" or "Partially Shifted" (both close it).
* :func:`box_request` / :func:`parse_box`: 3-8 keywords, one topic phrase, the explicit events and
  plans of a sealed box.
* :func:`verify_request` / :func:`parse_verify`: the code's Trace Weaver verification, one call
  per candidate trace with all of the new box's events: which of them continue that trace (so an
  event may join several traces).
* :func:`chain_request` / :func:`parse_chains`: the code's grouping of the events that joined no
  trace into new chains (each a new trace) and isolated events.
* :func:`weave_request` / :func:`parse_weave`: our earlier reading (``memory.weave=per_event``):
  one call per box linking each event to at most one candidate trace.

A reply that stays unreadable after the repair round is a counted :class:`MemboxFailure` (named in
the log and in ``describe()["extraction_failures"]``): a failed Topic Loom decision closes the
box, a failed box extraction leaves the box without keywords and events, a failed verification
joins all of the box's events to that trace (as the code's ``_llm_event_filter`` does when its
reply does not parse), a failed grouping gives each unmatched event its own trace (the code
creates none: its events would be lost), a failed per-event weave starts new traces. None is
turned into a silent success.
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

VERIFY_PROMPT = """An existing event trace (a storyline, oldest first):
{trace}

New events, numbered:
{events}

Which new events continue this storyline: the same activity carried forward (its progress,
outcome or a direct consequence, next in time or cause), not merely a similar topic? The others
start something new, run in parallel, or concern another matter.
Answer with JSON only, in this form: {{"related": [0, 2], "unrelated": [1]}}"""

CHAIN_PROMPT = """Events from one part of a conversation, numbered:
{events}

Group them into storylines: the main chain of events that belong together (by time, cause or
theme, in logical order), any further chains, and the events that fit no chain.
Answer with JSON only, in this form:
{{"chains": [[0, 2], [1]], "isolated": [3]}} (the main chain first)."""

LOOM_ANSWERS = ("yes", "no", "partially shifted")
_LOOM = re.compile(r"\b(partially shifted|yes|no)\b", re.IGNORECASE)


@dataclass(frozen=True)
class MemboxFailure:
    stage: str  # "loom", "box", "weave", "verify" or "chains"
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


def numbered(events: Sequence[str]) -> str:
    """Events as the prompts list them, one per line: ``"0. <event>"``."""
    return "\n".join(f"{i}. {e}" for i, e in enumerate(events))


def weave_request(events: Sequence[str], traces: Sequence[tuple[int, Sequence[str]]],
                  max_tokens: int = 256) -> ChatRequest:
    listed = numbered(events)
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


def verify_request(trace_lines: Sequence[str], events: Sequence[str],
                   max_tokens: int = 256) -> ChatRequest:
    """The verification of one candidate trace (its events, ``"{date}: {event}"``) against all
    of a new box's events."""
    listed = numbered(events)
    return ChatRequest((("system", SYSTEM), ("user", VERIFY_PROMPT.format(
        trace="\n".join(trace_lines) or "None", events=listed))), max_tokens=max_tokens)


def _indices(value: object, key: str, n: int | None) -> list[int]:
    if not isinstance(value, list) or not all(isinstance(i, int) and not isinstance(i, bool)
                                              for i in value):
        raise StructuredOutputError(f"'{key}' must be a list of event numbers")
    bad = [] if n is None else [i for i in value if not 0 <= i < n]  # None: the shape only
    if bad:
        raise StructuredOutputError(f"'{key}' names events {bad}; there are {n}")
    return list(dict.fromkeys(value))


def parse_verify(text: str, n: int | None) -> list[int]:
    """The numbers of the events (of ``n``) that continue the trace. As the code, a reply that
    names no event at all (neither related nor unrelated) joins them all. ``n=None`` checks the
    reply's shape only (then "all" is an empty list)."""
    value = parse_json_reply(text)
    if not isinstance(value, dict) or "related" not in value:
        raise StructuredOutputError('expected {"related": [...], "unrelated": [...]}')
    related = _indices(value["related"], "related", n)
    unrelated = _indices(value.get("unrelated", []), "unrelated", n)
    if not related and not unrelated:
        return list(range(n or 0))
    return [i for i in related if i not in set(unrelated)]


def chain_request(events: Sequence[str], max_tokens: int = 256) -> ChatRequest:
    """The grouping of a box's unmatched events into chains."""
    listed = numbered(events)
    return ChatRequest((("system", SYSTEM), ("user", CHAIN_PROMPT.format(events=listed))),
                       max_tokens=max_tokens)


def parse_chains(text: str, n: int | None) -> list[list[int]]:
    """The new traces from a reply to :func:`chain_request`, as the code builds them: every
    non-empty chain, in order; with no chain, the isolated events together as one; then each
    isolated event no chain used on its own. An event the reply leaves out gets its own trace
    (ours: the code would drop it). An event in two chains stays in both. ``n=None`` checks the
    reply's shape only."""
    value = parse_json_reply(text)
    if not isinstance(value, dict) or not isinstance(value.get("chains", []), list):
        raise StructuredOutputError('expected {"chains": [[...]], "isolated": [...]}')
    chains = [_indices(c, "chains", n) for c in value.get("chains", [])]
    chains = [c for c in chains if c]
    isolated = _indices(value.get("isolated", []), "isolated", n)
    if not chains and not isolated:
        raise StructuredOutputError("the reply groups no event")
    out = chains or [isolated]
    if chains:
        used = {i for c in chains for i in c}
        out += [[i] for i in isolated if i not in used]
    named = {i for c in out for i in c}
    return out + [[i] for i in range(n or 0) if i not in named]
