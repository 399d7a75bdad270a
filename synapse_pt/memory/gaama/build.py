"""GAAMA's LLM build (``extractor=llm llm=...``, ``gaama-llm`` in every result row): facts,
concepts and reflections written by the model over chunks of about 500 tokens
(:mod:`.llm_build` holds the requests and readers). Each chunk's context is the known concepts and
older messages of similarity >= ``context_cosine`` on the code's (1 + cos) / 2 scale, found by a
vector search per new episode, and the facts already derived from those messages; facts cover the
messages they cite, reflections the facts they cite, a citation outside the request losing only
that edge; each chunk's reflections follow its facts (all the code's).
A reply still unreadable after the repair round is a counted :class:`.llm_build.GAAMAFailure`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from synapse_pt.data.records import Dialogue, Turn
from synapse_pt.data.upstream import gaama_prompt
from synapse_pt.models.base import TextEncoder
from synapse_pt.models.llm.base import LLM
from synapse_pt.models.structured import generate_structured, recheck

from .graph import CONCEPT, EDGE_TYPES, EPISODE, FACT, REFLECTION, GraphBuilder, episodes
from .llm_build import (
    CONCEPT_TOP_K,
    EPISODE_TOP_K,
    FACT_FILE,
    FACT_TOP_K,
    OURS_MAX_TOKENS,
    REFLECTION_FILE,
    UPSTREAM_MAX_TOKENS,
    GAAMAFailure,
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
from .retrieval import code_similarity
from .settings import Build

log = logging.getLogger(__name__)


class LLMBuild:
    """The LLM build of one memory: its model, encoder and :class:`~.settings.Build`; the upstream
    prompt files are read (sha256-checked) here, before anything is built. Counts its requests
    (``extraction_attempts``) and its :attr:`failures`."""

    def __init__(self, llm: LLM, encoder: TextEncoder, settings: Build) -> None:
        self.llm, self.encoder, self.s = llm, encoder, settings
        budgets = (UPSTREAM_MAX_TOKENS if settings.prompts == "upstream"
                   else {"facts": OURS_MAX_TOKENS, "reflections": OURS_MAX_TOKENS})
        self.max_tokens = {k: v if settings.max_tokens is None else settings.max_tokens
                           for k, v in budgets.items()}
        self.templates = ({name: gaama_prompt(name, settings.upstream_path)
                           for name in (FACT_FILE, REFLECTION_FILE)}
                          if settings.prompts == "upstream" else {})
        self.failures: list[GAAMAFailure] = []
        self.extraction_attempts = 0  # extraction requests (facts, reflections) sent

    def graphs(self, dialogues: Sequence[Dialogue]) -> list[GraphBuilder]:
        """Each conversation's graph: chunk ``r`` of every conversation in one batch, so each
        chunk sees the concepts the earlier chunks of its conversation created; each round's
        reflections follow its facts (one more batch), as the code's step 3 follows step 2."""
        built = [episodes(d) for d in dialogues]
        chunks = [chunk_turns(turns, self.s.chunk_tokens, texts=[g.text[e] for e in episodes])
                  for g, turns, episodes in built]
        # the code's vector store: the chunk context and the related facts of its reflections
        stores = [VectorStore() for _ in dialogues]
        node_of = [{t.dia_id: e for t, e in zip(turns, episodes, strict=True)}
                   for _, turns, episodes in built]
        for r in range(max((len(c) for c in chunks), default=0)):
            todo = [i for i, c in enumerate(chunks) if r < len(c)]
            # a chunk's episodes enter the store before its facts are asked for (the code
            # embeds them first, services/ltm_creator.py 133)
            self._embed(stores, built, {i: [node_of[i][t.dia_id] for t in chunks[i][r]]
                                        for i in todo})
            jobs = [self._fact_job(dialogues[i], built[i], chunks[i][r], stores[i])
                    for i in todo]
            parse = parse_upstream_facts if self.s.prompts == "upstream" else parse_facts
            # the shape is checked (and repaired) in the batch, the source ids per chunk below
            results = generate_structured(self.llm, [j[0] for j in jobs], parse=parse)
            self.extraction_attempts += len(jobs)
            new: dict[int, list[int]] = {}
            for i, (_, chunk, ids, known), res in zip(todo, jobs, results, strict=True):
                before = len(built[i][0].kind)
                self._add_facts(dialogues[i], built[i], chunk, ids, known, res)
                new[i] = list(range(before, len(built[i][0].kind)))  # its concepts and facts
            self._embed(stores, built, new)
            groups = [(i, [n for n in new[i] if built[i][0].kind[n] == FACT]) for i in todo]
            made = self._reflect(dialogues, built, [(i, f) for i, f in groups if f], stores)
            self._embed(stores, built, made)
        return [b[0] for b in built]

    def _embed(self, stores: list[VectorStore], built, new: Mapping[int, list[int]]) -> None:
        """Enter the ``new`` nodes of each conversation into its store (one encoder call)."""
        texts = [built[i][0].text[n] for i, nodes in new.items() for n in nodes]
        if not texts:
            return
        emb, start = self.encoder.encode(texts), 0
        for i, nodes in new.items():
            stores[i].add(nodes, emb[start:start + len(nodes)])
            start += len(nodes)

    def _fact_job(self, d: Dialogue, built, chunk: list[Turn], store: VectorStore
                  ) -> tuple[Any, list[Turn], dict[str, str], tuple[str, ...]]:
        """``(request, chunk, {id shown: dia_id}, concept labels shown)`` of one chunk: its
        context by the code's vector search (services/ltm_creator.py 237-297), its prompt by
        ``prompts``."""
        g, turns, episodes = built
        node_of = {t.dia_id: e for t, e in zip(turns, episodes, strict=True)}
        turn_of = dict(zip(episodes, turns, strict=True))
        label_of = {c: label for label, c in g.concepts.items()}
        mine = [node_of[t.dia_id] for t in chunk]
        query = store.embedding(mine)
        older = related(store.search(query, EPISODE_TOP_K, code_similarity), g.kind, EPISODE,
                        self.s.context_cosine, exclude=mine)
        concepts = related(store.search(query, CONCEPT_TOP_K, code_similarity), g.kind, CONCEPT,
                           self.s.context_cosine)
        # the code also shows the facts already derived from those older messages
        # (services/ltm_creator.py 258-277, "existing_facts")
        older_ids = {turn_of[e].dia_id for e in older}
        facts = [f for f, k in enumerate(g.kind)
                 if k == FACT and older_ids.intersection(g.covers[f])]
        known = tuple(label_of[c] for c in concepts)
        if self.s.prompts == "upstream":  # services/llm_extractors.py 173-216
            date = {t.dia_id: s.date_time_raw or "" for s in d.sessions for t in s.turns}

            def line(e: int) -> str:
                t = turn_of[e]
                return episode_line(episode_id(d.sample_id, t.dia_id), date[t.dia_id], g.text[e])

            request = upstream_fact_request(
                self.templates[FACT_FILE], [line(e) for e in mine], [line(e) for e in older],
                [node_line(entity_id(g.text[f]), g.text[f]) for f in facts], known,
                self.max_tokens["facts"])
            ids = {episode_id(d.sample_id, t.dia_id): t.dia_id for t in chunk}
        else:
            request = fact_request(chunk, f"{d.speaker_a} and {d.speaker_b}", known,
                                   [turn_of[e] for e in older], self.max_tokens["facts"],
                                   older_facts=[g.text[f] for f in facts])
            ids = {t.dia_id: t.dia_id for t in chunk}
        return request, chunk, ids, known

    def _add_facts(self, d: Dialogue, built, chunk: list[Turn], ids: Mapping[str, str],
                   known: Sequence[str], res) -> None:
        g, turns, episodes = built
        where = f"{chunk[0].dia_id}..{chunk[-1].dia_id}"
        parsed = (recheck(res, parse_upstream_facts, ids, known) if self.s.prompts == "upstream"
                  else recheck(res, parse_facts, list(ids)))
        if parsed is None:
            self._fail("facts", d.sample_id, where, res.error or "unreadable reply")
            return
        facts, message_concepts = parsed
        episode_of = {t.dia_id: e for t, e in zip(turns, episodes, strict=True)}
        stamp_of = {t.dia_id: t.timestamp for t in turns}
        for dia_id, labels in message_concepts.items():
            for label in labels[: self.s.concepts_per_episode]:
                c = g.concept(label)
                if c is not None:
                    g.link(episode_of[dia_id], c, "HAS_CONCEPT")
        for fact in facts:
            # a fact whose every source was dropped keeps its chunk's date
            f = g.node(FACT, fact.text, fact.sources,
                       stamp_of[fact.sources[0]] if fact.sources else chunk[0].timestamp)
            for dia_id in fact.sources:
                g.link(f, episode_of[dia_id], "DERIVED_FROM")
            for label in fact.concepts[:3]:
                c = g.concept(label)
                if c is not None:
                    g.link(f, c, "ABOUT_CONCEPT")

    def _reflect(self, dialogues: Sequence[Dialogue], built, groups: list[tuple[int, list[int]]],
                 stores: list[VectorStore]) -> dict[int, list[int]]:
        """One reflection request per ``(conversation, new fact nodes)`` group, in one batch;
        returns the reflection nodes made per conversation. Under ``prompts="upstream"`` the
        code's context: the older facts of similarity >= the context threshold among each new
        fact's 5 nearest nodes, and the reflections already drawn from those or the new facts
        (services/ltm_creator.py 428-467)."""
        requests, cites = [], []
        for i, facts in groups:
            d, g = dialogues[i], built[i][0]
            if self.s.prompts == "upstream":
                hits = stores[i].search(stores[i].embedding(facts), FACT_TOP_K, code_similarity)
                near = related(hits, g.kind, FACT, self.s.context_cosine, exclude=facts)
                derived = EDGE_TYPES.index("DERIVED_FROM_FACT")
                shown = set(facts) | set(near)
                drawn = sorted({a for a, b, t in g.edges if t == derived
                                and g.kind[a] == REFLECTION and b in shown})
                ids: dict[str, list[int]] = {}
                for p, f in enumerate(facts):
                    ids.setdefault(entity_id(g.text[f]), []).append(p)
                requests.append(upstream_reflection_request(
                    self.templates[REFLECTION_FILE],
                    [node_line(entity_id(g.text[f]), g.text[f]) for f in facts],
                    [node_line(entity_id(g.text[f]), g.text[f]) for f in near],
                    [node_line(entity_id(g.text[x]), g.text[x]) for x in drawn],
                    self.max_tokens["reflections"]))
                cites.append(ids)
            else:
                requests.append(reflection_request([g.text[f] for f in facts],
                                                   f"{d.speaker_a} and {d.speaker_b}",
                                                   self.s.reflections_per_group,
                                                   self.max_tokens["reflections"]))
                cites.append(len(facts))
        parse = parse_upstream_reflections if self.s.prompts == "upstream" else parse_reflections
        results = generate_structured(self.llm, requests, parse=parse)
        self.extraction_attempts += len(requests)
        made: dict[int, list[int]] = {}
        for (i, group), cite, res in zip(groups, cites, results, strict=True):
            d, g = dialogues[i], built[i][0]
            parsed = recheck(res, parse, cite)
            if parsed is None:
                turns = [t for f in group for t in g.covers[f]]
                where = (f"facts {turns[0]}..{turns[-1]}" if turns
                         else f"facts of nodes {group[0]}..{group[-1]}")
                self._fail("reflections", d.sample_id, where, res.error or "unreadable reply")
                continue
            for text, cited in parsed:
                facts = [group[c] for c in cited]
                covers = tuple(dict.fromkeys(t for f in facts for t in g.covers[f]))
                # one citing no fact of the request keeps the group's date
                node = g.node(REFLECTION, text, covers, max(g.stamp[f] for f in facts or group))
                made.setdefault(i, []).append(node)
                for f in facts:
                    g.link(node, f, "DERIVED_FROM_FACT")
        return made

    def _fail(self, stage: str, sample_id: str, where: str, error: str) -> None:
        failure = GAAMAFailure(stage, sample_id, where, error)
        self.failures.append(failure)
        log.warning("gaama %s extraction failed for %s %s (counted in extraction_failures): %s",
                    stage, sample_id, where, error)
