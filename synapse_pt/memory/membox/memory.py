r"""Membox (public code nnnoidea/Membox, ``membox.py``) in the same harness: ``memory=membox``
(SPEC §2).

* **Topic Loom** cuts each session into boxes of consecutive turns. The code asks an LLM whether
  a new message shifts the topic of the two before it (only "Yes, same topic" extends the box); the
  LLM-free build (``membox-llm-free`` in every result row) cuts where the cosine of the new turn
  and the mean of the two previous turns' embeddings falls below ``boundary_threshold``. As in the
  code, a new session always closes the box and the second message of a box joins without a test.
* A sealed **box** stores a ``Start: <date>`` line and its messages as ``"{session_time}
  {speaker}: {text}"`` lines (the date as the data writes it, no image caption: ``membox.py``
  ``_get_content_str``), 3-8
  keywords and a topic phrase (the configured LLM-free extractor over the box; the topic is the
  first keyword) and its events: LLM-free, the box's sentences of at least ``min_event_words``
  content words (greetings and thanks are not events) with first and second person replaced by
  the speakers' names.
* **Trace Weaver** (``membox.py`` ``TraceLinker.run``) links events across
  boxes: each event of a new box names as candidate the trace holding its most similar stored
  event, when that cosine is at least ``trace_threshold`` (0.5); each candidate trace is then
  verified against *all* of the box's events (the code: one LLM call per candidate trace, a
  failed call joining them all; LLM-free, the stated rule "an event joins when its best cosine to
  that trace is >= trace_threshold"), so an event may join several traces. The events that join
  none become new traces: the code groups them into chains by an LLM call; LLM-free, a box's
  unmatched events form one chain.
* **Retrieval**: the cosine of the question with each box's embedding (content + events + topic
  phrase + keywords, the code's ``content_event_topic_kw``, embedded whole however long), the
  top ``k`` (5) boxes. ``mode="compact"`` (Membox-Compact) returns the
  boxes; ``mode="trace"`` (Membox-Trace, the code's default) follows each box, in rank order,
  with the timestamped events of the first trace holding one of its events, and as the code's
  ``_build_trace_contexts`` leaves out a box whose trace was already shown or that has none;
  a trace event reads ``<box start>: <event>``. Every item lists the LoCoMo turns it covers.

With an LLM extractor (``extractor=llm llm=...``) the **LLM build** (``membox-llm``) asks the model
instead (:mod:`synapse_pt.memory.membox.llm_build`): the Topic Loom decision for every turn the rule
does not decide, the keywords, topic and events of each box (an event then covers its box's
turns), the verification of each candidate trace and the grouping of unmatched events into
chains, with the code's own prompts read from its ``membox.py`` (``prompts="upstream"``) or our
wordings (``"ours"``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import torch

from synapse_pt.common import groups
from synapse_pt.data.render import DEFAULT_TURN_TEMPLATE, TurnRenderer, format_date
from synapse_pt.data.schema import Dialogue, Question, Turn
from synapse_pt.graph.extraction import ConceptExtractor, extractor_llm
from synapse_pt.models.base import TextEncoder
from synapse_pt.models.long_text import whole_text_encoder
from synapse_pt.models.structured import (
    StructuredOutputError,
    StructuredResult,
    generate_structured,
    recheck,
)
from synapse_pt.retrieval.dense import cosine_scores, masked_topk, own_graph_mask
from synapse_pt.retrieval.items import RetrievedItem
from synapse_pt.retrieval.text import Analyzer, resolve_pronouns, split_sentences

from ..base import MemorySystem, RetrievalResult
from ..declare import CostModel, ModelDependentBuild, SearchSpace, SessionUnits
from ..episodic import TurnRegistry
from ..fused import inner_fused
from ..gate import build_gate
from .llm_build import (
    BoxReply,
    MemboxFailure,
    MemboxPrompts,
    chains_of_code,
    set_order,
)
from .settings import MODES, Build, Retrieval

log = logging.getLogger(__name__)

_CONTENT = Analyzer(stopwords=True)  # content words of a sentence


class _Woven:
    """One conversation's woven events: their keys in the order woven, each key's row and their
    embeddings as the rows of one matrix (stacked once per batch of new rows)."""

    def __init__(self) -> None:
        self.keys: list[tuple[int, int]] = []
        self.row: dict[tuple[int, int], int] = {}
        self._new: list[torch.Tensor] = []
        self._matrix: torch.Tensor | None = None

    def add(self, key: tuple[int, int], emb: torch.Tensor) -> None:
        self.row[key] = len(self.keys)
        self.keys.append(key)
        self._new.append(emb)

    def matrix(self) -> torch.Tensor:
        """``[S, d]``: row ``row[key]`` is the embedding of ``key``."""
        if self._new:
            new = torch.stack(self._new)
            self._matrix = new if self._matrix is None else torch.cat([self._matrix, new])
            self._new = []
        assert self._matrix is not None
        return self._matrix


@dataclass
class Box:
    """A sealed box: its turns, stored lines, keywords, topic and events (``(text, the turns it
    comes from, date)``)."""

    sample_id: str
    turns: list[Turn]
    lines: list[str]
    keywords: list[str]
    topic: str
    events: list[tuple[str, tuple[str, ...], datetime]] = field(default_factory=list)
    #: the box's first line, ``"Start: <date>"``
    header: str = ""
    #: the date its trace events carry: the first turn's session date as the data writes it
    start: str = ""
    #: LLM build: the text indexed for the events where the reply's events were no list (the
    #: code's ``events_text``; the box then has no event)
    events_text: str | None = None
    #: LLM build: events of this box's traces that are none of :attr:`events`, as a chain reply
    #: wrote them (the code stores the model's text); keys ``(box, len(events) + i)``
    trace_only: list[tuple[str, tuple[str, ...], datetime]] = field(default_factory=list)

    @property
    def content(self) -> str:
        return "\n".join([self.header, *self.lines] if self.header else self.lines)

    def event(self, i: int) -> tuple[str, tuple[str, ...], datetime]:
        """Event ``i``: one of :attr:`events`, then one of :attr:`trace_only`."""
        n = len(self.events)
        return self.events[i] if i < n else self.trace_only[i - n]

    @property
    def n_events(self) -> int:
        return len(self.events) + len(self.trace_only)

    def index_text(self) -> str:
        """What the box is embedded as: content, then events, then the topic phrase and the
        keywords (the code's ``content_event_topic_kw``)."""
        tail = ", ".join(self.keywords)
        if self.topic:
            tail = f"{self.topic} {tail}".strip()
        events = [self.events_text] if self.events_text else [e for e, _, _ in self.events]
        return "\n".join([self.content, *events, tail])


def topic_boundaries(session_emb: torch.Tensor, threshold: float) -> list[bool]:
    """For the turns of one session (``[T, d]`` unit embeddings): True where a turn opens a new
    box. Turn 0 opens one; the second turn of a box always joins it; a later turn opens a box when
    its cosine with the mean of the two previous turns is below ``threshold``."""
    opens: list[bool] = []
    size = 0
    for i in range(session_emb.shape[0]):
        if i == 0:
            new = True
        elif size < 2:
            new = False
        else:
            context = session_emb[i - 2:i].mean(dim=0)
            context = context / context.norm().clamp_min(1e-12)
            new = float(session_emb[i] @ context) < threshold
        size = 1 if new else size + 1
        opens.append(new)
    return opens


class MemboxMemory(MemorySystem):
    """Topic boxes of consecutive turns, linked into event traces; top boxes by cosine.

    Args:
        encoder: the embedder of turns, boxes, events and questions.
        extractor: the LLM-free keyword extractor (keywords and topic of a box).
        retrieval, build: the settings (:class:`~.settings.Retrieval`: ``mode``, ``k``;
            :class:`~.settings.Build`: the others under Settings; the code's values by default).
        fused_ranking: ``None`` (the code's cosine of the box embedding) or
            :class:`~synapse_pt.memory.fused.FusedMemory` arguments: a box scores as the fused
            LLM-free retriever's best turn in it (issue 16: Membox on the strong stack).
        tau_gate, gate, turn_template, device: as every memory.
        **settings: the config's flat keys (``memory.k``, ``memory.boundary_threshold``), each a
            field of one of the two groups.

    Settings:
        mode: ``"compact"`` (boxes only) or ``"trace"`` (boxes + trace events; the code's default).
        k: boxes per question (code: 5).
        boundary_threshold: LLM-free Topic Loom cut (ours, no code value: the code asks an LLM).
        trace_threshold: Trace Weaver candidate cosine (code: 0.5).
        min_keywords, max_keywords: keywords per box of the LLM-free build (code's prompt: 3-8;
            the LLM build keeps every keyword of a reply, as the code).
        min_event_words: content words (stop words aside) a sentence needs to be an event (ours).
        prompts: LLM build: ``"upstream"`` (the code's prompts, read from ``membox.py``,
            rendered and read as its code does: :class:`~synapse_pt.memory.membox.llm_build.
            MemboxPrompts`) or ``"ours"`` (our wordings, before #44).
        upstream_path: the folder of the upstream files (``None``: found as
            :mod:`synapse_pt.data.upstream` says).
        max_tokens: LLM build: completion budget of a box extraction, verification,
            or chain grouping (``None``: the prompts' own, upstream 16,384 as the code
            sets none, ours 512).
        loom_max_tokens: the same for a Topic Loom decision (``None``: upstream 16,384, ours 8).
        verify_parse: a verification reply read ``"strict"`` (``json.loads`` of the whole
            reply, no repair round; unreadable joins all events: the code's
            ``_llm_event_filter``) or ``"fenced"`` (fenced JSON, one repair round; ours).
        box_parse, chain_parse, temperature, seed, budget_param: LLM build: the readings of a
            box and a chain reply and the sampling of every request
            (``configs/memory/membox.yaml``).
    """

    name = "membox"
    retrieval_fields = ("mode", "k", "tau_gate")
    int_minimums = {"k": 1, "min_event_words": 0, "max_tokens": 1, "loom_max_tokens": 1}
    choices = {"mode": MODES}
    # PROMPT_QA_ANSWER (membox.py); its evaluation scores F1, judged here by mem0's judge
    own_steps = ("membox", "mem0")
    cost_model = CostModel(SessionUnits("k", label="k boxes"), extraction=ModelDependentBuild())
    search_space = SearchSpace(discrete={"mode": MODES, "k": (3, 5, 10)},
                               reference={"mode": "trace", "k": 5})

    def __init__(self, encoder: TextEncoder, extractor: ConceptExtractor, *,
                 retrieval: Retrieval | None = None, build: Build | None = None,
                 fused_ranking: Mapping[str, Any] | None = None,
                 tau_gate: float | None = None, gate: Mapping[str, Any] | None = None,
                 turn_template: str = DEFAULT_TURN_TEMPLATE, device: str = "cpu",
                 **settings: Any) -> None:
        self.llm = extractor_llm(extractor, "membox")
        retrieval, self.build = groups.split_settings(
            "MemboxMemory", ((Retrieval, retrieval), (Build, build)), settings)
        b = self.build
        # the LLM build's requests and readers (the upstream prompts read here: a run without
        # the files stops before its build); none for the LLM-free build
        self.prompts = None if self.llm is None else MemboxPrompts(
            b.prompts, upstream_path=b.upstream_path, max_tokens=b.max_tokens,
            loom_max_tokens=b.loom_max_tokens, verify_parse=b.verify_parse,
            box_parse=b.box_parse, chain_parse=b.chain_parse, temperature=b.temperature,
            seed=b.seed, budget_param=b.budget_param)
        self._raw_date: dict[tuple[str, str], str] = {}  # (sample, dia_id): session date string
        self.encoder, self.extractor = encoder, extractor
        # the box index texts reach the embedding whole, as the code's encoder
        # (text-embedding-3-small, 8,191-token window) sees them
        self.box_encoder = whole_text_encoder(encoder)
        # mode and k change through configure_retrieval (retrieval_fields)
        self.mode, self.k = retrieval.mode, retrieval.k
        self.boundary_threshold, self.trace_threshold = b.boundary_threshold, b.trace_threshold
        self.min_keywords, self.max_keywords = b.min_keywords, b.max_keywords
        self.min_event_words = b.min_event_words
        self.failures: list[MemboxFailure] = []
        self.extraction_attempts = 0  # LLM requests of the build (loom, box, verify, chains)
        self.untraced_events = 0  # LLM build: unmatched events no chain reply put in a trace
        self.fused = inner_fused(encoder, fused_ranking, key="fused_ranking", owner="Membox",
                                 turn_template=turn_template, device=device)
        self.tau_gate = tau_gate
        self.renderer = TurnRenderer(turn_template)
        self.device = torch.device(device)
        self.registry = TurnRegistry(self.renderer)
        self.gate = build_gate(gate, encoder, self.renderer, self.device)
        self.boxes: list[Box] = []
        self.box_emb: torch.Tensor | None = None
        # traces: per trace, its events as (box index, event index); an event's traces (several)
        self.traces: list[list[tuple[int, int]]] = []
        self.event_traces: dict[tuple[int, int], list[int]] = {}
        self._event_emb: dict[tuple[int, int], torch.Tensor] = {}  # until the event is woven
        # per conversation: its traces (ids, oldest first), its woven events in the order they
        # were woven and their embeddings (rows of one matrix, grown as events are woven)
        self._conv_traces: dict[str, list[int]] = {}
        self._woven: dict[str, _Woven] = {}
        self.ingest_seconds = 0.0

    def describe(self) -> dict[str, object]:
        llm_free = self.llm is None
        return {"memory": self.name, "build": "membox-llm-free" if llm_free else "membox-llm",
                "llm_free": llm_free, "extraction_failures": len(self.failures),
                "extraction_attempts": self.extraction_attempts,
                **({} if llm_free else {"untraced_events": self.untraced_events}),
                "mode": self.mode, "k": self.k, "encoder": self.encoder.name,
                "extractor": self.extractor.name, "boundary_threshold": self.boundary_threshold,
                "trace_threshold": self.trace_threshold,
                # the LLM build's prompts, readers and sampling (None: LLM-free) and the
                # upstream files they read
                **(self.prompts.describe() if self.prompts is not None else dict.fromkeys(
                    ("prompts", "max_tokens", "loom_max_tokens", "verify_parse"))),
                "upstream_prompts": [] if llm_free else self.prompts.files,
                "turn_template": self.renderer.template,
                "tau_gate": self.tau_gate, **self.gate.describe()}

    # ---------------------------------------------------------------------------- ingest
    def ingest_dialogues(self, dialogues: Sequence[Dialogue]) -> None:
        start = time.perf_counter()
        self.registry.add(dialogues)
        self._raw_date.update({(d.sample_id, t.dia_id): s.date_time_raw
                               for d in dialogues for s in d.sessions for t in s.turns})
        first = len(self.boxes)
        groups = [(d, turns) for d in dialogues for turns in self._loom(d)]
        if self.llm is None:
            self._seal_llm_free(groups)
        else:
            self._seal_llm(groups)
        new = self.boxes[first:]
        emb = self.box_encoder.encode([b.index_text() for b in new]).to(self.device)
        self.box_emb = emb if self.box_emb is None else torch.cat([self.box_emb, emb])
        self._weave(first)
        if self.fused is not None:
            self.fused.ingest_dialogues(dialogues)
        if self.gate.uses_turns:
            self.gate.ingest(dialogues)
        self.ingest_seconds += time.perf_counter() - start

    def _loom(self, d: Dialogue) -> list[list[Turn]]:
        """Topic Loom over each session: the boxes' turns. LLM-free: the cosine rule
        (:func:`topic_boundaries`); LLM build: the model's Yes / No / Partially Shifted, asked
        for every turn the rule does not decide (turn 0 opens, a box's second turn joins),
        round by round over all sessions of ``d``."""
        sessions = [list(s.turns) for s in d.sessions if s.turns]
        if self.llm is None:
            groups: list[list[Turn]] = []
            for turns in sessions:
                emb = self.encoder.encode([t.content for t in turns])
                for t, opens in zip(turns, topic_boundaries(emb, self.boundary_threshold),
                                    strict=True):
                    if opens:
                        groups.append([])
                    groups[-1].append(t)
            return groups
        boxes: list[list[list[Turn]]] = [[[turns[0]]] for turns in sessions]
        for r in range(1, max((len(t) for t in sessions), default=0)):
            asks, todo = [], []
            for i, turns in enumerate(sessions):
                if r >= len(turns):
                    continue
                if len(boxes[i][-1]) < 2:  # the second message joins without asking
                    boxes[i][-1].append(turns[r])
                    continue
                asks.append(self.prompts.loom_request(turns[r - 2:r], turns[r]))
                todo.append(i)
            results = generate_structured(self.llm, asks, parse=self.prompts.parse_loom
                                          ) if asks else []
            self.extraction_attempts += len(asks)
            for i, res in zip(todo, results, strict=True):
                turn = sessions[i][r]
                if not res.ok:
                    self._fail("loom", d.sample_id, turn.dia_id, res.error or "unreadable")
                if res.ok and res.value == "yes":
                    boxes[i][-1].append(turn)
                else:
                    boxes[i].append([turn])
        return [box for per_session in boxes for box in per_session]

    def _lines(self, turns: Sequence[Turn]) -> list[str]:
        """A box's message lines, ``<date> <speaker>: <text>`` (membox.py:
        ``f"{ts} {m.get('role')}: {m.get('text')}"``)."""
        return [f"{self._raw(t)} {t.speaker}: {t.text.strip()}" for t in turns]

    def _raw(self, turn: Turn) -> str:
        """The turn's session date as the data writes it (our date where the data has none)."""
        return self._raw_date.get((turn.sample_id, turn.dia_id)) or format_date(turn)

    def _box(self, d: Dialogue, turns: list[Turn], keywords: list[str], topic: str,
             events: list[tuple[str, tuple[str, ...], datetime]]) -> Box:
        """A sealed box with its lines, ``Start:`` header and start date."""
        start = self._raw(turns[0])
        return Box(d.sample_id, turns, self._lines(turns), keywords, topic, events,
                   header=f"Start: {start}", start=start)

    def _seal_llm_free(self, groups: list[tuple[Dialogue, list[Turn]]]) -> None:
        """Keywords and topic from the LLM-free extractor, events from the box's sentences."""
        keywords = self.extractor.extract([turns for _, turns in groups])
        for (d, turns), words in zip(groups, keywords, strict=True):
            words = list(dict.fromkeys(words))[: self.max_keywords]
            events = []
            for t in turns:
                listener = d.speaker_b if t.speaker == d.speaker_a else d.speaker_a
                events.extend((resolve_pronouns(s, t.speaker, listener), (t.dia_id,),
                               t.timestamp)
                              for s in split_sentences(t.content)
                              if len(_CONTENT(s)) >= self.min_event_words)
            self.boxes.append(self._box(d, turns, words, words[0] if words else "", events))

    def _seal_llm(self, groups: list[tuple[Dialogue, list[Turn]]]) -> None:
        """Keywords, topic and events by the LLM, all boxes in one batch; an event covers its
        box's turns (the model names no message)."""
        requests = [self.prompts.box_request(self._lines(turns), self._box(d, turns, [], "",
                                                                           []).header)
                    for d, turns in groups]
        results = generate_structured(self.llm, requests, parse=self.prompts.parse_box,
                                      rounds=self.prompts.box_rounds)
        self.extraction_attempts += len(requests)
        for (d, turns), res in zip(groups, results, strict=True):
            covers = tuple(t.dia_id for t in turns)
            reply = res.value if res.ok else BoxReply([], "", [])
            if not res.ok:  # the code keeps the box empty (process_new_box's except): counted
                self._fail("box", d.sample_id, f"{covers[0]}..{covers[-1]}",
                           res.error or "unreadable")
            # every keyword of the reply, as the code keeps them (no cap)
            box = self._box(d, turns, reply.keywords, reply.topic,
                            [(e, covers, turns[0].timestamp) for e in reply.events])
            box.events_text = reply.events_text
            self.boxes.append(box)

    def _weave(self, first: int) -> None:
        """Trace Weaver over the boxes from ``first`` on, in order, the boxes of all
        conversations round by round."""
        per_conv: dict[str, list[int]] = {}
        for b in range(first, len(self.boxes)):
            per_conv.setdefault(self.boxes[b].sample_id, []).append(b)
        for r in range(max((len(v) for v in per_conv.values()), default=0)):
            self._weave_code([v[r] for v in per_conv.values() if r < len(v)])

    def _new_trace(self, keys: Sequence[tuple[int, int]]) -> None:
        self.traces.append([])
        if keys:
            sample_id = self.boxes[keys[0][0]].sample_id
            self._conv_traces.setdefault(sample_id, []).append(len(self.traces) - 1)
        self._join(len(self.traces) - 1, keys)

    def _join(self, trace: int, keys: Sequence[tuple[int, int]]) -> None:
        for key in keys:
            self.traces[trace].append(key)
            if key not in self.event_traces:  # first woven: a row of its conversation's matrix
                woven = self._woven.setdefault(self.boxes[key[0]].sample_id, _Woven())
                woven.add(key, self._event_emb.pop(key))
            self.event_traces.setdefault(key, []).append(trace)

    def _stored_cosines(self, b: int) -> tuple[torch.Tensor, _Woven | None, torch.Tensor]:
        """The new box's event embeddings ``[E, d]``, its conversation's woven events and their
        cosines to the box's events ``[S, E]`` (one product; ``None`` and ``[0, E]`` before any
        event of the conversation is woven)."""
        box = self.boxes[b]
        emb = self.encoder.encode([e for e, _, _ in box.events]).to(self.device)
        woven = self._woven.get(box.sample_id)
        if woven is None:
            return emb, None, torch.empty(0, len(box.events))
        return emb, woven, cosine_scores(woven.matrix(), emb)

    def _trace_sims(self, b: int) -> tuple[torch.Tensor, list[int], torch.Tensor]:
        """The new box's event embeddings ``[E, d]``, the ids of its conversation's traces
        (oldest first) and ``[T, E]``: each trace's best cosine to each event (the code's
        ``trace_best``), the maximum over the trace's events of their cosines."""
        emb, woven, cos = self._stored_cosines(b)
        ids = self._conv_traces.get(self.boxes[b].sample_id, [])
        if woven is None or not ids:
            return emb, [], torch.empty(0, len(self.boxes[b].events))
        local = {t: i for i, t in enumerate(ids)}
        rows = [woven.row[key] for t in ids for key in self.traces[t]]
        owner = [local[t] for t in ids for _ in self.traces[t]]
        index = torch.tensor(owner, device=cos.device)[:, None].expand(-1, cos.shape[1])
        sims = torch.full((len(ids), cos.shape[1]), float("-inf"), dtype=cos.dtype,
                          device=cos.device)
        picked = cos[torch.tensor(rows, device=cos.device)]  # [pairs, E]
        return emb, ids, sims.scatter_reduce_(0, index, picked, "amax")

    def _weave_code(self, batch: list[int]) -> None:
        """The code's Trace Weaver (``membox.py`` ``TraceLinker.run``) for one box per
        conversation. Each event's candidate is the trace holding its most similar event (ties:
        the older trace), kept at cosine >= ``trace_threshold``; each candidate trace is then
        verified against *all* the box's events, so an event may join several traces: by the LLM
        (one call per candidate trace; a failed call joins them all, counted) or, LLM-free, by
        the stated rule "an event joins a candidate trace when its best cosine to that trace is
        >= trace_threshold". The events that join no trace become new traces: grouped into chains
        by the LLM (one call; a single event needs none), or LLM-free as one chain per box."""
        plans = []
        for b in batch:
            box = self.boxes[b]
            if not box.events:
                plans.append(None)
                continue
            emb, ids, sims = self._trace_sims(b)
            for ei in range(len(box.events)):
                self._event_emb[(b, ei)] = emb[ei]
            selected: list[int] = []
            if ids:
                best = sims.max(dim=0)  # first maximum: the older trace
                # the candidate traces in the order the code's set of their ids iterates
                # (TraceLinker.run: selected_trace_ids; ints hash to themselves)
                selected = list({ids[int(best.indices[e])] for e in range(len(box.events))
                                 if float(best.values[e]) >= self.trace_threshold})
            plans.append((ids, sims, selected))
        joined: dict[int, dict[int, list[int]]] = {}  # box -> trace -> event numbers
        if self.llm is None:
            for b, plan in zip(batch, plans, strict=True):
                if plan is None:
                    continue
                ids, sims, selected = plan
                joined[b] = {t: [e for e in range(sims.shape[1])
                                 if float(sims[ids.index(t), e]) >= self.trace_threshold]
                             for t in selected}
        else:
            asks = [(b, t) for b, plan in zip(batch, plans, strict=True) if plan
                    for t in plan[2]]
            requests = [self.prompts.verify_request(self._trace_lines(t),
                                                    [e for e, _, _ in self.boxes[b].events])
                        for b, t in asks]
            results = generate_structured(self.llm, requests, parse=self.prompts.verify_shape
                                          ) if requests else []
            self.extraction_attempts += len(requests)
            for (b, t), res in zip(asks, results, strict=True):
                texts = [e for e, _, _ in self.boxes[b].events]
                related = recheck(res, self.prompts.parse_verify, texts)
                if related is None:  # the code: an unreadable verdict joins every event
                    self._fail("verify", self.boxes[b].sample_id,
                               f"{self.boxes[b].turns[0].dia_id} -> trace {t}",
                               res.error or "unreadable")
                    related = list(range(len(texts)))
                # the code keeps the related texts as a set (_llm_event_filter): each text once,
                # the entry's events in the set's order (TraceLinker.run, list(related))
                joined.setdefault(b, {})[t] = [texts.index(x) for x in set_order(
                    [texts[e] for e in related])]
        leftovers: list[tuple[int, list[int]]] = []
        for b, plan in zip(batch, plans, strict=True):
            if plan is None:
                continue
            for t, events in sorted(joined.get(b, {}).items()):
                self._join(t, [(b, e) for e in events])
            matched = {e for events in joined.get(b, {}).values() for e in events}
            events = self.boxes[b].events
            if self.llm is None:
                rest = [e for e in range(len(events)) if e not in matched]
            else:  # the code: the events whose text joined no trace (TraceLinker.run)
                texts = {events[e][0] for e in matched}
                rest = [e for e in range(len(events)) if events[e][0] not in texts]
            if rest:
                leftovers.append((b, rest))
        self._unmatched(leftovers)

    def _unmatched(self, leftovers: list[tuple[int, list[int]]]) -> None:
        """New traces from each box's unmatched events (see :meth:`_weave_code`)."""
        ask = [(b, rest) for b, rest in leftovers if self.llm is not None and len(rest) > 1]
        chains: dict[int, list[list[tuple[int, int]]]] = {}
        if ask:
            texts = [[self.boxes[b].events[e][0] for e in rest] for b, rest in ask]
            requests = [self.prompts.chain_request(t) for t in texts]
            results = generate_structured(self.llm, requests, parse=self.prompts.chain_shape,
                                          rounds=self.prompts.chain_rounds)
            self.extraction_attempts += len(requests)
            for (b, rest), res, events in zip(ask, results, texts, strict=True):
                where = self.boxes[b].turns[0].dia_id
                if self.prompts.chain_parse == "strict":
                    chains[b] = self._code_chains(b, res, where)
                    traced = {self.boxes[b].event(e)[0] for g in chains[b] for _, e in g}
                    # the code keeps no trace of an event its chain reply left out
                    self.untraced_events += sum(t not in traced for t in events)
                    continue
                groups = recheck(res, self.prompts.parse_chains, events)
                if groups is None:  # counted; each event its own trace (the code drops them)
                    self._fail("chains", self.boxes[b].sample_id, where,
                               res.error or "unreadable")
                    groups = [[i] for i in range(len(rest))]
                chains[b] = [[(b, rest[i]) for i in g] for g in groups]
        for b, rest in leftovers:
            # LLM-free, our stated rule: a box's unmatched events form one chain
            for keys in chains.get(b, [[(b, e) for e in rest]]):
                self._new_trace(keys)

    def _code_chains(self, b: int, res: StructuredResult, where: str
                     ) -> list[list[tuple[int, int]]]:
        """The new traces of a chain reply read as the code reads it (:func:`.llm_build.
        chains_of_code`): each event text the model wrote is the box's event of that exact text
        or, when none, a trace-only event of the box with the model's text (embedded here, as
        the code embeds a trace's events); a reply the code cannot read leaves the events
        without a trace, counted."""
        box = self.boxes[b]
        text = res.responses[-1].text
        try:
            groups = chains_of_code(text)
        except StructuredOutputError as err:
            self._fail("chains", box.sample_id, where, f"{err} (the events get no trace)")
            return []
        if not groups:
            stripped = (text or "").strip()
            if stripped != "{}":  # the code's json.loads failed: {} and no trace
                self._fail("chains", box.sample_id, where,
                           f"not JSON as a whole, no trace (the code's {{}}): {stripped[:80]!r}")
            return []
        own = {e: i for i, (e, _, _) in reversed(list(enumerate(box.events)))}
        new = [t for g in groups for t in g if t not in own]
        new = list(dict.fromkeys(new))
        if new:
            emb = self.encoder.encode(new).to(self.device)
            covers = tuple(t.dia_id for t in box.turns)
            for t, row in zip(new, emb, strict=True):
                own[t] = box.n_events
                self._event_emb[(b, box.n_events)] = row
                box.trace_only.append((t, covers, box.turns[0].timestamp))
        return [[(b, own[t]) for t in g] for g in groups]

    def _trace_lines(self, trace: int) -> list[str]:
        """A trace's events as the code shows them to the LLM: ``"{date}: {event}"``."""
        return [f"{self.boxes[bb].start}: {self.boxes[bb].event(ei)[0]}"
                for bb, ei in self.traces[trace]]

    def _fail(self, stage: str, sample_id: str, where: str, error: str) -> None:
        self.failures.append(MemboxFailure(stage, sample_id, where, error))
        log.warning("membox %s failed for %s %s (counted in extraction_failures): %s", stage,
                    sample_id, where, error)

    # ---------------------------------------------------------------------------- retrieve
    def retrieve(self, questions: Sequence[Question]) -> RetrievalResult:
        if self.box_emb is None:
            raise RuntimeError("MemboxMemory.retrieve called before ingest")
        self.registry.graph_ids(questions, "cpu")  # names conversations never ingested
        box_conv = [b.sample_id for b in self.boxes]
        order = {s: i for i, s in enumerate(self.registry.order)}
        box_graph = torch.tensor([order[s] for s in box_conv], device=self.device)
        query_graph = torch.tensor([order[q.sample_id] for q in questions], device=self.device)
        mask = own_graph_mask(box_graph, query_graph)
        if self.fused is None:
            cos = cosine_scores(self.box_emb, self.encoder.encode(
                [q.question for q in questions]).to(self.device))
        else:  # a box scores as the fused retriever's best turn in it
            cos = self.fused_box_scores(questions)
        values, indices = masked_topk(cos, mask, self.k)  # [k, B]; ties: the lower box
        items: list[list[RetrievedItem]] = []
        for j in range(len(questions)):
            row = []
            shown: set[int] = set()
            for b, s in zip(indices[:, j].tolist(), values[:, j].tolist(), strict=True):
                if s == float("-inf"):
                    continue
                if self.mode == "compact":
                    row.append(self._box_item(b, s))
                    continue
                trace = self._first_trace(b)
                if trace is None or trace in shown:
                    continue  # the code: a box without a trace, or whose trace is shown, is out
                shown.add(trace)
                row += [self._box_item(b, s), self._trace_item(trace, s)]
            items.append(row)
        top = values[0]
        c_ret = torch.where(torch.isfinite(top), top, torch.zeros_like(top)).float().cpu()
        gated = (c_ret < self.tau_gate) if self.tau_gate is not None else torch.zeros(
            len(questions), dtype=torch.bool)
        return self.gated_result(questions, items, c_ret, gated)

    def fused_box_scores(self, questions: Sequence[Question]) -> torch.Tensor:
        """``[boxes, B]``: the fused retriever's normalised score of each box's best turn."""
        score = self.fused.normalised_scores(questions)  # type: ignore[union-attr]
        row = self.fused.row_of()  # type: ignore[union-attr]
        width = max(len(b.turns) for b in self.boxes)
        rows = torch.tensor([[row[(b.sample_id, t.dia_id)] for t in b.turns]
                             + [-1] * (width - len(b.turns)) for b in self.boxes],
                            dtype=torch.long, device=self.device)
        taken = score[rows.clamp_min(0)].masked_fill((rows < 0)[:, :, None], float("-inf"))
        return taken.amax(dim=1)

    def _first_trace(self, b: int) -> int | None:
        """The oldest trace holding one of the box's events (the code's first trace whose
        ``box_ids`` hold the box)."""
        traces = [t for ei in range(self.boxes[b].n_events)
                  for t in self.event_traces.get((b, ei), [])]
        return min(traces) if traces else None

    def _box_item(self, b: int, score: float) -> RetrievedItem:
        box = self.boxes[b]
        return RetrievedItem(f"B:{b}", box.content, "box", score, box.turns[0].timestamp,
                             turn_ids=tuple(t.dia_id for t in box.turns), dated=True)

    def _trace_item(self, trace: int, score: float) -> RetrievedItem:
        events = [self.boxes[bb].event(ei) for bb, ei in self.traces[trace]]
        # membox.py _trace_events_for_box: f"{ts}: {ev_clean}"
        text = "\n".join(f"{self.boxes[bb].start}: {self.boxes[bb].event(ei)[0].strip()}"
                         for bb, ei in self.traces[trace])
        return RetrievedItem(f"T:{trace}", text, "trace", score, events[0][2],
                             turn_ids=tuple(dict.fromkeys(d for _, ds, _ in events for d in ds)),
                             dated=True)
