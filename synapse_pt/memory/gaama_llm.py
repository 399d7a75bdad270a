"""GAAMA's LLM build: facts, concepts and reflections written by a chat model (SPEC §2).

The prompts are ours, written from SPEC's description of GAAMA's public code; they go through the
project's LLM interface, its response cache and :func:`~synapse_pt.models.structured.
generate_structured` (one repair round per garbled reply).

* :func:`chunk_turns`: a conversation's turns in chunks of about ``chunk_tokens`` tokens.
* :func:`fact_requests` / :func:`parse_facts`: per chunk, atomic standalone facts (people named,
  relative dates resolved), each with its source message ids and 1-3 snake_case concepts, and
  1-3 concepts per message. The context holds the concepts already known with similarity >= 0.75
  to the chunk (so labels are reused), the older messages that similar and the facts already
  derived from them (the code's (1 + cos) / 2 scale by default: cos >= 0.5).
* :func:`reflection_requests` / :func:`parse_reflections`: higher-level reflections over groups
  of facts, each citing the facts it follows from.

A reply that still fails after the repair is a counted :class:`GAAMAFailure`, named in the log and
in the memory's ``describe()`` (``extraction_failures``); its chunk contributes no facts, never
an empty success.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from synapse_pt.data.records import Turn
from synapse_pt.data.render import format_date
from synapse_pt.models.llm.base import ChatRequest
from synapse_pt.models.structured import StructuredOutputError, parse_json_reply

SYSTEM = "You build the long-term memory of a conversational agent. You answer with JSON only."

FACT_PROMPT = """Messages of a conversation between {speakers}, each with its id and date:
{messages}
{context}
Write the atomic facts these messages state. Each fact is one standalone sentence that names the
people (never "I", "you" or "we") and turns relative dates ("yesterday", "last week") into dates
from the message date. For each fact give the ids of the messages it comes from and 1-3 topic
concepts: 2-5 word snake_case labels such as pottery_hobby or adoption_agency, never a person's
name (reuse a known concept when it fits). Also give 1-3 concepts for each message id.
Answer with JSON only, in this form:
{{"facts": [{{"fact": "...", "sources": ["D1:3"], "concepts": ["pottery_hobby"]}}],
 "message_concepts": {{"D1:3": ["pottery_hobby"]}}}}"""

REFLECTION_PROMPT = """Facts about {speakers}, numbered:
{facts}

Write at most {max_reflections} reflections: insights about these people that follow from several
of the facts together (a habit, a preference, a change over time), each citing the numbers of the
facts it follows from. Answer with JSON only, in this form:
{{"reflections": [{{"reflection": "...", "facts": [0, 3]}}]}}"""

_LABEL = re.compile(r"^[a-z0-9]+(?:_[a-z0-9]+){0,5}$")


@dataclass(frozen=True)
class GAAMAFailure:
    """A chunk (or fact group) whose reply stayed unreadable after the repair round."""

    stage: str  # "facts" or "reflections"
    sample_id: str
    where: str  # the chunk's first and last message ids, or the fact group
    error: str


@dataclass(frozen=True)
class ExtractedFact:
    text: str
    sources: tuple[str, ...]
    concepts: tuple[str, ...]


#: GAAMA's code counts one token per word of an event's speaker and text (gaama
#: ``services/orchestrator.py``, ``_estimate_event_tokens``:
#: ``len((actor + " " + content).split())``); the 4/3 tokens per word we used before is a rule
#: of thumb of ours, not the code's.
TOKEN_RULES = ("code", "four_thirds")


def chunk_turns(turns: Sequence[Turn], chunk_tokens: int = 500,
                token_rule: str = "code", texts: Sequence[str] | None = None
                ) -> list[list[Turn]]:
    """Consecutive turns in chunks of at most ``chunk_tokens`` tokens (a turn is never split;
    a chunk holds at least one). ``token_rule``: ``"code"`` counts the words of the speaker and
    the turn's episode text (``texts``, aligned with ``turns``; the turn's content when not
    given), as GAAMA's ``_estimate_event_tokens`` counts actor + content
    (``services/orchestrator.py`` 134-137; its content carries the date and the speaker);
    ``"four_thirds"`` 4/3 tokens per word of the text (ours before)."""
    if token_rule not in TOKEN_RULES:
        raise ValueError(f"memory.chunk_token_rule must be one of {TOKEN_RULES}, got "
                         f"{token_rule!r}")
    if texts is not None and len(texts) != len(turns):
        raise ValueError(f"chunk_turns: {len(texts)} texts for {len(turns)} turns")
    chunks: list[list[Turn]] = []
    size = 0.0
    for i, t in enumerate(turns):
        text = t.content if texts is None else texts[i]
        n = (max(1, len(f"{t.speaker} {text}".split())) if token_rule == "code"
             else len(t.content.split()) * 4 / 3)
        if not chunks or size + n > chunk_tokens:
            chunks.append([])
            size = 0.0
        chunks[-1].append(t)
        size += n
    return chunks


def _messages(chunk: Sequence[Turn]) -> str:
    return "\n".join(f"[{t.dia_id}] ({format_date(t)}) {t.speaker}: {t.content}" for t in chunk)


def fact_request(chunk: Sequence[Turn], speakers: str, known_concepts: Sequence[str],
                 older: Sequence[Turn], max_tokens: int,
                 older_facts: Sequence[str] = ()) -> ChatRequest:
    """The fact request of one chunk: its messages, and as context the older messages similar
    to it, the facts already derived from them (``older_facts``, as the code's
    ``existing_facts``) and the known concepts."""
    context = ""
    if older:
        context += "\nEarlier messages, for reference only:\n" + _messages(older) + "\n"
    if older_facts:
        context += ("\nFacts already known from those messages (do not repeat them):\n"
                    + "\n".join(f"- {f}" for f in older_facts) + "\n")
    if known_concepts:
        context += "\nKnown concepts: " + ", ".join(known_concepts) + "\n"
    user = FACT_PROMPT.format(speakers=speakers, messages=_messages(chunk), context=context)
    return ChatRequest((("system", SYSTEM), ("user", user)), max_tokens=max_tokens)


def _labels(values: Any, where: str) -> tuple[str, ...]:
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise StructuredOutputError(f"{where}: concepts must be a list of strings")
    out = []
    for v in values:
        label = re.sub(r"[^a-z0-9]+", "_", v.lower()).strip("_")
        if label and _LABEL.fullmatch(label):
            out.append(label)
    return tuple(dict.fromkeys(out))


def parse_facts(text: str, message_ids: Sequence[str] | None = None
                ) -> tuple[list[ExtractedFact], dict[str, tuple[str, ...]]]:
    """The facts and per-message concepts of a reply to :func:`fact_request`.

    Raises:
        StructuredOutputError: not the requested form, or (given ``message_ids``) a source id
            outside the chunk.
    """
    value = parse_json_reply(text)
    if not isinstance(value, dict) or not isinstance(value.get("facts"), list):
        raise StructuredOutputError('expected {"facts": [...], "message_concepts": {...}}')
    ids = None if message_ids is None else set(message_ids)
    facts = []
    for i, f in enumerate(value["facts"]):
        if not isinstance(f, dict) or not isinstance(f.get("fact"), str) or not f["fact"].strip():
            raise StructuredOutputError(f"fact {i}: needs a non-empty 'fact' string")
        sources = f.get("sources", [])
        if (not isinstance(sources, list) or not sources
                or (ids is not None and not set(map(str, sources)) <= ids)):
            raise StructuredOutputError(f"fact {i}: 'sources' must list ids of the chunk's "
                                        f"messages, got {sources!r}")
        facts.append(ExtractedFact(f["fact"].strip(), tuple(map(str, sources)),
                                   _labels(f.get("concepts", []), f"fact {i}")))
    per_message = value.get("message_concepts", {})
    if not isinstance(per_message, dict):
        raise StructuredOutputError("'message_concepts' must map message ids to concept lists")
    concepts = {str(k): _labels(v, f"message {k}") for k, v in per_message.items()
                if ids is None or str(k) in ids}
    return facts, concepts


def reflection_request(facts: Sequence[str], speakers: str, max_reflections: int,
                       max_tokens: int) -> ChatRequest:
    listed = "\n".join(f"{i}. {f}" for i, f in enumerate(facts))
    user = REFLECTION_PROMPT.format(speakers=speakers, facts=listed,
                                    max_reflections=max_reflections)
    return ChatRequest((("system", SYSTEM), ("user", user)), max_tokens=max_tokens)


def parse_reflections(text: str, n_facts: int | None = None
                      ) -> list[tuple[str, tuple[int, ...]]]:
    """``[(reflection, cited fact numbers)]`` of a reply to :func:`reflection_request`
    (``n_facts`` given: every citation must be one of them)."""
    value = parse_json_reply(text)
    if not isinstance(value, dict) or not isinstance(value.get("reflections"), list):
        raise StructuredOutputError('expected {"reflections": [...]}')
    out = []
    for i, r in enumerate(value["reflections"]):
        if not isinstance(r, dict) or not isinstance(r.get("reflection"), str):
            raise StructuredOutputError(f"reflection {i}: needs a 'reflection' string")
        cited = r.get("facts", [])
        if (not isinstance(cited, list) or not cited
                or not all(isinstance(c, int) and c >= 0 and (n_facts is None or c < n_facts)
                           for c in cited)):
            raise StructuredOutputError(f"reflection {i}: 'facts' must cite the numbers of the "
                                        f"facts listed, got {cited!r}")
        out.append((r["reflection"].strip(), tuple(dict.fromkeys(cited))))
    return out
