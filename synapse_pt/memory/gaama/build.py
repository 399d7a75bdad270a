"""GAAMA's LLM build (``extractor=llm llm=...``, ``gaama-llm`` in every result row), as the code's
``evals/locomo/run_create_ltm.py`` path builds (gaama 2d992f7): each conversation in turn, its
chunks of about 500 tokens one after another (:mod:`.llm_build` holds the requests and
readers), into ONE vector store shared by every conversation (:class:`.llm_build.VectorStore`).

Per chunk (``services/ltm_creator.py``): its episodes enter the store; its context is found per
new episode by a store search (the nearest 10 rows for older episodes, 5 for concepts, at
similarity >= ``context_cosine`` on the code's (1 + cos) / 2 scale), the facts already derived
from those episodes listed in node-id order (``get_nodes`` of a SQLite primary key,
``adapters/sqlite_memory.py`` 333-343); one fact request; then, when the chunk gave facts, one
reflection request over them (context: each new fact's nearest 5 rows, and the reflections drawn
from those facts, in node-id order).

The reply makes nodes as the code does (``ltm_creator.py`` 310-409, 481-518): every concept item
with a label becomes a node (its text the label, as the code embeds it), linked or not; a fact or
reflection is keyed by its text (``canonical_id_entity``: lower-cased, spaces collapsed), so a
repeat, in one reply or a later chunk, is the same node, with the repeat's text and every edge of
both; repeated citations make repeated edges; no cap on concepts. A key a later conversation
writes again moves its store row there (:meth:`.llm_build.VectorStore.stored`: what a vector
search of the earlier conversation no longer finds).

A reply read as ``memory.replies`` says (:mod:`.replies`); one that stays unreadable is a
counted :class:`.llm_build.GAAMAFailure` (under ``"code"`` the code's fallback, nothing
extracted, named as such).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from synapse_pt.data.schema import Dialogue, Turn
from synapse_pt.data.upstream import gaama_prompt
from synapse_pt.models.base import TextEncoder
from synapse_pt.models.llm.base import LLM, ChatRequest
from synapse_pt.models.structured import StructuredResult, generate_structured, recheck

from .graph import CONCEPT, EDGE_TYPES, EPISODE, FACT, REFLECTION, GraphBuilder, episodes
from .llm_build import (
    CONCEPT_TOP_K,
    EPISODE_TOP_K,
    FACT_FILE,
    FACT_TOP_K,
    OURS_MAX_TOKENS,
    REFLECTION_FILE,
    UPSTREAM_MAX_TOKENS,
    ExtractedFact,
    GAAMAFailure,
    UpstreamFacts,
    VectorStore,
    chunk_turns,
    entity_id,
    episode_id,
    episode_line,
    fact_request,
    node_line,
    parse_facts,
    parse_reflections,
    parse_upstream_facts,
    parse_upstream_reflections,
    reflection_request,
    related,
    upstream_fact_request,
    upstream_reflection_request,
)
from .replies import RETRIES, RETRY_FILE, CodeRetry, load_first, load_retry
from .retrieval import code_similarity
from .settings import Build

log = logging.getLogger(__name__)


@dataclass
class _Conversation:
    """One conversation while it is built: its graph, turns, episode nodes and the node of each
    key (``(kind, node id)``, :meth:`.llm_build.VectorStore.add`)."""

    d: Dialogue
    g: GraphBuilder
    turns: list[Turn]
    episodes: list[int]
    node_of_key: dict[tuple[str, str], int] = field(default_factory=dict)

    @property
    def sample_id(self) -> str:
        return self.d.sample_id

    def episode_of(self, dia_id: str) -> int:
        return self.episodes[[t.dia_id for t in self.turns].index(dia_id)]


class LLMBuild:
    """The LLM build of one memory: its model, encoder and :class:`~.settings.Build`; the upstream
    prompt files are read (sha256-checked) here, before anything is built. Counts its requests
    (``extraction_attempts``) and its :attr:`failures`; holds the vector store every
    conversation is built into (:attr:`store`)."""

    def __init__(self, llm: LLM, encoder: TextEncoder, settings: Build) -> None:
        self.llm, self.encoder, self.s = llm, encoder, settings
        self.upstream = settings.prompts == "upstream"
        budgets = (UPSTREAM_MAX_TOKENS if self.upstream
                   else {"facts": OURS_MAX_TOKENS, "reflections": OURS_MAX_TOKENS})
        self.max_tokens = {k: v if settings.max_tokens is None else settings.max_tokens
                           for k, v in budgets.items()}
        self.templates = ({name: gaama_prompt(name, settings.upstream_path)
                           for name in (FACT_FILE, REFLECTION_FILE)} if self.upstream else {})
        self.code_replies = settings.reply_reading == "code"
        self.retries = {kind: CodeRetry(kind, settings.upstream_path)
                        for kind in ("facts", "reflections")} if self.code_replies else {}
        self.failures: list[GAAMAFailure] = []
        self.extraction_attempts = 0  # extraction requests (facts, reflections) sent
        self.empty_replies = 0  # empty completions read as nothing extracted (replies="code")
        self.store = VectorStore()

    @property
    def files(self) -> list[str]:
        """The upstream files the build read (the retry texts once a retry was asked)."""
        read = [t.source.rel for t in self.templates.values()]
        if any(r.texts is not None for r in self.retries.values()):
            read.append(RETRY_FILE)
        return read

    def describe(self) -> dict[str, Any]:
        return {"prompts": self.s.prompts, "replies": self.s.reply_reading,
                "temperature": self.s.temperature, "seed": self.s.seed,
                "budget_param": self.s.budget_param,
                "max_tokens": dict(self.max_tokens), "empty_replies": self.empty_replies}

    def graphs(self, dialogues: Sequence[Dialogue]) -> list[GraphBuilder]:
        """Each conversation's graph, the conversations one after another (the code builds one
        before the next, into one store), each chunk's reflections after its facts."""
        return [self._conversation(d) for d in dialogues]

    def _conversation(self, d: Dialogue) -> GraphBuilder:
        g, turns, nodes = episodes(d)
        conv = _Conversation(d, g, turns, nodes)
        chunks = chunk_turns(turns, self.s.chunk_tokens, texts=[g.text[e] for e in nodes])
        for chunk in chunks:
            mine = [conv.episode_of(t.dia_id) for t in chunk]
            # a chunk's episodes enter the store before its facts are asked for (the code
            # embeds them first, services/ltm_creator.py 133)
            query = self._write(conv, [((EPISODE, episode_id(d.sample_id, g.covers[e][0])), e,
                                        g.text[e]) for e in mine])
            request, ids, known = self._fact_job(conv, chunk, mine, query)
            (res,) = self._ask([request], "facts")
            self._note_empty(res, "facts", d.sample_id, f"{chunk[0].dia_id}..{chunk[-1].dia_id}")
            new_facts = self._add_facts(conv, chunk, ids, known, res)
            if new_facts:
                self._reflect(conv, new_facts)
        return g

    # ------------------------------------------------------------------------------ helpers
    def _write(self, conv: _Conversation, entries: Sequence[tuple[tuple[str, str], int, str]]
               ) -> torch.Tensor:
        """Enter ``(key, node, text embedded)`` entries into the store, in order (one encoder
        call); their embeddings ``[n, d]`` (a search's queries are the texts it embeds)."""
        if not entries:
            return torch.empty(0)
        emb = self.encoder.encode([text for _, _, text in entries])
        self.store.add(conv.sample_id, [(key, node) for key, node, _ in entries], emb)
        return emb

    def _ask(self, requests: list[ChatRequest], kind: str) -> list[StructuredResult]:
        """The requests in one batch, read and re-asked as ``replies`` says; counted."""
        self.extraction_attempts += len(requests)
        if self.code_replies:
            return generate_structured(self.llm, requests, parse=load_first,
                                       repair=self.retries[kind], rounds=RETRIES,
                                       repair_parse=load_retry)
        if not self.upstream:
            return generate_structured(self.llm, requests,
                                       parse=parse_facts if kind == "facts" else parse_reflections)
        parse = parse_upstream_facts if kind == "facts" else parse_upstream_reflections
        return generate_structured(self.llm, requests,
                                   parse=lambda text: parse(text, code=False))

    def _fact_job(self, conv: _Conversation, chunk: list[Turn], mine: list[int],
                  query: torch.Tensor) -> tuple[ChatRequest, dict[str, str], tuple[str, ...]]:
        """``(request, {id shown: dia_id}, concept labels shown)`` of one chunk: its context by
        the code's vector search (services/ltm_creator.py 237-297), its prompt by ``prompts``."""
        d, g = conv.d, conv.g
        turn_of = dict(zip(conv.episodes, conv.turns, strict=True))
        label_of = {c: label for label, c in g.concepts.items()}
        search = self.store.search
        older = related(search(d.sample_id, query, EPISODE_TOP_K, code_similarity), g.kind,
                        EPISODE, self.s.context_cosine, exclude=mine)
        concepts = related(search(d.sample_id, query, CONCEPT_TOP_K, code_similarity), g.kind,
                           CONCEPT, self.s.context_cosine)
        # the facts already derived from those older messages (services/ltm_creator.py
        # 258-277, "existing_facts"), in node-id order (get_nodes: sqlite_memory.py 333-343)
        older_ids = {turn_of[e].dia_id for e in older}
        facts = sorted((f for f, k in enumerate(g.kind)
                        if k == FACT and older_ids.intersection(g.covers[f])),
                       key=lambda f: entity_id(g.text[f]))
        known = tuple(label_of[c] for c in concepts)
        if self.upstream:  # services/llm_extractors.py 173-216
            date = {t.dia_id: s.date_time_raw or "" for s in d.sessions for t in s.turns}

            def line(e: int) -> str:
                t = turn_of[e]
                return episode_line(episode_id(d.sample_id, t.dia_id), date[t.dia_id], g.text[e])

            request = upstream_fact_request(
                self.templates[FACT_FILE], [line(e) for e in mine], [line(e) for e in older],
                [node_line(entity_id(g.text[f]), g.text[f]) for f in facts], known,
                self.max_tokens["facts"], self.s.sampling)
            ids = {episode_id(d.sample_id, t.dia_id): t.dia_id for t in chunk}
        else:
            request = fact_request(chunk, f"{d.speaker_a} and {d.speaker_b}", known,
                                   [turn_of[e] for e in older], self.max_tokens["facts"],
                                   older_facts=[g.text[f] for f in facts])
            request = ChatRequest(request.messages, max_tokens=request.max_tokens,
                                  accept_empty=True, **self.s.sampling)
            ids = {t.dia_id: t.dia_id for t in chunk}
        return request, ids, known

    def _read_facts(self, res: StructuredResult, ids: Mapping[str, str],
                    known: Sequence[str]) -> UpstreamFacts | None:
        if self.upstream:
            return recheck(res, parse_upstream_facts, ids, known, code=self.code_replies)
        parsed = recheck(res, parse_facts, list(ids))
        if parsed is None:
            return None
        facts, per_message = parsed
        return UpstreamFacts(facts, [(label, (dia_id,)) for dia_id, labels in per_message.items()
                                     for label in labels])

    def _add_facts(self, conv: _Conversation, chunk: list[Turn], ids: Mapping[str, str],
                   known: Sequence[str], res: StructuredResult) -> list[tuple[int, str]]:
        """The reply's concepts and facts into the graph and the store, as the code makes them
        (module docstring); returns the new facts, ``(node, text)`` in reply order, repeats
        kept (the code's ``new_fact_nodes``)."""
        g = conv.g
        where = f"{chunk[0].dia_id}..{chunk[-1].dia_id}"
        parsed = self._read_facts(res, ids, known)
        if parsed is None:
            self._fail("facts", conv.sample_id, where, res)
            return []
        # concepts first (ltm_creator.py 314-356): a label shown or made earlier in this reply
        # gets edges only; any other makes a concept node (a label the graph has already names
        # the same node, written to the store again)
        made = set(known)
        written: list[tuple[tuple[str, str], int, str]] = []
        for label, dia_ids in parsed.concepts:
            c = g.concept(label, text=label)
            assert c is not None
            if label not in made:
                made.add(label)
                written.append(((CONCEPT, entity_id(label)), c, label))
            for dia_id in dia_ids:
                g.link(conv.episode_of(dia_id), c, "HAS_CONCEPT")
        stamp_of = {t.dia_id: t.timestamp for t in conv.turns}
        new: list[tuple[int, str]] = []
        for fact in parsed.facts:  # ltm_creator.py 358-401
            # a fact whose every source was dropped keeps its chunk's date
            f = self._keyed(conv, FACT, fact, stamp_of[fact.sources[0]] if fact.sources
                            else chunk[0].timestamp)
            for dia_id in fact.sources:
                g.link(f, conv.episode_of(dia_id), "DERIVED_FROM")
            for label in fact.concepts:  # a label shown or of this reply: a node by now
                g.link(f, g.concepts[label], "ABOUT_CONCEPT")
            new.append((f, fact.text))
            written.append(((FACT, entity_id(fact.text)), f, fact.text))
        self._write(conv, written)
        return new

    def _keyed(self, conv: _Conversation, kind: str, item: ExtractedFact | tuple[str, tuple],
               stamp: Any) -> int:
        """The node of a fact or reflection keyed by its text: made on first sight; a repeat
        takes the repeat's text and adds the turns it covers."""
        text, covers = ((item.text, item.sources) if isinstance(item, ExtractedFact) else item)
        key = (kind, entity_id(text))
        g = conv.g
        if key not in conv.node_of_key:
            conv.node_of_key[key] = g.node(kind, text, tuple(dict.fromkeys(covers)), stamp)
            return conv.node_of_key[key]
        node = conv.node_of_key[key]
        g.text[node] = text
        g.covers[node] = tuple(dict.fromkeys((*g.covers[node], *covers)))
        return node

    def _reflect(self, conv: _Conversation, new_facts: list[tuple[int, str]]) -> None:
        """One reflection request over a chunk's new facts. Under ``prompts="upstream"`` the
        code's context: the older facts of similarity >= the context threshold among each new
        fact's 5 nearest rows, and the reflections drawn from those or the new facts, in node-id
        order (services/ltm_creator.py 428-467)."""
        d, g = conv.d, conv.g
        facts = [f for f, _ in new_facts]
        if self.upstream:
            query = self.encoder.encode([text for _, text in new_facts])
            hits = self.store.search(d.sample_id, query, FACT_TOP_K, code_similarity)
            near = related(hits, g.kind, FACT, self.s.context_cosine, exclude=facts)
            derived = EDGE_TYPES.index("DERIVED_FROM_FACT")
            shown = set(facts) | set(near)
            drawn = sorted({a for a, b, t in g.edges if t == derived
                            and g.kind[a] == REFLECTION and b in shown},
                           key=lambda x: entity_id(g.text[x]))
            request = upstream_reflection_request(
                self.templates[REFLECTION_FILE],
                [node_line(entity_id(text), text) for _, text in new_facts],
                [node_line(entity_id(g.text[f]), g.text[f]) for f in near],
                [node_line(entity_id(g.text[x]), g.text[x]) for x in drawn],
                self.max_tokens["reflections"], self.s.sampling)
            cite: Any = {entity_id(text): f for f, text in new_facts}
        else:
            ours = reflection_request([g.text[f] for f in facts],
                                      f"{d.speaker_a} and {d.speaker_b}",
                                      self.s.reflections_per_group, self.max_tokens["reflections"])
            request = ChatRequest(ours.messages, max_tokens=ours.max_tokens, accept_empty=True,
                                  **self.s.sampling)
            cite = None
        (res,) = self._ask([request], "reflections")
        self._note_empty(res, "reflections", d.sample_id, f"after {g.covers[facts[0]]}")
        if self.upstream:
            parsed = recheck(res, parse_upstream_reflections, cite, code=self.code_replies)
            reflections = None if parsed is None else [
                (text, [cite[c] for c in cited]) for text, cited in parsed]
        else:
            parsed = recheck(res, parse_reflections, len(facts))
            reflections = None if parsed is None else [
                (text, [facts[c] for c in cited]) for text, cited in parsed]
        if reflections is None:
            turns = [t for f in facts for t in g.covers[f]]
            where = (f"facts {turns[0]}..{turns[-1]}" if turns
                     else f"facts of nodes {facts[0]}..{facts[-1]}")
            self._fail("reflections", d.sample_id, where, res)
            return
        written = []
        for text, cited in reflections:  # ltm_creator.py 481-518
            covers = tuple(t for f in cited for t in g.covers[f])
            # one citing no fact of the request keeps the group's date
            node = self._keyed(conv, REFLECTION, (text, covers),
                               max(g.stamp[f] for f in cited or facts))
            for f in cited:
                g.link(node, f, "DERIVED_FROM_FACT")
            written.append(((REFLECTION, entity_id(text)), node, text))
        self._write(conv, written)

    def _note_empty(self, res: StructuredResult, stage: str, sample_id: str, where: str
                    ) -> None:
        """An empty completion read as nothing extracted (the code's reading,
        ``services/llm_extractors.py`` 223-225): counted in ``empty_replies`` and logged."""
        if self.code_replies and res.ok and not res.responses[-1].text.strip():
            self.empty_replies += 1
            log.warning("gaama %s request for %s %s: an empty completion, read as nothing "
                        "extracted as the code reads it (counted in empty_replies)", stage,
                        sample_id, where)

    def _fail(self, stage: str, sample_id: str, where: str, res: StructuredResult) -> None:
        error = res.error or "unreadable reply"
        if self.code_replies and len(res.responses) > 1:
            error = (f"{error}; the code's fallback after its {RETRIES} retries: nothing "
                     "extracted (services/llm_extractors.py 92-98)")
        failure = GAAMAFailure(stage, sample_id, where, error)
        self.failures.append(failure)
        log.warning("gaama %s extraction failed for %s %s (counted in extraction_failures): %s",
                    stage, sample_id, where, error)
