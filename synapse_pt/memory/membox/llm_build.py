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

A reply that stays unreadable (asked once where the code asks once, after the repair round where
it is read our way) is a counted :class:`MemboxFailure` (named in the log and in
``describe()["extraction_failures"]``): a failed Topic Loom decision closes the box, a failed box
extraction leaves the box without keywords and events (the code's ``process_new_box``), a failed
verification joins all of the box's events to that trace (as the code's ``_llm_event_filter``),
a failed grouping leaves the events without a trace (the code's ``{}``; ours,
``chain_parse="fenced"``: each its own trace). None is turned into a silent success.

Under ``prompts="upstream"`` (:class:`MemboxPrompts`, the default) the Topic Loom, box
extraction, verification and chain grouping send the code's own prompts, read from Membox's
``membox.py`` at run time (:func:`~synapse_pt.data.upstream.membox_constant`, by attribute name
of its ``class Config``; never pasted here) and rendered as its code renders them: one user
message, no system message, temperature 0, no seed and no budget (the model's own limit), the box
extraction in JSON mode, an empty completion an answer; their replies are read as the code reads
them (:meth:`MemboxPrompts.parse_loom`, :func:`parse_box_code`, :func:`parse_verify_code`,
:func:`chains_of_code`). ``prompts="ours"`` keeps the wordings above.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

from synapse_pt.common.errors import ConfigError
from synapse_pt.data.schema import Turn
from synapse_pt.data.upstream import Template, membox_constant
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
    stage: str  # "loom", "box", "verify" or "chains"
    sample_id: str
    where: str
    error: str


def _line(t: Turn) -> str:
    return f"{t.speaker}: {t.content}"


def loom_request(previous: Sequence[Turn], new: Turn, max_tokens: int = 8) -> ChatRequest:
    user = LOOM_PROMPT.format(previous="\n".join(_line(t) for t in previous), new=_line(new))
    return ChatRequest((("system", SYSTEM), ("user", user)), max_tokens=max_tokens)


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


@dataclass(frozen=True)
class BoxReply:
    """A box extraction read: its keywords, topic and events, and ``events_text`` where the
    reply's events were no list (the code then stores no event but indexes that text,
    ``process_new_box``'s ``else``)."""

    keywords: list[str]
    topic: str
    events: list[str]
    events_text: str | None = None


def parse_box(text: str) -> BoxReply:
    """The keywords, topic and events of a reply to :func:`box_request`. Placeholders copied
    from the prompt's example (``"..."``, no letter or digit) are not values: a reply of nothing
    else is unreadable."""
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
    return BoxReply(keywords, topic.strip(), [e.strip() for e in events if _meaningful(e)])


def numbered(events: Sequence[str]) -> str:
    """Events as the prompts list them, one per line: ``"0. <event>"``."""
    return "\n".join(f"{i}. {e}" for i, e in enumerate(events))


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


def load_reply(text: str, strict: bool) -> object:
    """The JSON value of a reply: ``strict``, the whole reply as ``json.loads`` reads it (the
    code's verification, ``_llm_event_filter``); else :func:`~synapse_pt.models.structured.
    parse_json_reply` (fenced JSON, prose around it)."""
    if not strict:
        return parse_json_reply(text)
    try:
        return json.loads(text)
    except (json.JSONDecodeError, TypeError) as err:
        raise StructuredOutputError(f"not JSON as a whole (json.loads: {err}): "
                                    f"{(text or '')[:80]!r}") from err


def parse_verify(text: str, n: int | None, *, strict: bool = False) -> list[int]:
    """The numbers of the events (of ``n``) that continue the trace. As the code, a reply that
    names no event at all (neither related nor unrelated) joins them all, and an event named
    both related and unrelated is related (its ``if ... in related ... elif ... in
    unrelated``). ``strict``: the reply must be JSON as a whole (:func:`load_reply`).
    ``n=None`` checks the reply's shape only (then "all" is an empty list)."""
    value = load_reply(text, strict)
    if not isinstance(value, dict) or "related" not in value:
        raise StructuredOutputError('expected {"related": [...], "unrelated": [...]}')
    related = _indices(value["related"], "related", n)
    unrelated = _indices(value.get("unrelated", []), "unrelated", n)
    if not related and not unrelated:
        return list(range(n or 0))
    return related


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


# ------------------------------------------------------------------ the code's own prompts
#: where the build's prompts come from (``memory.prompts``)
PROMPT_SOURCES = ("upstream", "ours")
#: how a verification reply is read (``memory.verify_parse``): ``strict``, ``json.loads`` of the
#: whole reply, no repair round (the code's ``_llm_event_filter``); ``fenced``, fenced JSON and
#: prose around it accepted, one repair round (ours)
VERIFY_PARSES = ("strict", "fenced")
#: how a box extraction and a chain grouping reply are read (``memory.box_parse``,
#: ``memory.chain_parse``): ``strict``, the code's (``json.loads`` of the stripped reply, asked
#: once; a box reply that does not parse leaves the box empty, a chain reply that does not parse
#: leaves the events without a trace: ``process_new_box``, ``_llm_init_chain``); ``fenced``,
#: ours (fenced JSON and prose accepted, one repair round, a chain's texts matched to the box's
#: events, the events it leaves out each a trace of their own)
PARSES = ("strict", "fenced")
#: the name a set budget is sent under (``memory.budget_param``; null: ``max_tokens`` for a budget
#: set, none for the code's none)
BUDGET_PARAMS = (None, "max_tokens", "max_completion_tokens")
#: the file the upstream prompts are read from, and the ``class Config`` constant of each step
UPSTREAM_FILE = "membox/membox.py"
UPSTREAM_CONSTANTS = {"loom": "PROMPT_MSG_CONTINUATION", "box": "PROMPT_DIALOG_EXTRACT",
                      "verify": "PROMPT_TRACE_EVENT_FILTER", "chains": "PROMPT_TRACE_INIT"}
#: ``membox.py`` ``LLMWorker.chat_completion`` sets no ``max_tokens``: the model's own completion
#: limit applies, 16,384 tokens for gpt-4o-mini (as the answer step's budget, eval/qa/prompts.py)
UPSTREAM_MAX_TOKENS = 16384
#: our budgets: a box extraction, verification or chain grouping; a Loom decision
OURS_MAX_TOKENS, OURS_LOOM_MAX_TOKENS = 512, 8
#: the code's box extraction asks in JSON mode (``TopicClusterManager.process_new_box``:
#: ``chat_completion(..., json_mode=True)``, ``response_format={"type": "json_object"}``)
JSON_MODE = (("response_format", {"type": "json_object"}),)


def parse_box_code(text: str, *, strict: bool = True) -> BoxReply:
    """A reply to ``PROMPT_DIALOG_EXTRACT``, read as ``TopicClusterManager.process_new_box``
    reads it (``membox.py`` 480-499): ``topic`` a string, ``keywords`` a list (or one string),
    ``explicit_mentions`` the events, each stripped, empty ones left out, a missing key empty;
    events that are no list give no event, their text indexed. ``strict`` (``memory.box_parse=
    strict``, the code's): ``json.loads`` of the stripped reply, and a JSON object without any of
    the three keys is an empty box, as the code keeps it; else (``fenced``, ours) fenced JSON and
    prose around it accepted, and an object without any of the keys unreadable.

    Raises:
        StructuredOutputError: no JSON object (the code keeps the box empty: counted here).
    """
    value = load_reply((text or "").strip(), strict)
    keys = ("keywords", "topic", "explicit_mentions")
    if not isinstance(value, dict) or (not strict and not any(k in value for k in keys)):
        raise StructuredOutputError('expected {"keywords": [...], "topic": "...", '
                                    '"explicit_mentions": [...]}')
    topic = str(value.get("topic", "") or "").strip()
    kws = value.get("keywords", [])
    keywords = ([str(k).strip() for k in kws if str(k).strip()] if isinstance(kws, list)
                else [str(kws).strip()] if str(kws).strip() else [])
    evs = value.get("explicit_mentions", [])
    if isinstance(evs, list):
        return BoxReply(keywords, topic, [str(e).strip() for e in evs if str(e).strip()])
    if strict:
        return BoxReply(keywords, topic, [], str(evs).strip())
    return BoxReply(keywords, topic, [str(evs).strip()] if str(evs).strip() else [])


def parse_verify_code(text: str, events: Sequence[str] | None, *, strict: bool = True
                      ) -> list[int]:
    """The numbers of ``events`` that continue the trace, from a reply to
    ``PROMPT_TRACE_EVENT_FILTER`` read as ``TraceLinker._llm_event_filter`` reads it: the reply's
    ``related_events`` and ``unrelated_events`` hold event texts; each event of the box is
    related when its exact text is in the first (an event in both too, the code's ``if/elif``),
    unrelated when in the second; when no event is either, all are related. ``strict``:
    ``json.loads`` of the whole reply (the code); else fenced JSON. Unreadable (not JSON, not an
    object, lists of the wrong type): :class:`StructuredOutputError`, which the caller turns
    into "all events join", as the code's ``except``. ``events=None``: the shape only."""
    value = load_reply(text, strict)
    if not isinstance(value, dict):
        raise StructuredOutputError('expected {"related_events": [...], "unrelated_events": '
                                    '[...]}')
    if events is None:
        return []
    named = value.get("related_events") or []
    other = value.get("unrelated_events") or []
    related, unrelated = [], []
    try:
        for i, ev in enumerate(events):
            if ev in named:
                related.append(i)
            elif ev in other:
                unrelated.append(i)
    except TypeError as err:  # the code: any exception joins every event
        raise StructuredOutputError(f"related_events / unrelated_events unreadable: {err}"
                                    ) from err
    if not related and not unrelated:
        return list(range(len(events)))
    return related


def _same(text: str) -> str:
    return " ".join(str(text).split()).casefold()


def parse_chains_code(text: str, events: Sequence[str] | None) -> list[list[int]]:
    """The new traces from a reply to ``PROMPT_TRACE_INIT`` read our way (``memory.chain_parse=
    fenced``): the chains as ``TraceLinker.run`` builds them (the ``primary_chain`` when not
    empty, each non-empty ``secondary_chains`` entry, with no chain the ``isolated_events``
    together as one; then each isolated event no chain used on its own), but fenced JSON
    accepted, each text matched to the box's unmatched events (case and spacing aside), a text
    that matches none left out, an event no chain names given its own trace (as
    :func:`parse_chains`). The code's reading: :func:`chains_of_code`. ``events=None`` checks
    the shape only."""
    value = parse_json_reply(text)
    shape = ('expected {"primary_chain": [...], "secondary_chains": [[...]], '
             '"isolated_events": [...]}')
    if not isinstance(value, dict):
        raise StructuredOutputError(shape)
    primary = value.get("primary_chain") or []
    secondary = value.get("secondary_chains") or []
    isolated = value.get("isolated_events") or []
    if (not isinstance(primary, list) or not isinstance(isolated, list)
            or not isinstance(secondary, list)
            or not all(isinstance(c, list) for c in secondary)):
        raise StructuredOutputError(shape)
    chains = [[_same(t) for t in c] for c in ([primary] if primary else []) + secondary if c]
    isolated = [_same(t) for t in isolated]
    if not chains and not isolated:
        raise StructuredOutputError("the reply groups no event")
    if events is None:
        return []
    where: dict[str, list[int]] = {}
    for i, e in enumerate(events):
        where.setdefault(_same(e), []).append(i)

    def ids(texts: list[str]) -> list[int]:
        return list(dict.fromkeys(i for t in texts for i in where.get(t, [])))

    out = [ids(c) for c in chains] or [ids(isolated)]
    if chains:
        used = {t for c in chains for t in c}
        out += [ids([t]) for t in dict.fromkeys(isolated) if t not in used]
    out = [g for g in out if g]
    named = {i for g in out for i in g}
    return out + [[i] for i in range(len(events)) if i not in named]


class _Text:
    """A text hashed by a fixed function (its sha256), so a set of them iterates in the order a
    Python set of the texts would under that hash: the order of the code's ``set`` of event texts
    (whose string hash is salted per process), made the same on every run."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __hash__(self) -> int:
        return int.from_bytes(hashlib.sha256(self.text.encode()).digest()[:8], "big", signed=True)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Text) and other.text == self.text


def set_order(texts: Sequence[str]) -> list[str]:
    """``list(set(texts))`` as the code writes a trace entry's events (``membox.py`` 938), each
    text once, under a fixed string hash (:class:`_Text`): reruns ask the same prompts."""
    return [t.text for t in {_Text(t) for t in texts}]


def _walk(value: object, where: str) -> list:
    """What the code's ``for x in value`` walks: nothing for a false value (its ``... or []``),
    a list's items, a string's characters, a dict's keys.

    Raises:
        StructuredOutputError: a value the code cannot walk (it stops there).
    """
    if not value:
        return []
    if isinstance(value, (list, str, dict)):
        return list(value)
    raise StructuredOutputError(f"{where}: {type(value).__name__} {value!r} is no list "
                                "(the code stops on it)")


def _clean(chain: object, where: str) -> list[str]:
    """A chain's events as ``_create_trace_with_events`` keeps them: each ``str(e).strip()``,
    empty ones left out."""
    return [str(e).strip() for e in _walk(chain, where) if str(e).strip()]


def chains_of_code(text: str) -> list[list[str]]:
    """The new traces' event texts from a reply to ``PROMPT_TRACE_INIT``, as ``TraceLinker``
    reads and builds them (``membox.py`` 832-848, 950-984): ``json.loads`` of the stripped
    reply, ``{}`` when it does not parse (no trace: the box's unmatched events are lost); the
    ``primary_chain`` when not empty, each non-empty ``secondary_chains`` entry, with no chain
    the ``isolated_events`` together as one; then each isolated event no chain holds on its own;
    a chain left empty makes no trace. The texts are the model's, whatever it wrote; an event it
    does not name gets no trace.

    Raises:
        StructuredOutputError: a reply that is JSON but no object, or holds values the code
            stops on (a number for a chain, an unhashable event).
    """
    try:
        value = json.loads((text or "").strip())
    except json.JSONDecodeError:
        return []
    if not isinstance(value, dict):
        raise StructuredOutputError(f"a JSON {type(value).__name__}, not an object (the code "
                                    "stops on it: init_res.get)")
    primary = _walk(value.get("primary_chain"), "primary_chain")
    chains = ([primary] if primary else []) + [
        c for c in _walk(value.get("secondary_chains"), "secondary_chains") if c]
    isolated = _walk(value.get("isolated_events"), "isolated_events")
    if not chains and isolated:
        chains = [isolated]
    out = [_clean(c, "a chain") for c in chains]
    if chains and isolated:
        try:
            used = {e for c in chains for e in _walk(c, "a chain")}
            out += [_clean([e], "isolated_events") for e in isolated if e not in used]
        except TypeError as err:
            raise StructuredOutputError(f"an event the code cannot hash: {err}") from err
    return [c for c in out if c]


class MemboxPrompts:
    """The requests of Membox's LLM build and the readers of their replies, from one source.

    Args:
        source: ``"upstream"`` (the code's prompts, read from ``membox.py`` at
            :data:`~synapse_pt.data.upstream.COMMITS` by name, sha256-checked) or ``"ours"``.
        upstream_path: the folder of the upstream files (``None``: ``$SYNAPSE_UPSTREAM``, then
            beside the checkout, then the cache or a download; :mod:`synapse_pt.data.upstream`).
        max_tokens: completion budget of a box extraction, verification or chain grouping;
            ``None``: the source's (upstream 16,384, the model's own limit as the code
            sets none; ours 512).
        loom_max_tokens: the same for a Topic Loom decision (``None``: upstream 16,384; ours 8).
        verify_parse: :data:`VERIFY_PARSES`.

    Under ``"upstream"`` (``membox.py``, 3d1fa84):

    * Loom: ``PROMPT_MSG_CONTINUATION.format(ref="\\n".join(previous), curr=new)``, each message
      ``"{speaker}: {text}"`` (``MemoryBuilder._process``, ``LLMWorker.check_relation``); the
      reply means "same topic" when it contains ``yes`` in any case, else not (its
      ``"Yes" if "yes" in res.lower() else "No"``): every reply is readable.
    * Box: ``PROMPT_DIALOG_EXTRACT.format(text=content)``, the content as
      ``_get_content_str`` writes it (the box's ``Start:`` header and lines), JSON mode;
      :func:`parse_box_code`.
    * Verification: ``PROMPT_TRACE_EVENT_FILTER.format(content_a=trace or "None",
      content_b=events or "None")``, the trace's ``"{start}: {event}"`` lines and the box's
      events one per line, unnumbered (``_llm_event_filter``); :func:`parse_verify_code`.
    * Chains: ``PROMPT_TRACE_INIT.format(events="\\n".join(events))`` (``_llm_init_chain``);
      :func:`parse_chains_code`.
    """

    def __init__(self, source: str = "upstream", *, upstream_path: str | None = None,
                 max_tokens: int | None = None, loom_max_tokens: int | None = None,
                 verify_parse: str = "strict", box_parse: str | None = None,
                 chain_parse: str | None = None, temperature: float | None = 0.0,
                 seed: int | None = None, budget_param: str | None = None) -> None:
        for key, value, allowed in (("prompts", source, PROMPT_SOURCES),
                                    ("verify_parse", verify_parse, VERIFY_PARSES),
                                    ("box_parse", box_parse, (None, *PARSES)),
                                    ("chain_parse", chain_parse, (None, *PARSES)),
                                    ("budget_param", budget_param, BUDGET_PARAMS)):
            if value not in allowed:
                raise ConfigError(f"memory.{key} must be one of {allowed}, got {value!r}")
        self.source, self.upstream = source, source == "upstream"
        for key, value in (("box_parse", box_parse), ("chain_parse", chain_parse)):
            if value == "strict" and not self.upstream:
                raise ConfigError(f"memory.{key}=strict reads the code's reply form, which "
                                  f"memory.prompts=ours does not ask for: set memory.{key}="
                                  "fenced (or null)")
        self.verify_parse = verify_parse
        self.box_parse = box_parse or ("strict" if self.upstream else "fenced")
        self.chain_parse = chain_parse or ("strict" if self.upstream else "fenced")
        default, loom = ((UPSTREAM_MAX_TOKENS, UPSTREAM_MAX_TOKENS) if self.upstream
                         else (OURS_MAX_TOKENS, OURS_LOOM_MAX_TOKENS))
        self.max_tokens = default if max_tokens is None else int(max_tokens)
        self.loom_max_tokens = loom if loom_max_tokens is None else int(loom_max_tokens)
        # the code sends no budget (LLMWorker.chat_completion): none unless one is set (ours
        # are our prompts' own); a budget_param names it anyway
        sent = budget_param or "max_tokens"
        self.budget_param = {
            "main": budget_param if self.upstream and max_tokens is None else sent,
            "loom": budget_param if self.upstream and loom_max_tokens is None else sent}
        self.temperature, self.seed = temperature, seed
        self.templates: dict[str, Template] = (
            {step: membox_constant(name, upstream_path) for step, name in
             UPSTREAM_CONSTANTS.items()} if self.upstream else {})

    def describe(self) -> dict[str, object]:
        return {"prompts": self.source, "max_tokens": self.max_tokens,
                "loom_max_tokens": self.loom_max_tokens, "verify_parse": self.verify_parse,
                "box_parse": self.box_parse, "chain_parse": self.chain_parse,
                "temperature": self.temperature, "seed": self.seed,
                "budget_param": dict(self.budget_param)}

    def _sampled(self, request: ChatRequest, budget: str = "main") -> ChatRequest:
        """``request`` with the build's sampling and budget name; an empty completion is an
        answer (the code reads it: ``""``, or ``"{}"`` in JSON mode)."""
        return dataclasses.replace(request, temperature=self.temperature, seed=self.seed,
                                   budget_param=self.budget_param[budget], accept_empty=True)

    @property
    def box_rounds(self) -> int:
        """Repair rounds of a box extraction (the code asks once)."""
        return 0 if self.box_parse == "strict" else 1

    @property
    def chain_rounds(self) -> int:
        return 0 if self.chain_parse == "strict" else 1

    @property
    def files(self) -> list[str]:
        """The upstream files the requests read (recorded per run)."""
        return [UPSTREAM_FILE] if self.upstream else []

    def _user(self, text: str, max_tokens: int, extra: tuple = (), budget: str = "main"
              ) -> ChatRequest:
        """The code's request: one user message, no system message, the build's sampling (the
        code's: temperature 0, no seed, no budget)."""
        return self._sampled(ChatRequest((("user", text),), max_tokens=max_tokens, extra=extra),
                             budget)

    # Topic Loom
    def loom_request(self, previous: Sequence[Turn], new: Turn) -> ChatRequest:
        if not self.upstream:
            return self._sampled(loom_request(previous, new, self.loom_max_tokens), "loom")
        line = [f"{t.speaker}: {t.text.strip()}" for t in (*previous, new)]
        return self._user(self.templates["loom"].render(ref="\n".join(line[:-1]), curr=line[-1]),
                          self.loom_max_tokens, budget="loom")

    def parse_loom(self, text: str) -> str:
        if not self.upstream:
            return parse_loom(text)
        return "yes" if "yes" in (text or "").lower() else "no"

    # box extraction
    def box_request(self, lines: Sequence[str], header: str = "") -> ChatRequest:
        """``lines``: the box's stored lines; ``header`` its ``Start:`` line (the code's content
        string; our prompt shows the lines only)."""
        if not self.upstream:
            return self._sampled(box_request(lines, self.max_tokens))
        content = "\n".join([header, *lines] if header else lines)
        return self._user(self.templates["box"].render(text=content), self.max_tokens,
                          JSON_MODE)

    def parse_box(self, text: str) -> BoxReply:
        if not self.upstream:
            return parse_box(text)
        return parse_box_code(text, strict=self.box_parse == "strict")

    # Trace Weaver: verification of one candidate trace
    def verify_request(self, trace_lines: Sequence[str], events: Sequence[str]) -> ChatRequest:
        if not self.upstream:
            return self._sampled(verify_request(trace_lines, events, self.max_tokens))
        return self._user(self.templates["verify"].render(
            content_a="\n".join(trace_lines) or "None", content_b="\n".join(events) or "None"),
            self.max_tokens)

    def verify_shape(self, text: str) -> object:
        """The batch's parse: under ``verify_parse="strict"`` every reply passes (no repair
        round: the code asks once and reads the reply as it is); else the reply's shape."""
        if self.verify_parse == "strict":
            return text
        return self.parse_verify(text, None)

    def parse_verify(self, text: str, events: Sequence[str] | None) -> list[int]:
        """The numbers of ``events`` that continue the trace (``events=None``: the shape)."""
        strict = self.verify_parse == "strict"
        if self.upstream:
            return parse_verify_code(text, events, strict=strict)
        return parse_verify(text, None if events is None else len(events), strict=strict)

    # Trace Weaver: chains of the unmatched events
    def chain_request(self, events: Sequence[str]) -> ChatRequest:
        if not self.upstream:
            return self._sampled(chain_request(events, self.max_tokens))
        return self._user(self.templates["chains"].render(events="\n".join(events)),
                          self.max_tokens)

    def parse_chains(self, text: str, events: Sequence[str] | None) -> list[list[int]]:
        """Ours (``chain_parse="fenced"``): the chains as numbers of ``events``."""
        if self.upstream:
            return parse_chains_code(text, events)
        return parse_chains(text, None if events is None else len(events))

    def chain_shape(self, text: str) -> object:
        """The batch's parse of a chain reply: under ``chain_parse="strict"`` every reply passes
        (asked once, read by :func:`chains_of_code`); else the reply's shape."""
        if self.chain_parse == "strict":
            return text
        return self.parse_chains(text, None)
