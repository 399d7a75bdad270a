r"""GAAMA (public code swarna-kpaul/gaama) in the same harness: ``memory=gaama`` (SPEC §2).

Graph, per conversation, every edge stored in both directions (weight ``edge_weight``, 0.8):

* **episodes**: the turns as the code writes them (``[<session date>] <speaker>: <text>``, no
  image caption: ``evals/locomo/run_create_ltm.py``), chained by ``NEXT``;
* **facts**: atomic statements, each ``DERIVED_FROM`` its episode. The LLM-free build (the only one
  so far, named ``gaama-llm-free`` in every result row) takes the sentences of each turn with
  first and second person replaced by the speakers' names
  (:func:`~synapse_pt.retrieval.text.resolve_pronouns`), so each reads standalone;
* **concepts**: topic labels (snake_case, never a person's name) from the configured LLM-free
  extractor, at most ``concepts_per_episode`` per episode (``HAS_CONCEPT``), and ``ABOUT_CONCEPT``
  from each fact to the concepts of its episode that it mentions;
* **reflections** (an LLM's generalisations over facts, ``DERIVED_FROM_FACT``, weight 0.5): none
  LLM-free.

With an LLM extractor (``extractor=llm llm=...``) the **LLM build** (``gaama-llm``) writes facts,
concepts and reflections instead (:mod:`synapse_pt.memory.gaama.llm_build`): chunks of about 500
tokens, each with the known concepts and older messages of similarity >= 0.75 as context
(``fact_context``: the code's per-episode vector search, or the chunk centroid's last 5), asked
with GAAMA's own prompt files or our wording (``prompts``); facts cover the messages they cite,
reflections the facts they cite (a citation outside the request loses that edge, as the code);
reflections after each chunk's facts, as the code, or per ``reflection_group`` facts
(``reflections``).

Retrieval, all questions at once, one ``[N_g, B_g]`` block per conversation. Each step follows
the public code (gaama ``2d992f7``):

1. similarity: the code's vector store returns sqlite-vec's cosine distance turned into
   :math:`\mathrm{sim} = (1 + \cos) / 2` (``adapters/sqlite_vector.py``), used wherever
   similarity enters (seed weights, the score's similarity term, the LLM build's context
   threshold);
2. seeds: the ``seeds`` (40) nodes of any kind with the highest similarity, weights normalised
   to sum 1;
3. candidates (``services/ltm_retriever.py``): the nearest ``knn`` nodes (the code's
   ``max(2 * total budget, 2 * seeds)`` = 330) plus the seeds' neighbourhood to depth 2.
   ``nearest`` says where the nearest set and the seeds come from: ``"conversation"``, the
   question's conversation's nodes; ``"store"``, as the code's sqlite-vec store returns them
   (the ``max(2 knn, 20)`` nearest over every ingested conversation, only then the question's,
   at most ``knn``: fewer, at worst none; :meth:`GAAMAMemory.store_returns`, issue 53);
4. personalised PageRank from the seeds on the seeds' neighbourhood (the code's expanded edges;
   0 for nearest-set nodes outside it; :func:`~synapse_pt.graph.ppr.personalised_pagerank`,
   continuation 0.6, 100 iterations, L1 tolerance 1e-6), hub dampening as the code (``"code"``,
   which cancels) or ``"effective"``;
5. score :math:`1.0 \cdot \mathrm{sim} / \max \mathrm{sim} + 0.1 \cdot \mathrm{PPR} / \max
   \mathrm{PPR}` over the candidates. The code has no similarity for nodes found only through the
   graph, outside its nearest set (its ``compute_similarity`` does not exist), so they get 0
   (``graph_only_cosine="zero"``: ``services/ltm_retriever.py`` 194-197); ``"real"`` (ours,
   SPEC §2) computes their real similarity;
6. the pack: the best ``max_facts`` (60) facts, ``max_reflections`` (20) reflections and
   ``max_episodes`` (80) episodes (concepts never), episodes re-sorted by time, trimmed to
   ``max_words`` (1,000) words, each type cut in proportion to its budget (skills' 5 included
   in the total), lowest-scored first (``evals/locomo/locomo_eval.py``, :func:`trim_code`).
   Items are returned in score order, each listing the LoCoMo turns it covers (a fact: its
   episode).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from synapse_pt.data.records import Dialogue, Question, Turn
from synapse_pt.data.render import DEFAULT_TURN_TEMPLATE, TurnRenderer
from synapse_pt.data.upstream import gaama_prompt
from synapse_pt.graph.extraction import ConceptExtractor, drop_speakers, extractor_llm
from synapse_pt.graph.ppr import HUB_DAMPENING, neighbourhood, personalised_pagerank
from synapse_pt.models.base import TextEncoder
from synapse_pt.models.structured import generate_structured, recheck
from synapse_pt.retrieval.dense import cosine_scores
from synapse_pt.retrieval.text import resolve_pronouns, split_sentences

from ..base import (
    EPISODIC,
    MemorySystem,
    RetrievalResult,
    RetrievedItem,
    require_choice,
    require_int,
)
from ..declare import CostModel, ModelDependentBuild, SearchSpace, WordBudget
from ..episodic import TurnRegistry
from ..fused import inner_fused
from ..gate import build_gate
from .llm_build import (
    CONCEPT_TOP_K,
    CONTEXT_RULES,
    EPISODE_TOP_K,
    FACT_FILE,
    FACT_TOP_K,
    OURS_MAX_TOKENS,
    PROMPT_SOURCES,
    REFLECTION_FILE,
    REFLECTION_RULES,
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

log = logging.getLogger(__name__)

EPISODE, FACT, CONCEPT, REFLECTION = "episode", "fact", "concept", "reflection"
EDGE_TYPES = ("NEXT", "DERIVED_FROM", "DERIVED_FROM_FACT", "HAS_CONCEPT", "ABOUT_CONCEPT")

#: the nearest set's source: ``"conversation"`` (ours: the ``knn`` nearest of the question's own
#: conversation) or ``"store"`` (the code's vector store, gaama ``adapters/sqlite_vector.py``
#: 178-238: the ``max(2 knn, 20)`` nearest over every ingested conversation, then those of the
#: question's conversation, at most ``knn``; the seeds are the best of that set).
NEAREST_RULES = ("conversation", "store")


def code_similarity(cos: float | torch.Tensor) -> float | torch.Tensor:
    """GAAMA's similarity of a cosine: (1 + cos) / 2 in [0, 1] (``adapters/sqlite_vector.py``)."""
    return (1.0 + cos) / 2.0


def trim_code(lists: Mapping[str, Sequence[tuple[int, float]]], words: Mapping[int, int],
              budgets: Mapping[str, int], max_words: int) -> dict[str, list[tuple[int, float]]]:
    """GAAMA's word trim (``evals/locomo/locomo_eval.py``, ``_trim_memory_pack``), our code.

    ``lists``: per type (``"facts"``, ``"reflections"``, ``"skills"``, ``"episodes"``, in that
    order) its items ``(node, score)`` as packed (facts and reflections by score, episodes by
    time); ``words``: words of each node's text; ``budgets``: the per-type caps. While the items
    hold more than ``max_words`` words, the non-empty type whose share of the words is largest
    relative to its share of the budgets (ties: the earlier type) loses one item: an episode the
    lowest-scored (ties: the earliest), any other type its last (lowest-scored) item.
    """
    order = ("facts", "reflections", "skills", "episodes")
    items = {k: list(lists.get(k, ())) for k in order}
    total_budget = sum(budgets.get(k, 0) for k in order) or 1

    used = {k: sum(words[r] for r, _ in items[k]) for k in order}  # words kept per type
    while sum(used.values()) > max_words:
        non_empty = [k for k in order if items[k]]
        if not non_empty:
            break
        total = sum(used.values()) or 1
        worst, worst_ratio = None, -1.0
        for k in non_empty:
            target = budgets.get(k, 0) / total_budget
            ratio = (used[k] / total) / target if target > 0 else float("inf")
            if ratio > worst_ratio:
                worst, worst_ratio = k, ratio
        if worst == "episodes":
            low = min(range(len(items[worst])), key=lambda i: items[worst][i][1])
            node, _ = items[worst].pop(low)
        else:
            node, _ = items[worst].pop()
        used[worst] -= words[node]
    return items


def concept_label(text: str) -> str:
    """A topic label in GAAMA's snake_case form (``"pottery class"`` -> ``"pottery_class"``)."""
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


@dataclass
class _Block:
    """One conversation's graph: node ``kind``/``text``/``covers`` (the LoCoMo turns a node's
    content comes from) lists, local ``edge_index`` ``[2, E]``, edge types ``[E]`` and the node
    embeddings ``x``."""

    sample_id: str
    kind: list[str]
    text: list[str]
    covers: list[tuple[str, ...]]
    timestamp: list[Any]
    speaker: list[str | None]
    edge_index: torch.Tensor
    edge_type: torch.Tensor
    x: torch.Tensor


class _GraphBuilder:
    """Nodes and typed edges (both directions) of one conversation while it is built."""

    def __init__(self) -> None:
        self.kind: list[str] = []
        self.text: list[str] = []
        self.covers: list[tuple[str, ...]] = []
        self.stamp: list[Any] = []
        self.who: list[str | None] = []
        self.edges: list[tuple[int, int, int]] = []
        self.concepts: dict[str, int] = {}

    def node(self, kind: str, text: str, covers: tuple[str, ...], stamp: Any,
             who: str | None = None) -> int:
        self.kind.append(kind)
        self.text.append(text)
        self.covers.append(covers)
        self.stamp.append(stamp)
        self.who.append(who)
        return len(self.kind) - 1

    def concept(self, label: str) -> int | None:
        """The node of a concept label (created on first use; ``None`` for an empty label)."""
        if not label:
            return None
        if label not in self.concepts:
            self.concepts[label] = self.node(CONCEPT, label.replace("_", " "), (), None)
        return self.concepts[label]

    def link(self, a: int, b: int, edge: str) -> None:
        t = EDGE_TYPES.index(edge)
        self.edges.extend([(a, b, t), (b, a, t)])


class GAAMAMemory(MemorySystem):
    """GAAMA's episode-fact-concept graph and its seeded personalised-PageRank retrieval.

    Args:
        encoder: the embedder of every node and of the questions.
        extractor: the LLM-free concept extractor (``extractor=...``).
        seeds: seed nodes per question (code: 40).
        depth: candidate neighbourhood depth (code: 2).
        alpha: PageRank continuation (code: 0.6, i.e. restart 0.4).
        max_iter, tol: power iteration (code: 100, 1e-6).
        edge_weight: weight of every edge (code: 0.8).
        hub_dampening, hub_degree: ``"code"`` (cancels, as the code), ``"effective"`` or ``"off"``;
            hubs have degree above ``hub_degree`` (code: 50).
        cosine_weight, ppr_weight: the additive score (code: 1.0, 0.1).
        graph_only_cosine: ``"zero"`` (the code's behaviour: 0 outside the nearest set) or
            ``"real"`` (ours: their real similarity).
        knn: the nearest set's size (``None``: the code's rule, 2 x the budgets' total, 330).
        nearest: where the nearest set (and the seeds in it) come from: ``"store"`` (the code's,
            the default: the ``max(2 knn, 20)`` nearest over every ingested conversation, kept if
            they are of the question's conversation, at most ``knn``; often fewer, none at worst)
            or ``"conversation"`` (ours: the ``knn`` nearest of the question's conversation).
        max_facts, max_reflections, max_skills, max_episodes, max_words: the pack (code: 60, 20,
            5, 80, 1000; no skills here, but their budget counts in the code's trim and ``knn``).
        concepts_per_episode: concepts kept per episode (GAAMA's prompt: 1-3).
        reflection_edge_weight: weight of ``DERIVED_FROM_FACT`` edges (code: 0.5).
        chunk_tokens, context_cosine: LLM build: chunk size and the context threshold (code:
            about 500, 0.75 on the ``similarity`` scale).
        prompts: LLM build: ``"upstream"`` (GAAMA's ``prompts/fact_generation.md`` and
            ``reflection_generation.md``, read from ``upstream_path`` as
            :func:`~synapse_pt.data.upstream.gaama_prompt` finds them) or ``"ours"``.
        upstream_path: the folder of the upstream files (``None``: the loader's search order).
        reflections: LLM build: ``"chunk"`` (the code's: one request after each chunk's facts)
            or ``"group"`` (ours: one per ``reflection_group`` facts, after all the facts).
        fact_context: LLM build: ``"code"`` (the code's per-episode vector search over the nodes
            built so far) or ``"centroid"`` (ours: the chunk's text embedding, the last 5
            older messages).
        reflection_group, reflections_per_group: LLM build: facts per reflection request and
            reflections asked for (ours; ``reflections="group"`` and our prompt).
        max_tokens: completion budget of an extraction request (``None``: the prompt set's, the
            code's 8,000 for facts and 4,000 for reflections, ours 768).
        fused_seeds: ``None`` (the code's cosine) or :class:`~synapse_pt.memory.fused.FusedMemory`
            arguments: the fused LLM-free retriever's score of the best turn a node covers
            replaces the cosine of episodes, facts and reflections in the seeds and the score
            (issue 16: GAAMA on the strong retrieval stack); concepts keep their cosine.
        tau_gate, gate, turn_template, device: as every memory.
    """

    name = "gaama"
    retrieval_fields = ("seeds", "depth", "alpha", "hub_dampening", "cosine_weight",
                        "ppr_weight", "graph_only_cosine", "knn", "nearest", "max_facts",
                        "max_reflections", "max_skills", "max_episodes", "max_words", "tau_gate")
    # a pack budget of 0 packs none of that kind; below 0 is a mistake (memory.max_facts=-1)
    int_minimums = {"seeds": 1, "depth": 0, "max_iter": 1, "hub_degree": 1, "max_facts": 0,
                    "max_reflections": 0, "max_skills": 0, "max_episodes": 0, "max_words": 1,
                    "concepts_per_episode": 1, "chunk_tokens": 1, "reflection_group": 1,
                    "reflections_per_group": 1, "max_tokens": 1}
    choices = {"hub_dampening": HUB_DAMPENING, "graph_only_cosine": ("real", "zero"),
               "nearest": NEAREST_RULES, "prompts": PROMPT_SOURCES,
               "reflections": REFLECTION_RULES, "fact_context": CONTEXT_RULES}
    # answer_from_memory.md (services/answer_from_memory.py) and the key-fact judge
    # (evals/locomo/locomo_eval.py)
    own_steps = ("gaama", "gaama")
    cost_model = CostModel(WordBudget("max_words", label="GAAMA's max_words pack"),
                           extraction=ModelDependentBuild())
    # the seeds, the walk and the graph-only reading (only cosine : PPR's ratio matters)
    search_space = SearchSpace(
        discrete={"seeds": (20, 40, 80), "depth": (1, 2, 3), "hub_dampening": HUB_DAMPENING,
                  "graph_only_cosine": ("real", "zero")},
        continuous={"alpha": (0.3, 0.9), "ppr_weight": (0.0, 1.0)},
        reference={"seeds": 40, "depth": 2, "hub_dampening": "code", "graph_only_cosine": "zero",
                   "alpha": 0.6, "ppr_weight": 0.1})  # the code's values

    def __init__(self, encoder: TextEncoder, extractor: ConceptExtractor, *, seeds: int = 40,
                 depth: int = 2, alpha: float = 0.6, max_iter: int = 100, tol: float = 1e-6,
                 edge_weight: float = 0.8, hub_dampening: str = "code", hub_degree: int = 50,
                 cosine_weight: float = 1.0, ppr_weight: float = 0.1,
                 graph_only_cosine: str = "zero", knn: int | None = None,
                 nearest: str = "store",
                 max_facts: int = 60, max_reflections: int = 20, max_skills: int = 5,
                 max_episodes: int = 80, max_words: int = 1000, concepts_per_episode: int = 3,
                 reflection_edge_weight: float = 0.5, chunk_tokens: int = 500,
                 context_cosine: float = 0.75,
                 prompts: str = "upstream", upstream_path: str | None = None,
                 reflections: str = "chunk",
                 fact_context: str = "code", reflection_group: int = 20,
                 reflections_per_group: int = 3, max_tokens: int | None = None,
                 fused_seeds: Mapping[str, Any] | None = None,
                 tau_gate: float | None = None, gate: Mapping[str, Any] | None = None,
                 turn_template: str = DEFAULT_TURN_TEMPLATE, device: str = "cpu") -> None:
        self.llm = extractor_llm(extractor, "gaama")
        for key, value in (("hub_dampening", hub_dampening),
                           ("graph_only_cosine", graph_only_cosine), ("nearest", nearest),
                           ("prompts", prompts), ("reflections", reflections),
                           ("fact_context", fact_context)):
            require_choice(key, value, self.choices[key])
        if knn is not None:
            require_int("knn", knn, 1)  # null: the code's rule (twice the pack budgets)
        given = {"seeds": seeds, "depth": depth, "max_iter": max_iter, "hub_degree": hub_degree,
                 "max_facts": max_facts, "max_reflections": max_reflections,
                 "max_skills": max_skills, "max_episodes": max_episodes, "max_words": max_words,
                 "concepts_per_episode": concepts_per_episode, "chunk_tokens": chunk_tokens,
                 "reflection_group": reflection_group,
                 "reflections_per_group": reflections_per_group}
        if max_tokens is not None:  # null: the prompt set's budgets
            given["max_tokens"] = max_tokens
        for key, value in given.items():
            require_int(key, value, self.int_minimums[key])
        self.encoder, self.extractor = encoder, extractor
        self.seeds, self.depth, self.alpha = seeds, int(depth), float(alpha)
        self.max_iter, self.tol = int(max_iter), float(tol)
        self.edge_weight = float(edge_weight)
        self.hub_dampening, self.hub_degree = hub_dampening, int(hub_degree)
        self.cosine_weight, self.ppr_weight = float(cosine_weight), float(ppr_weight)
        self.graph_only_cosine = graph_only_cosine
        self.nearest = nearest
        self.max_facts, self.max_reflections = int(max_facts), int(max_reflections)
        self.max_skills = int(max_skills)
        self.max_episodes, self.max_words = int(max_episodes), int(max_words)
        self._knn_rule = knn is None  # the code's rule: follows the budgets and seeds
        self.knn = int(knn) if knn is not None else self._code_knn()
        self.concepts_per_episode = concepts_per_episode
        self.reflection_edge_weight = float(reflection_edge_weight)
        self.chunk_tokens, self.context_cosine = int(chunk_tokens), float(context_cosine)
        self.reflection_group = int(reflection_group)
        self.reflections_per_group = int(reflections_per_group)
        self.prompts = prompts
        self.reflections, self.fact_context = reflections, fact_context
        budgets = (UPSTREAM_MAX_TOKENS if prompts == "upstream"
                   else {"facts": OURS_MAX_TOKENS, "reflections": OURS_MAX_TOKENS})
        self.max_tokens = {k: int(max_tokens) if max_tokens is not None else v
                           for k, v in budgets.items()}
        # GAAMA's prompt files, read (and sha256-checked) before anything is built
        self.templates = {}
        if self.llm is not None and prompts == "upstream":
            self.templates = {name: gaama_prompt(name, upstream_path)
                              for name in (FACT_FILE, REFLECTION_FILE)}
        self.failures: list[GAAMAFailure] = []
        self.extraction_attempts = 0  # extraction requests (facts, reflections) sent
        self.tau_gate = tau_gate
        self.renderer = TurnRenderer(turn_template)
        self.device = torch.device(device)
        self.fused = inner_fused(encoder, fused_seeds, key="fused_seeds", owner="GAAMA",
                                 turn_template=turn_template, device=device)
        self._cover_rows: dict[str, torch.Tensor] = {}
        self.registry = TurnRegistry(self.renderer)
        self.gate = build_gate(gate, encoder, self.renderer, self.device)
        self.blocks: dict[str, _Block] = {}
        self.ingest_seconds = 0.0
        self.store_counts: dict[str, int] = {}  # nearest="store": what the store returned

    def _code_knn(self) -> int:
        """The code's nearest set: max(2 * total pack budget, 2 * seeds) nodes (60+20+5+80 ->
        330)."""
        return max(2 * (self.max_facts + self.max_reflections + self.max_skills
                        + self.max_episodes), 2 * self.seeds)

    def configure_retrieval(self, **settings: object) -> None:
        """As :meth:`MemorySystem.configure_retrieval`; ``knn=None`` (or a sweep of the budgets or
        seeds while ``knn`` follows the code's rule) sets the nearest set by the code's rule."""
        rule = self._knn_rule
        if "knn" in settings:
            rule = settings["knn"] is None
            if rule:
                settings.pop("knn")
            else:
                settings["knn"] = require_int("knn", settings["knn"], 1)
        super().configure_retrieval(**settings)  # checks every setting before it sets one
        self._knn_rule = rule
        if rule:
            self.knn = self._code_knn()

    def describe(self) -> dict[str, object]:
        llm_free = self.llm is None
        return {"memory": self.name, "build": "gaama-llm-free" if llm_free else "gaama-llm",
                "llm_free": llm_free, "extraction_failures": len(self.failures),
                "extraction_attempts": self.extraction_attempts,
                "encoder": self.encoder.name, "extractor": self.extractor.name,
                "hub_dampening": self.hub_dampening, "graph_only_cosine": self.graph_only_cosine,
                "knn": self.knn,
                "nearest": self.nearest,
                **({"store_nearest": dict(self.store_counts)} if self.nearest == "store" else {}),

                **({} if llm_free else {
                    "prompts": self.prompts,
                    "reflections": self.reflections, "fact_context": self.fact_context}),
                "upstream_prompts": [t.source.rel for t in self.templates.values()],
                "turn_template": self.renderer.template, "tau_gate": self.tau_gate,
                **self.gate.describe()}

    # ---------------------------------------------------------------------------- ingest
    def ingest_dialogues(self, dialogues: Sequence[Dialogue]) -> None:
        start = time.perf_counter()
        self.registry.add(dialogues)
        graphs = (self._llm_graphs(dialogues) if self.llm is not None
                  else [self._llm_free_graph(d) for d in dialogues])
        for d, g in zip(dialogues, graphs, strict=True):
            self.blocks[d.sample_id] = self._block(d.sample_id, g)
        if self.fused is not None:
            self.fused.ingest_dialogues(dialogues)
            row = self.fused.row_of()
            for d in dialogues:  # per node, the fused rows of the turns it covers (-1: padding)
                covers = self.blocks[d.sample_id].covers
                width = max(1, max(len(c) for c in covers))
                self._cover_rows[d.sample_id] = torch.tensor(
                    [[row[(d.sample_id, t)] for t in c] + [-1] * (width - len(c))
                     for c in covers], dtype=torch.long, device=self.device)
        if self.gate.uses_turns:
            self.gate.ingest(dialogues)
        self.ingest_seconds += time.perf_counter() - start

    def _block(self, sample_id: str, g: _GraphBuilder) -> _Block:
        edge = torch.tensor(g.edges, dtype=torch.long).view(-1, 3)
        return _Block(sample_id, g.kind, g.text, g.covers, g.stamp, g.who,
                      edge[:, :2].T.contiguous().to(self.device), edge[:, 2].to(self.device),
                      self.encoder.encode(g.text).to(self.device))

    def episode_texts(self, d: Dialogue) -> dict[str, str]:
        """``{dia_id: episode text}`` as GAAMA's LoCoMo loader writes an event's content
        (``[<session date_time string>] <speaker>: <text>``, or ``<speaker>: <text>`` for a
        session without a date; no caption)."""
        return {t.dia_id: (f"[{s.date_time_raw}] {t.speaker}: {t.text}" if s.date_time_raw
                           else f"{t.speaker}: {t.text}")
                for s in d.sessions for t in s.turns}

    def _episodes(self, d: Dialogue) -> tuple[_GraphBuilder, list[Turn], list[int]]:
        g = _GraphBuilder()
        turns = list(d.turns())
        texts = self.episode_texts(d)
        episodes = [g.node(EPISODE, texts[t.dia_id], (t.dia_id,), t.timestamp, t.speaker)
                    for t in turns]
        for a, b in zip(episodes, episodes[1:], strict=False):
            g.link(a, b, "NEXT")
        return g, turns, episodes

    def _llm_free_graph(self, d: Dialogue) -> _GraphBuilder:
        """Episodes, sentence facts and extractor concepts (module docstring)."""
        g, turns, episodes = self._episodes(d)
        # one window per episode; the listener's name is not in a one-turn window's speakers, so
        # both speakers are dropped here (GAAMA's concepts are never person names)
        speakers = {d.speaker_a.casefold(), d.speaker_b.casefold()}
        concepts_of = [drop_speakers(c, speakers)
                       for c in self.extractor.extract([[t] for t in turns])]
        for e, t, found in zip(episodes, turns, concepts_of, strict=True):
            listener = d.speaker_b if t.speaker == d.speaker_a else d.speaker_a
            mine = [g.concept(concept_label(c)) for c in found[: self.concepts_per_episode]]
            mine = [c for c in mine if c is not None]
            for c in mine:
                g.link(e, c, "HAS_CONCEPT")
            for sentence in split_sentences(t.content):
                f = g.node(FACT, resolve_pronouns(sentence, t.speaker, listener), (t.dia_id,),
                           t.timestamp)
                g.link(f, e, "DERIVED_FROM")
                low = sentence.lower()
                for c in mine:
                    if any(w in low for w in g.text[c].split() if len(w) > 2):
                        g.link(f, c, "ABOUT_CONCEPT")
        return g

    def _llm_graphs(self, dialogues: Sequence[Dialogue]) -> list[_GraphBuilder]:
        """Facts, concepts and reflections by the LLM (:mod:`synapse_pt.memory.gaama.llm_build`):
        chunk ``r`` of every conversation in one batch, so each chunk sees the concepts the
        earlier chunks of its conversation created; under ``reflections="chunk"`` each round's
        reflections follow its facts (one more batch), as the code's step 3 follows step 2."""
        built = [self._episodes(d) for d in dialogues]
        chunks = [chunk_turns(turns, self.chunk_tokens, texts=[g.text[e] for e in episodes])
                  for g, turns, episodes in built]
        # the code's vector store, where its searches need it (the chunk context, or the
        # related facts its reflection prompt shows)
        stores = ([VectorStore() for _ in dialogues]
                  if self.fact_context == "code"
                  or (self.reflections == "chunk" and self.prompts == "upstream") else None)
        turn_emb = ([self.encoder.encode([t.content for t in turns]) for _, turns, _ in built]
                    if self.fact_context == "centroid" else None)
        node_of = [{t.dia_id: e for t, e in zip(turns, episodes, strict=True)}
                   for _, turns, episodes in built]
        for r in range(max((len(c) for c in chunks), default=0)):
            todo = [i for i, c in enumerate(chunks) if r < len(c)]
            # a chunk's episodes enter the store before its facts are asked for (the code
            # embeds them first, services/ltm_creator.py 133)
            self._embed(stores, built, {i: [node_of[i][t.dia_id] for t in chunks[i][r]]
                                        for i in todo})
            jobs = [self._fact_job(dialogues[i], built[i], chunks[i][r],
                                   None if stores is None else stores[i],
                                   None if turn_emb is None else turn_emb[i]) for i in todo]
            parse = parse_upstream_facts if self.prompts == "upstream" else parse_facts
            # the shape is checked (and repaired) in the batch, the source ids per chunk below
            results = generate_structured(self.llm, [j[0] for j in jobs], parse=parse)
            self.extraction_attempts += len(jobs)
            new: dict[int, list[int]] = {}
            for i, (_, chunk, ids, known), res in zip(todo, jobs, results, strict=True):
                before = len(built[i][0].kind)
                self._add_facts(dialogues[i], built[i], chunk, ids, known, res)
                new[i] = list(range(before, len(built[i][0].kind)))  # its concepts and facts
            self._embed(stores, built, new)
            if self.reflections == "chunk":
                groups = [(i, [n for n in new[i] if built[i][0].kind[n] == FACT]) for i in todo]
                made = self._reflect(dialogues, built, [(i, f) for i, f in groups if f],
                                     stores)
                self._embed(stores, built, made)
        if self.reflections == "group":  # ours: per reflection_group facts, after all facts
            groups = []
            for i, (g, _, _) in enumerate(built):
                facts = [n for n, k in enumerate(g.kind) if k == FACT]
                groups += [(i, facts[s:s + self.reflection_group])
                           for s in range(0, len(facts), self.reflection_group)
                           if len(facts[s:s + self.reflection_group]) >= 2]
            self._reflect(dialogues, built, groups, None)
        return [b[0] for b in built]

    def _embed(self, stores: list[VectorStore] | None, built, new: Mapping[int, list[int]]
               ) -> None:
        """Enter the ``new`` nodes of each conversation into its store (one encoder call)."""
        if stores is None:
            return
        texts = [built[i][0].text[n] for i, nodes in new.items() for n in nodes]
        if not texts:
            return
        emb, start = self.encoder.encode(texts), 0
        for i, nodes in new.items():
            stores[i].add(nodes, emb[start:start + len(nodes)])
            start += len(nodes)

    def _fact_job(self, d: Dialogue, built, chunk: list[Turn], store: VectorStore | None,
                  turn_emb: torch.Tensor | None
                  ) -> tuple[Any, list[Turn], dict[str, str], tuple[str, ...]]:
        """``(request, chunk, {id shown: dia_id}, concept labels shown)`` of one chunk: its
        context by ``fact_context``, its prompt by ``prompts``."""
        g, turns, episodes = built
        node_of = {t.dia_id: e for t, e in zip(turns, episodes, strict=True)}
        turn_of = dict(zip(episodes, turns, strict=True))
        label_of = {c: label for label, c in g.concepts.items()}
        mine = [node_of[t.dia_id] for t in chunk]
        if self.fact_context == "code":  # services/ltm_creator.py 237-297
            assert store is not None
            query = store.embedding(mine)
            older = related(store.search(query, EPISODE_TOP_K, self._similarity), g.kind,
                            EPISODE, self.context_cosine, exclude=mine)
            concepts = related(store.search(query, CONCEPT_TOP_K, self._similarity), g.kind,
                               CONCEPT, self.context_cosine)
        else:  # ours: the chunk's text embedding, the last 5 older messages that similar
            assert turn_emb is not None
            first = turns.index(chunk[0])
            chunk_emb = self.encoder.encode(["\n".join(t.content for t in chunk)])[0]
            older = [episodes[j] for j in range(first)
                     if self._similarity(float(turn_emb[j] @ chunk_emb))
                     >= self.context_cosine][-5:]
            concepts = list(g.concepts.values())
            if concepts:
                cos = self.encoder.encode([g.text[c] for c in concepts]) @ chunk_emb
                concepts = [c for c, v in zip(concepts, cos.tolist(), strict=True)
                            if self._similarity(v) >= self.context_cosine]
        # the code also shows the facts already derived from those older messages
        # (services/ltm_creator.py 258-277, "existing_facts")
        older_ids = {turn_of[e].dia_id for e in older}
        facts = [f for f, k in enumerate(g.kind)
                 if k == FACT and older_ids.intersection(g.covers[f])]
        known = tuple(label_of[c] for c in concepts)
        if self.prompts == "upstream":  # services/llm_extractors.py 173-216
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

    @staticmethod
    def _similarity(cos: float | torch.Tensor) -> float | torch.Tensor:
        """A cosine (float or tensor) on the code's scale, (1 + cos) / 2 (the context threshold
        reads it too: the code's 0.75 admits cos >= 0.5)."""
        return code_similarity(cos)

    def _add_facts(self, d: Dialogue, built, chunk: list[Turn], ids: Mapping[str, str],
                   known: Sequence[str], res) -> None:
        g, turns, episodes = built
        where = f"{chunk[0].dia_id}..{chunk[-1].dia_id}"
        parsed = (recheck(res, parse_upstream_facts, ids, known) if self.prompts == "upstream"
                  else recheck(res, parse_facts, list(ids)))
        if parsed is None:
            self._fail("facts", d.sample_id, where, res.error or "unreadable reply")
            return
        facts, message_concepts = parsed
        episode_of = {t.dia_id: e for t, e in zip(turns, episodes, strict=True)}
        stamp_of = {t.dia_id: t.timestamp for t in turns}
        for dia_id, labels in message_concepts.items():
            for label in labels[: self.concepts_per_episode]:
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
                 stores: list[VectorStore] | None) -> dict[int, list[int]]:
        """One reflection request per ``(conversation, new fact nodes)`` group, in one batch;
        returns the reflection nodes made per conversation. Under ``prompts="upstream"`` the
        code's context (``reflections="chunk"``: the older facts of similarity >= the context
        threshold among each new fact's 5 nearest nodes, and the reflections already drawn from
        those or the new facts; services/ltm_creator.py 428-467), none per group."""
        requests, cites = [], []
        for i, facts in groups:
            d, g = dialogues[i], built[i][0]
            if self.prompts == "upstream":
                near = []
                if stores is not None and self.reflections == "chunk":
                    hits = stores[i].search(stores[i].embedding(facts), FACT_TOP_K,
                                            self._similarity)
                    near = related(hits, g.kind, FACT, self.context_cosine, exclude=facts)
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
                                                   self.reflections_per_group,
                                                   self.max_tokens["reflections"]))
                cites.append(len(facts))
        parse = parse_upstream_reflections if self.prompts == "upstream" else parse_reflections
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

    def edge_counts(self, sample_id: str) -> dict[str, int]:
        """Edges of each type in one conversation's graph (both directions counted)."""
        types = self.blocks[sample_id].edge_type.tolist()
        return {name: types.count(i) for i, name in enumerate(EDGE_TYPES)}

    # ---------------------------------------------------------------------------- retrieve
    def store_returns(self, query_emb: torch.Tensor, sample_ids: Sequence[str]
                      ) -> dict[str, torch.Tensor]:
        """``{sample_id: [N, B] bool}``: the nodes of each conversation that the code's vector
        store returns to the ``B`` questions (``nearest="store"``). The store ranks every
        ingested conversation's nodes by cosine at once and takes the nearest
        ``max(2 knn, 20)``; the question's conversation is filtered after that step (sqlite-vec
        joins the scope columns after its k nearest: gaama ``adapters/sqlite_vector.py``
        178-214), and at most ``knn`` of the rest are kept (238, :meth:`scores`). Ties: the
        earlier-ingested node first."""
        names = list(self.blocks)
        x = torch.cat([self.blocks[name].x for name in names])  # [N_all, d]
        cos = cosine_scores(x, query_emb)  # [N_all, B]
        k = min(max(2 * self.knn, 20), len(x))
        top = cos.sort(dim=0, descending=True, stable=True).indices[:k]
        returned = torch.zeros_like(cos, dtype=torch.bool).scatter_(0, top, True)
        bounds = torch.tensor([0] + [len(self.blocks[name].kind) for name in names]).cumsum(0)
        where = {name: (int(bounds[i]), int(bounds[i + 1])) for i, name in enumerate(names)}
        return {name: returned[where[name][0]:where[name][1]] for name in set(sample_ids)}

    def _count_store(self, returned: Mapping[str, torch.Tensor],
                     by_conv: Mapping[str, list[int]]) -> None:
        """Tallies, over the questions retrieved so far, how many of their conversation's nodes
        the store returned: fewer than ``knn``, fewer than ``seeds``, none (in describe())."""
        got = torch.cat([returned[sid][:, cols].sum(0) for sid, cols in by_conv.items()])
        for key, n in (("questions", len(got)), ("below_knn", int((got < self.knn).sum())),
                       ("below_seeds", int((got < self.seeds).sum())),
                       ("none", int((got == 0).sum())),
                       ("nearest_sum", int(got.clamp(max=self.knn).sum()))):
            self.store_counts[key] = self.store_counts.get(key, 0) + n

    def scores(self, block: _Block, query_emb: torch.Tensor,
               similarity: torch.Tensor | None = None, returned: torch.Tensor | None = None
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(score [N, B], candidates [N, B])`` of one conversation's nodes for ``B`` questions
        (steps 1-4 of the module docstring); ``similarity`` ``[N, B]`` replaces the similarity
        everywhere it enters (``fused_seeds``: the fused score, used as it is, not rescaled);
        ``returned`` ``[N, B]`` (``nearest="store"``, :meth:`store_returns`): the nodes the
        code's store returns, the only ones the seeds and the nearest set are drawn from."""
        n = len(block.kind)
        if similarity is None:
            cos = cosine_scores(block.x, query_emb).to(torch.float64)  # [N, B]
            sim = self._similarity(cos)
        else:
            sim = similarity.to(torch.float64)
        allowed = torch.ones_like(sim, dtype=torch.bool) if returned is None else returned
        ranked = sim.masked_fill(~allowed, float("-inf"))
        order = ranked.sort(dim=0, descending=True, stable=True).indices  # ties: lower node
        k = min(self.seeds, n)
        seed_mask = torch.zeros_like(allowed).scatter_(0, order[:k], True) & allowed
        seed_weight = torch.where(seed_mask, sim.clamp_min(0.0), torch.zeros_like(sim))
        seed_weight = torch.where(seed_weight.sum(0, keepdim=True) > 0, seed_weight,
                                  seed_mask.to(sim.dtype))  # all seeds non-positive: uniform
        hood = neighbourhood(block.edge_index, n, seed_mask, self.depth)
        # the code's candidates: its nearest knn nodes plus the seeds' neighbourhood
        near = torch.zeros_like(seed_mask).scatter_(0, order[:min(self.knn, n)], True) & allowed
        cand = hood | near
        per_type = torch.tensor([self.reflection_edge_weight if t == "DERIVED_FROM_FACT"
                                 else self.edge_weight for t in EDGE_TYPES], dtype=torch.float64,
                                device=sim.device)
        weight = per_type[block.edge_type]
        # PageRank walks the seeds' neighbourhood (the code's expanded edges); 0 elsewhere
        ppr = personalised_pagerank(block.edge_index, weight, n, seed_weight, hood,
                                    alpha=self.alpha, max_iter=self.max_iter, tol=self.tol,
                                    hub_dampening=self.hub_dampening,
                                    hub_degree=self.hub_degree)
        if self.graph_only_cosine == "zero":  # the code: no similarity outside its nearest set
            sim = torch.where(near, sim, torch.zeros_like(sim))
        low = torch.finfo(sim.dtype).min
        max_sim = sim.masked_fill(~cand, low).amax(dim=0, keepdim=True)
        max_ppr = ppr.masked_fill(~cand, low).amax(dim=0, keepdim=True)
        score = (self.cosine_weight * sim / max_sim.where(max_sim > 0, torch.ones_like(max_sim))
                 + self.ppr_weight * ppr / max_ppr.where(max_ppr > 0, torch.ones_like(max_ppr)))
        return score.masked_fill(~cand, float("-inf")), cand

    def retrieve(self, questions: Sequence[Question]) -> RetrievalResult:
        if not self.blocks:
            raise RuntimeError("GAAMAMemory.retrieve called before ingest")
        self.registry.graph_ids(questions, "cpu")  # names conversations never ingested
        query_emb = self.encoder.encode([q.question for q in questions]).to(self.device)
        items: list[list[RetrievedItem]] = [[] for _ in questions]
        c_ret = torch.zeros(len(questions))
        by_conv: dict[str, list[int]] = {}
        for i, q in enumerate(questions):
            by_conv.setdefault(q.sample_id, []).append(i)
        fused = self.fused.normalised_scores(questions) if self.fused is not None else None
        returned = (self.store_returns(query_emb, list(by_conv)) if self.nearest == "store"
                    else None)
        if returned is not None:
            self._count_store(returned, by_conv)
        for sample_id, cols in by_conv.items():
            block = self.blocks[sample_id]
            similarity = None
            if fused is not None:
                similarity = self.fused_similarity(block, query_emb[cols], fused[:, cols])
            score, _ = self.scores(block, query_emb[cols], similarity,
                                   None if returned is None else returned[sample_id][:, cols])
            order = score.sort(dim=0, descending=True, stable=True)
            for j, col in enumerate(cols):
                ranked = [(int(r), float(s)) for r, s in zip(order.indices[:, j].tolist(),
                                                             order.values[:, j].tolist(),
                                                             strict=True) if s != float("-inf")]
                items[col] = self._pack(block, ranked)
                c_ret[col] = ranked[0][1] if ranked else 0.0
        gated = (c_ret < self.tau_gate) if self.tau_gate is not None else torch.zeros(
            len(questions), dtype=torch.bool)
        return self.gated_result(questions, items, c_ret.float(), gated)

    def fused_similarity(self, block: _Block, query_emb: torch.Tensor, fused: torch.Tensor
                         ) -> torch.Tensor:
        """``[N, B]``: the fused retriever's normalised score (``fused`` ``[N_turns, B]``) of the
        best turn a node covers (episodes, facts, reflections); concepts keep their cosine."""
        rows = self._cover_rows[block.sample_id]  # [N, C]
        taken = fused[rows.clamp_min(0)]  # [N, C, B]
        taken = taken.masked_fill((rows < 0)[:, :, None], float("-inf")).amax(dim=1)
        cos = cosine_scores(block.x, query_emb).to(taken.dtype)
        return torch.where((rows >= 0).any(dim=1)[:, None], taken, cos)

    def _pack(self, block: _Block, ranked: list[tuple[int, float]]) -> list[RetrievedItem]:
        """Step 6: the per-type budgets, episodes by time, trimmed to ``max_words`` by the code's
        proportional trim; returned in score order."""
        budget = {FACT: self.max_facts, REFLECTION: self.max_reflections,
                  EPISODE: self.max_episodes, CONCEPT: 0}
        taken: dict[str, list[tuple[int, float]]] = {FACT: [], REFLECTION: [], EPISODE: []}
        for r, s in ranked:
            k = block.kind[r]
            if budget[k] > len(taken.get(k, [])) and k in taken:
                taken[k].append((r, s))
        by_time = sorted(taken[EPISODE], key=lambda rs: block.timestamp[rs[0]])
        lists = {"facts": taken[FACT], "reflections": taken[REFLECTION], "episodes": by_time}
        words = {r: len(block.text[r].split()) for kind in lists.values() for r, _ in kind}
        budgets = {"facts": self.max_facts, "reflections": self.max_reflections,
                   "skills": self.max_skills, "episodes": self.max_episodes}
        kept = [rs for part in trim_code(lists, words, budgets, self.max_words).values()
                for rs in part]
        kept.sort(key=lambda rs: (-rs[1], rs[0]))
        out = []
        for r, s in kept:
            covers = block.covers[r]
            if block.kind[r] == EPISODE:
                out.append(RetrievedItem(covers[0], block.text[r], EPISODIC, s,
                                         block.timestamp[r], block.speaker[r], dated=True))
            else:
                prefix = "R" if block.kind[r] == REFLECTION else "F"
                out.append(RetrievedItem(f"{prefix}:{r}", block.text[r], block.kind[r], s,
                                         block.timestamp[r], turn_ids=covers))
        return out
