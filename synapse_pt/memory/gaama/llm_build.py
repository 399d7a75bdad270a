"""GAAMA's LLM build: facts, concepts and reflections written by a chat model (SPEC §2).

Two prompt sets (``memory.prompts``), both sent through the project's LLM interface, its response
cache and :func:`~synapse_pt.models.structured.generate_structured` (replies read and re-asked as
``memory.replies`` says, :mod:`.replies`), with the build's sampling (``memory.temperature``,
``seed``, ``budget_param``; the code's: none, none, ``max_completion_tokens``):

* ``"upstream"`` (the default): GAAMA's own ``prompts/fact_generation.md`` and
  ``prompts/reflection_generation.md`` read from the pinned files
  (:func:`~synapse_pt.data.upstream.gaama_prompt`, never pasted here), filled as its
  ``services/llm_extractors.py`` fills them: one user message, no system message; lines
  ``[<node id>] [<session date>] <episode text>`` and ``[<node id>] <fact text>``; each section
  cut to its share of 2,000 words (:func:`budget_truncate`), ``(none)`` when empty; the code's
  completion budgets (8,000 and 4,000 tokens). Replies in the form those files ask for
  (``fact_text`` / ``source_episode_ids`` / ``concepts`` with ``concept_label`` /
  ``episode_ids``; ``reflection_text`` / ``source_fact_ids``) are read by
  :func:`parse_upstream_facts` and :func:`parse_upstream_reflections`. Node ids are the code's
  forms made deterministic (so the response cache holds): ``ep-<16 hex>`` of the conversation
  and turn, ``entity-<16 hex>`` of a fact's or reflection's text (its ``canonical_id_entity``).
* ``"ours"``: our wording below (:data:`FACT_PROMPT`, :data:`REFLECTION_PROMPT`) and its parsers.

* :func:`chunk_turns`: a conversation's turns in chunks of about ``chunk_tokens`` tokens.
* :func:`fact_requests` / :func:`parse_facts`: per chunk, atomic standalone facts (people named,
  relative dates resolved), each with its source message ids and 1-3 snake_case concepts, and
  1-3 concepts per message. The context holds the concepts already known with similarity >= 0.75
  to the chunk (so labels are reused), the older messages that similar and the facts already
  derived from them (the code's (1 + cos) / 2 scale by default: cos >= 0.5).
* :func:`reflection_request` / :func:`parse_reflections`: higher-level reflections over each
  chunk's new facts, each citing the facts it follows from.

A cited id outside the request (a fact's message, a reflection's fact) drops that citation only,
the fact or reflection kept (the code's, ``services/ltm_creator.py`` 388-391 and 507-510).

A reply that still fails after the code's retries (or our repair) is a counted
:class:`GAAMAFailure`, named in the log and in the memory's ``describe()``
(``extraction_failures``); its chunk contributes nothing, as the code's fallback of empty lists.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from synapse_pt.data.render import format_date
from synapse_pt.data.schema import Turn
from synapse_pt.models.llm.base import ChatRequest
from synapse_pt.models.structured import StructuredOutputError, parse_json_reply
from synapse_pt.retrieval.dense import cosine_scores

if TYPE_CHECKING:
    from synapse_pt.data.upstream import Template

#: where the build's prompts come from: GAAMA's files (the code's) or our wording
PROMPT_SOURCES = ("upstream", "ours")
#: the upstream prompt files (``gaama/prompts/<name>.md``) of the fact and reflection requests
FACT_FILE, REFLECTION_FILE = "fact_generation", "reflection_generation"
#: the code's completion budgets (``services/llm_extractors.py`` 109 and 246) and ours
UPSTREAM_MAX_TOKENS = {"facts": 8000, "reflections": 4000}
OURS_MAX_TOKENS = 768
#: the code's context cap: 2,000 words, shared by the sections in these minimum shares
#: (``services/llm_extractors.py`` 107, 196-205, 250, 274-278)
CONTEXT_WORDS = 2000
FACT_SHARES = (0.35, 0.25, 0.25, 0.15)  # new episodes, related episodes, facts, concepts
REFLECTION_SHARES = (0.40, 0.30, 0.30)  # new facts, related facts, existing reflections
#: the code's vector searches for a chunk's context: per episode the nearest 10 nodes (older
#: episodes kept) and the nearest 5 (concepts kept); per new fact the nearest 5 (older facts kept)
#: (``services/ltm_creator.py`` 245, 287, 436)
EPISODE_TOP_K, CONCEPT_TOP_K, FACT_TOP_K = 10, 5, 5
NONE_TEXT = "(none)"  # an empty section (services/llm_extractors.py 206-209)

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


def chunk_turns(turns: Sequence[Turn], chunk_tokens: int = 500,
                texts: Sequence[str] | None = None) -> list[list[Turn]]:
    """Consecutive turns in chunks of at most ``chunk_tokens`` tokens (a turn is never split;
    a chunk holds at least one), a turn counting one token per word of its speaker and its
    episode text (``texts``, aligned with ``turns``; the turn's content when not given), as
    GAAMA's ``_estimate_event_tokens`` counts ``len((actor + " " + content).split())``
    (``services/orchestrator.py`` 134-137; its content carries the date and the speaker)."""
    if texts is not None and len(texts) != len(turns):
        raise ValueError(f"chunk_turns: {len(texts)} texts for {len(turns)} turns")
    chunks: list[list[Turn]] = []
    size = 0.0
    for i, t in enumerate(turns):
        text = t.content if texts is None else texts[i]
        n = max(1, len(f"{t.speaker} {text}".split()))
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
    """The facts and per-message concepts of a reply to :func:`fact_request`. Each fact must
    cite at least one message; a source id outside the chunk (given ``message_ids``) is dropped
    (a fact left with none keeps no source).

    Raises:
        StructuredOutputError: not the requested form, or a fact citing no message.
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
        if not isinstance(sources, list) or not sources:
            raise StructuredOutputError(f"fact {i}: 'sources' must list ids of the chunk's "
                                        f"messages, got {sources!r}")
        kept = [str(s) for s in sources if ids is None or str(s) in ids]
        facts.append(ExtractedFact(f["fact"].strip(), tuple(dict.fromkeys(kept)),
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
    """``[(reflection, cited fact numbers)]`` of a reply to :func:`reflection_request`: each
    cites at least one fact by a number >= 0; given ``n_facts``, a number beyond them is
    dropped."""
    value = parse_json_reply(text)
    if not isinstance(value, dict) or not isinstance(value.get("reflections"), list):
        raise StructuredOutputError('expected {"reflections": [...]}')
    out = []
    for i, r in enumerate(value["reflections"]):
        if not isinstance(r, dict) or not isinstance(r.get("reflection"), str):
            raise StructuredOutputError(f"reflection {i}: needs a 'reflection' string")
        cited = r.get("facts", [])

        if not isinstance(cited, list) or not cited or not all(
                isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in cited):
            raise StructuredOutputError(f"reflection {i}: 'facts' must cite the numbers of the "
                                        f"facts listed, got {cited!r}")
        out.append((r["reflection"].strip(), tuple(dict.fromkeys(
            c for c in cited if n_facts is None or c < n_facts))))
    return out



# ------------------------------------------------------------------ GAAMA's own prompts (upstream)

def _hex16(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def episode_id(sample_id: str, dia_id: str) -> str:
    """An episode's node id in the code's form (``ep-`` and 16 hex digits; the code draws them
    at random, here they are a hash of the conversation and turn, so a rebuild asks the same)."""
    return f"ep-{_hex16(f'{sample_id}|{dia_id}')}"


def entity_id(text: str) -> str:
    """A fact's or reflection's node id as the code's ``canonical_id_entity(text, [])`` forms it
    (``infra/id_helpers.py``): ``entity-`` and the first 16 hex digits of the sha256 of
    ``"entity|"`` and the text lower-cased, whitespace collapsed."""
    return f"entity-{_hex16('entity|' + ' '.join(text.strip().lower().split()))}"


def episode_line(node_id: str, session_date: str, content: str) -> str:
    """An episode as the code lists it: ``[<id>] [<session date string>] <content>`` (the content
    already starts with the date under ``episode_text=code``, as the code's does)."""
    return f"[{node_id}] [{session_date}] {content.strip()}"


def node_line(node_id: str, text: str) -> str:
    """A fact or reflection as the code lists it: ``[<id>] <text>``."""
    return f"[{node_id}] {text}"


def budget_truncate(sections: Sequence[tuple[Sequence[str], float]], max_words: int
                    ) -> list[list[str]]:
    """The code's context cut (``services/llm_extractors.py``, ``_budget_truncate``), our code:
    first each section keeps its leading lines while they fit in its ``share`` of ``max_words``
    (words: whitespace-split), then, section by section, further lines while the words left
    over from all sections allow (each section stops at its first line that does not fit)."""
    words = [[len(line.split()) for line in lines] for lines, _ in sections]
    kept = [0] * len(sections)
    left = max_words
    for s, (lines, share) in enumerate(sections):
        budget, used = int(max_words * share), 0
        while kept[s] < len(lines) and used + words[s][kept[s]] <= budget:
            used += words[s][kept[s]]
            kept[s] += 1
        left -= used
    for s, (lines, _) in enumerate(sections):
        while kept[s] < len(lines) and words[s][kept[s]] <= left:
            left -= words[s][kept[s]]
            kept[s] += 1
    return [list(lines[:k]) for (lines, _), k in zip(sections, kept, strict=True)]


def _section(lines: Sequence[str]) -> str:
    return "\n".join(lines) if lines else NONE_TEXT


def _request(user: str, max_tokens: int, sampling: Mapping[str, Any]) -> ChatRequest:
    """One user message, no system message, the build's sampling (``temperature``, ``seed``,
    ``budget_param``; the code's: none, none, ``max_completion_tokens``,
    ``adapters/openai_llm.py`` 51-57); an empty completion is an answer, as the code reads it."""
    return ChatRequest((("user", user),), max_tokens=max_tokens, accept_empty=True, **sampling)


def upstream_fact_request(template: Template, new_episodes: Sequence[str],
                          related_episodes: Sequence[str], existing_facts: Sequence[str],
                          existing_concepts: Sequence[str], max_tokens: int,
                          sampling: Mapping[str, Any] | None = None) -> ChatRequest:
    """The code's fact request: ``fact_generation.md`` filled with the four sections (lines as
    :func:`episode_line` / :func:`node_line` write them, concepts their labels), each cut by
    :func:`budget_truncate`; one user message, no system message."""
    new, related, facts, concepts = budget_truncate(
        list(zip((new_episodes, related_episodes, existing_facts, existing_concepts),
                 FACT_SHARES, strict=True)), CONTEXT_WORDS)
    user = template.render(new_episodes=_section(new), related_episodes=_section(related),
                           existing_facts=_section(facts), existing_concepts=_section(concepts))
    return _request(user, max_tokens, sampling or {})


def upstream_reflection_request(template: Template, new_facts: Sequence[str],
                                related_facts: Sequence[str],
                                existing_reflections: Sequence[str], max_tokens: int,
                                sampling: Mapping[str, Any] | None = None) -> ChatRequest:
    """The code's reflection request: ``reflection_generation.md`` filled with the three
    sections (:func:`node_line`), cut by :func:`budget_truncate`; one user message."""
    new, related, reflections = budget_truncate(
        list(zip((new_facts, related_facts, existing_reflections), REFLECTION_SHARES,
                 strict=True)), CONTEXT_WORDS)
    user = template.render(new_facts=_section(new), related_facts=_section(related),
                           existing_reflections=_section(reflections))
    return _request(user, max_tokens, sampling or {})


def _items(value: Any, where: str) -> list[Any]:
    """What the code's ``for x in value`` walks: a list's items, a string's characters, a dict's
    keys; none for a missing or null value (where the code would stop: an empty list here).

    Raises:
        StructuredOutputError: a value no loop walks (a number).
    """
    if value is None:
        return []
    if isinstance(value, (list, str, dict)):
        return list(value)
    raise StructuredOutputError(f"{where} must be a list, got {value!r}")


def _known(value: Any, ids: Collection[str]) -> bool:
    """Whether a cited value is one of the request's ids (an id is a string)."""
    return isinstance(value, str) and value in ids


def _objects(value: Any, where: str) -> list[dict]:
    """The items of a reply's list of objects (an item that is no object stops the code's
    reader: unreadable here)."""
    items = _items(value, where)
    if not all(isinstance(v, dict) for v in items):
        raise StructuredOutputError(f"'{where}' must be a list of objects")
    return items


@dataclass(frozen=True)
class UpstreamFacts:
    """A fact reply read as the code reads it (``services/ltm_creator.py`` 310-401), in reply
    order, repeats kept (each makes its own edge there): ``concepts`` every concept item with a
    label, ``(label, the chunk's episodes it names)``; ``facts`` every fact with text, its
    ``sources`` the chunk's episodes it names and its ``concepts`` the labels known to the
    request (shown, or one of the reply's)."""

    facts: list[ExtractedFact]
    concepts: list[tuple[str, tuple[str, ...]]]


def parse_upstream_facts(text: str, ids: Mapping[str, str] | None = None,
                         known: Collection[str] = (), *, code: bool = True) -> UpstreamFacts:
    """A reply to :func:`upstream_fact_request`: a concept label stripped and lower-cased,
    linked to the chunk's episodes it names (``ids``: the id shown -> the turn's ``dia_id``; an
    id outside the chunk dropped); a fact without text skipped; its ``source_episode_ids``
    mapped through ``ids``; its concepts kept where the label is a known one (``known``, the
    concepts shown) or one of the reply's. ``belief`` is not used (the graph has no belief).

    ``code`` (``memory.replies=code``): read as the code reads it, the reply loaded by
    :func:`~.replies.load_first` (an empty reply or one without ``facts`` is nothing extracted).
    Else ours: :func:`~synapse_pt.models.structured.parse_json_reply`, and a reply without a
    ``facts`` list is unreadable.

    Raises:
        StructuredOutputError: not the form the code can read.
    """
    from .replies import load_first

    value = load_first(text) if code else parse_json_reply(text)
    if not code and (not isinstance(value, dict) or not isinstance(value.get("facts"), list)):
        raise StructuredOutputError('expected {"facts": [...], "concepts": [...]}')
    if not isinstance(value, dict):
        raise StructuredOutputError('expected {"facts": [...], "concepts": [...]}')
    labels = set(known)
    concepts = []
    for i, item in enumerate(_objects(value.get("concepts"), "concepts")):
        label = str(item.get("concept_label", "")).strip().lower()
        if not label:
            continue
        labels.add(label)
        linked = [ep for ep in _items(item.get("episode_ids"), f"concept {i}: 'episode_ids'")
                  if ids is None or _known(ep, ids)]  # the code links only the chunk's episodes
        concepts.append((label, tuple(ids[ep] if ids is not None else str(ep) for ep in linked)))
    facts = []
    for i, item in enumerate(_objects(value.get("facts"), "facts")):
        fact_text = str(item.get("fact_text", "")).strip()
        if not fact_text:
            continue
        where = f"fact {i}: 'source_episode_ids'"
        sources = [s for s in _items(item.get("source_episode_ids"), where)
                   if ids is None or _known(s, ids)]
        named = [str(c).strip().lower()
                 for c in _items(item.get("concepts"), f"fact {i}: 'concepts'")]
        facts.append(ExtractedFact(fact_text, tuple(ids[s] if ids is not None else str(s)
                                                    for s in sources),
                                   tuple(c for c in named if c in labels)))
    return UpstreamFacts(facts, concepts)


def parse_upstream_reflections(text: str, ids: Collection[str] | None = None, *,
                               code: bool = True) -> list[tuple[str, tuple[str, ...]]]:
    """``[(reflection, the new facts' ids it cites)]`` of a reply to
    :func:`upstream_reflection_request`, read as the code reads it (``services/ltm_creator.py``
    481-510): a reflection without text skipped; ``source_fact_ids`` kept where one of ``ids``
    (the new facts' ids: the code links only those, so a fact shown as context counts as outside
    the request), repeats kept. ``code``: as :func:`parse_upstream_facts`."""
    from .replies import load_first

    value = load_first(text) if code else parse_json_reply(text)
    if not isinstance(value, dict) or (
            not code and not isinstance(value.get("reflections"), list)):
        raise StructuredOutputError('expected {"reflections": [...]}')
    out = []
    for i, item in enumerate(_objects(value.get("reflections"), "reflections")):
        reflection = str(item.get("reflection_text", "")).strip()
        if not reflection:
            continue
        cited = _items(item.get("source_fact_ids"), f"reflection {i}: 'source_fact_ids'")
        out.append((reflection, tuple(c for c in cited if ids is None or _known(c, ids))))
    return out


class VectorStore:
    """The code's one vector store (``adapters/sqlite_vector.py``) while it builds: a row per
    node key (``(kind, node id)``: an episode, or a concept, fact or reflection keyed by its text,
    as ``canonical_id_entity``), tagged with the conversation that wrote it last. A node enters
    when the code embeds it (a chunk's episodes before its facts are asked for, then its concepts
    and facts, then its reflections); a key written again leaves its old row and takes a new one
    at the end, with the conversation and text of the new write (the code deletes the entity's
    rows and inserts one for the new node's scope, 96-146). :meth:`search` takes the
    ``max(2 top_k, 20)`` nearest rows of the whole store, keeps the conversation's, the nearest
    ``top_k`` of those (178-238; ties: the earlier row)."""

    def __init__(self) -> None:
        self.keys: list[tuple[str, str] | None] = []  # None: a row left by a later write
        self.owner: list[tuple[str, int]] = []  # (conversation, node) of each row
        self.row: dict[tuple[str, str], int] = {}
        self.emb: torch.Tensor | None = None

    def add(self, conversation: str, entries: Sequence[tuple[tuple[str, str], int]],
            emb: torch.Tensor) -> None:
        """Write ``entries`` (``(key, node)``, in order) with their embeddings ``[n, d]``."""
        if not entries:
            return
        for key, node in entries:
            if key in self.row:
                self.keys[self.row[key]] = None
            self.row[key] = len(self.keys)
            self.keys.append(key)
            self.owner.append((conversation, node))
        self.emb = emb if self.emb is None else torch.cat([self.emb, emb.to(self.emb)])

    def stored(self, conversation: str, n_nodes: int) -> list[bool]:
        """Per node of ``conversation``'s graph: whether a row of the store is its own (a node
        whose key a later conversation wrote again is no longer found by a vector search)."""
        mine = [False] * n_nodes
        for key, (conv, node) in zip(self.keys, self.owner, strict=True):
            if key is not None and conv == conversation:
                mine[node] = True
        return mine

    def search(self, conversation: str, queries: torch.Tensor, top_k: int, similarity: Any
               ) -> list[list[tuple[int, float]]]:
        """Per query row ``[(node, similarity)]`` of ``conversation``'s nodes, nearest first;
        ``similarity`` maps a cosine tensor to the memory's scale."""
        if self.emb is None:
            return [[] for _ in range(len(queries))]
        live = torch.tensor([k is not None for k in self.keys])
        sim = similarity(cosine_scores(self.emb, queries.to(self.emb)).double())  # [rows, m]
        sim = sim.masked_fill(~live[:, None], float("-inf"))
        k = min(max(2 * top_k, 20), int(live.sum()))
        order = sim.sort(dim=0, descending=True, stable=True).indices[:k]
        out = []
        for j in range(sim.shape[1]):
            hits = [(self.owner[r][1], float(sim[r, j])) for r in order[:, j].tolist()
                    if self.owner[r][0] == conversation]
            out.append(hits[:top_k])
        return out


def related(hits: Sequence[Sequence[tuple[int, float]]], kinds: Sequence[str], kind: str,
            threshold: float, exclude: Collection[int] = ()) -> list[int]:
    """The code's context filter over per-query search hits (``services/ltm_creator.py``
    240-256, 282-297, 431-446): in query order, then rank order, the nodes of ``kind`` with
    similarity >= ``threshold``, each once, ``exclude`` (the chunk's own episodes, the new
    facts) left out."""
    seen, out = set(exclude), []
    for row in hits:
        for node, sim in row:
            if node in seen or kinds[node] != kind or sim < threshold:
                continue
            out.append(node)
            seen.add(node)
    return out
