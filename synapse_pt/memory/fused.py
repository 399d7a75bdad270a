r"""``memory=fused``: the strong LLM-free retriever over turns (issue 16), a baseline of its own.

Signals, each ``[N, B]`` over all turns and questions at once (:meth:`FusedMemory.signals`):

* ``dense``: cosine of the turn rendering and the question with the speakers' names removed
  (:func:`~synapse_pt.retrieval.text.neutralise_speakers`);
* ``dense_named``: cosine with the question as asked (what ``memory=vector_rag`` ranks by);
* ``dense_sentence``: the turn's best-matching sentence, :math:`\max_{s \in i} \cos(e_s, q)`;
* ``dense_prf``: cosine with the neutral question moved towards its first-pass hits (Rocchio
  pseudo-relevance feedback): :math:`q' = q + \beta_{prf} \frac{1}{m} \sum_{i \in P_m(q)} e_i`,
  :math:`P_m(q)` the question's ``prf_docs`` best turns by ``dense`` in its own conversation,
  :math:`q'` re-normalised; evidence that shares the first hits' topic rather than the question's
  words;
* ``dense_resolved``: cosine of the turn with first and second person replaced by the speakers'
  names (:func:`~synapse_pt.retrieval.text.resolve_pronouns`, no speaker prefix) and the
  question as asked: whose life a turn describes, matched against the person the question names;
* ``bm25``: BM25 over turn renderings with the configured analyser (stop words, Porter stems)
  and ``k1``, ``b``;
* ``bm25_window``: BM25 over context windows (the turn with ``window`` neighbours either side in
  its session, after the session date);
* ``speaker``: 1 for turns spoken by the speaker the question names.

The fused score is :func:`~synapse_pt.retrieval.combine.fuse`: min-max normalised signals summed
with ``weights``, then propagated to neighbouring turns with ``rho`` and to the session with
``sigma``. ``c_ret`` is the top fused
score (the gate stays off unless ``tau_gate`` is set).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any, NamedTuple

import torch

from synapse_pt.cache.texts import TextValueCache
from synapse_pt.common.errors import ConfigError
from synapse_pt.data.render import format_date
from synapse_pt.data.schema import Dialogue, Question
from synapse_pt.models.base import TextEncoder
from synapse_pt.retrieval.bm25 import BM25Index
from synapse_pt.retrieval.combine import fuse, minmax_normalise, speaker_prior
from synapse_pt.retrieval.dense import cosine_scores, masked_topk, own_graph_mask
from synapse_pt.retrieval.text import (
    Analyzer,
    named_speaker,
    neutralise_speakers,
    resolve_pronouns,
    split_sentences_many,
)
from synapse_pt.retrieval.tokenize import tokenize

from .baselines import TurnMemory
from .declare import CostModel, SearchSpace, TurnContext

SIGNALS = ("dense", "dense_named", "dense_sentence", "dense_resolved", "dense_prf", "bm25",
           "bm25_window", "speaker")
#: the signals a BM25 variant (k1, b) changes
LEXICAL_SIGNALS = ("bm25", "bm25_window")


def bm25_variant_name(k1: float, b: float) -> str:
    """How a weight search names a BM25 variant (``"k1=1.5,b=0.75"``)."""
    return f"k1={k1:g},b={b:g}"


class FusionSearchInputs(NamedTuple):
    """The inputs of a held-out weight search (:meth:`FusedMemory.search_inputs`): per BM25
    variant an ``[S, N, B]`` stack of normalised signals in the order of ``names``, the
    ``[N, B]`` own-conversation ``mask``, and each turn's ``prev``, ``next`` and ``session``
    (the propagation structure)."""

    stacks: dict[str, torch.Tensor]
    names: list[str]
    mask: torch.Tensor
    prev: torch.Tensor
    next: torch.Tensor
    session: torch.Tensor


@dataclass(frozen=True)
class SignalSettings:
    """How the signals are computed from the turns (module docstring): ``window`` neighbours
    either side in a ``bm25_window`` document; the BM25 analyser (``stopwords``: scikit-learn's
    English stop words, ``stem``: Porter stems) and ``bm25_k1``, ``bm25_b`` of both lexical
    signals; ``prf_docs`` first-pass turns and their weight ``prf_beta`` in ``dense_prf``. The
    config keeps them flat (``memory.window``, ``memory.bm25_k1``)."""

    window: int = 1
    stopwords: bool = True
    stem: bool = True
    bm25_k1: float = 1.5
    bm25_b: float = 0.75
    prf_docs: int = 5
    prf_beta: float = 0.5

    def __post_init__(self) -> None:
        window, k1, b, prf_docs = self.window, self.bm25_k1, self.bm25_b, self.prf_docs
        if isinstance(window, bool) or not isinstance(window, int) or window < 0:
            raise ConfigError(f"memory.window must be an integer >= 0, got {window!r}")
        if not float(k1) >= 0.0 or not 0.0 <= float(b) <= 1.0:
            raise ConfigError(f"memory.bm25_k1 must be >= 0 and memory.bm25_b in [0, 1], got "
                              f"{k1!r}, {b!r}")
        if isinstance(prf_docs, bool) or not isinstance(prf_docs, int) or prf_docs < 1:
            raise ConfigError(f"memory.prf_docs must be an integer >= 1, got {prf_docs!r}")
        if not float(self.prf_beta) >= 0.0:
            raise ConfigError(f"memory.prf_beta must be >= 0, got {self.prf_beta!r}")
        for name in ("stopwords", "stem"):
            object.__setattr__(self, name, bool(getattr(self, name)))
        for name in ("bm25_k1", "bm25_b", "prf_beta"):
            object.__setattr__(self, name, float(getattr(self, name)))

    @classmethod
    def over(cls, given: SignalSettings | None, flat: Mapping[str, Any]) -> SignalSettings:
        """The group from its flat config keys ``flat``, over ``given`` when given."""
        return cls(**{**({} if given is None else asdict(given)), **flat})


class FusedMemory(TurnMemory):
    """Weighted fusion of dense, sentence, lexical, window and speaker signals over turns.

    Args:
        encoder: the sentence embedder (turns, sentences and queries).
        weights: ``{signal: weight >= 0}`` over :data:`SIGNALS` (missing: 0).
        rho: neighbour propagation of the fused score (0: off).
        sigma: session propagation: each turn gains ``sigma`` times its session's best fused score
            (0: off).
        signal_settings: how the signals are computed (:class:`SignalSettings`: ``window``,
            ``stopwords``, ``stem``, ``bm25_k1``, ``bm25_b``, ``prf_docs``, ``prf_beta``).
        text_cache: where the analyser's tokens and the sentence splits are cached (a run passes
            ``paths.cache_dir/text.sqlite``); ``None``: computed every time.
        **kwargs: the flat config keys of :class:`SignalSettings` (``memory.window``), each
            over ``signal_settings``; and ``k``, ``tau_gate``, ``turn_template``, ``device``,
            ``gate``: as every turn memory.
    """

    name = "fused"
    retrieval_fields = ("k", "tau_gate", "weights", "rho", "sigma")
    int_minimums = {"k": 1}
    cost_model = CostModel(TurnContext("k"))
    # a weight per signal and the two propagations (scripts/tune_fused.py searches the same
    # weights on precomputed signals, with the BM25 variants besides); the reference is the
    # untuned default, dense + BM25 (configs/fusion/ holds weights chosen on LoCoMo-10)
    search_space = SearchSpace(
        continuous={**{f"weights.{s}": (0.0, 1.0) for s in SIGNALS}, "rho": (0.0, 0.5),
                    "sigma": (0.0, 0.5)},
        reference={**{f"weights.{s}": float(s in ("dense", "bm25")) for s in SIGNALS},
                   "rho": 0.0, "sigma": 0.0})
    needs_bm25 = False  # its own analyser's indices, built below

    def __init__(self, encoder: TextEncoder | None = None, *,
                 weights: Mapping[str, float] | None = None, rho: float = 0.0,
                 sigma: float = 0.0, signal_settings: SignalSettings | None = None,
                 text_cache: TextValueCache | None = None, **kwargs: Any) -> None:
        flat = {k: kwargs.pop(k) for k in [f.name for f in fields(SignalSettings)]
                if k in kwargs}
        super().__init__(encoder, **kwargs)
        self.text_cache = text_cache
        self.weights = self._check_weights(weights if weights is not None
                                           else {"dense": 1.0, "bm25": 1.0})
        if not float(rho) >= 0.0:
            raise ConfigError(f"memory.rho must be >= 0, got {rho!r}")
        if not float(sigma) >= 0.0:
            raise ConfigError(f"memory.sigma must be >= 0, got {sigma!r}")
        self.sigma = float(sigma)
        self.signal_settings = s = SignalSettings.over(signal_settings, flat)
        self.prf_docs, self.prf_beta = s.prf_docs, s.prf_beta
        self.rho = float(rho)
        self.window = s.window
        self.analyzer = Analyzer(stopwords=s.stopwords, stem=s.stem)
        self.bm25_args = {"k1": s.bm25_k1, "b": s.bm25_b}
        self.node_speaker = torch.empty(0, dtype=torch.long, device=self.device)
        self.prev = torch.empty(0, dtype=torch.long, device=self.device)
        self.next = torch.empty(0, dtype=torch.long, device=self.device)
        self.session_id = torch.empty(0, dtype=torch.long, device=self.device)  # [N], 0..S-1
        self.sentence_emb: torch.Tensor | None = None
        self.sentence_turn = torch.empty(0, dtype=torch.long, device=self.device)
        self.windows: list[str] = []
        self.resolved: list[str] = []  # pronoun-resolved turn texts (dense_resolved)
        # their embeddings, [R, d]: the first R turns' (R < N until every turn is embedded)
        self._resolved_emb: torch.Tensor | None = None
        self.turn_tokens: list[list[str]] = []
        self.window_tokens: list[list[str]] = []
        self._lexical: dict[tuple[float, float], tuple[BM25Index, BM25Index]] = {}

    @staticmethod
    def _check_weights(weights: Mapping[str, float]) -> dict[str, float]:
        unknown = sorted(set(weights) - set(SIGNALS))
        if unknown:
            raise ConfigError(f"memory.weights: unknown signals {unknown}; known: {list(SIGNALS)}")
        bad = {k: v for k, v in weights.items() if not float(v) >= 0.0}
        if bad:
            raise ConfigError(f"memory.weights must be >= 0, got {bad}")
        if not any(float(v) > 0 for v in weights.values()):
            raise ConfigError("memory.weights: at least one signal needs a positive weight")
        return {k: float(v) for k, v in weights.items()}

    def configure_retrieval(self, **settings: object) -> None:
        if "weights" in settings:
            settings["weights"] = self._check_weights(settings["weights"])  # type: ignore[arg-type]
        super().configure_retrieval(**settings)

    def describe(self) -> dict[str, object]:
        return {**super().describe(), "weights": dict(self.weights), "rho": self.rho,
                "sigma": self.sigma,
                "window": self.window, "analyzer": self.analyzer.name, **self.bm25_args,
                "prf_docs": self.prf_docs, "prf_beta": self.prf_beta,
                "llm_free": True}

    # ---------------------------------------------------------------------------- ingest
    def ingest_dialogues(self, conversations: Sequence[Dialogue]) -> None:
        first = len(self.keys)
        super().ingest_dialogues(conversations)
        turns = [self.registry.turns[k] for k in self.keys[first:]]
        speakers = {c.sample_id: c.speaker_a for c in conversations}
        pair = {c.sample_id: (c.speaker_a, c.speaker_b) for c in conversations}
        for t in turns:
            a, b = pair[t.sample_id]
            self.resolved.append(resolve_pronouns(t.content, t.speaker, b if t.speaker == a else a))
        self.node_speaker = torch.cat([self.node_speaker, torch.tensor(
            [0 if t.speaker == speakers[t.sample_id] else 1 for t in turns], dtype=torch.long,
            device=self.device)])
        session = [(t.sample_id, t.session_index) for t in turns]
        prev, nxt = [], []
        for i in range(len(turns)):
            prev.append(first + i - 1 if i > 0 and session[i - 1] == session[i] else -1)
            nxt.append(first + i + 1 if i + 1 < len(turns) and session[i + 1] == session[i]
                       else -1)
            lo = i
            while lo > 0 and i - lo < self.window and session[lo - 1] == session[i]:
                lo -= 1
            hi = i
            while hi + 1 < len(turns) and hi - i < self.window and session[hi + 1] == session[i]:
                hi += 1
            self.windows.append(f"{format_date(turns[i])} "
                                + " ".join(self.renderer.render(turns[lo:hi + 1])))
        ids: dict[tuple[str, int], int] = {}
        base = int(self.session_id.max()) + 1 if self.session_id.numel() else 0
        sid = [base + ids.setdefault(key, len(ids)) for key in session]
        self.session_id = torch.cat([self.session_id, torch.tensor(sid, dtype=torch.long,
                                                                   device=self.device)])
        self.prev = torch.cat([self.prev, torch.tensor(prev, dtype=torch.long, device=self.device)])
        self.next = torch.cat([self.next, torch.tensor(nxt, dtype=torch.long, device=self.device)])
        sentences, owner = [], []
        split = split_sentences_many([t.content for t in turns], self.text_cache)
        for i, turn_sentences in enumerate(split):
            for s in turn_sentences:
                sentences.append(s)
                owner.append(first + i)
        emb = self.encoder.encode(sentences).to(self.device)
        self.sentence_emb = emb if self.sentence_emb is None else torch.cat([self.sentence_emb,
                                                                            emb])
        self.sentence_turn = torch.cat([self.sentence_turn, torch.tensor(
            owner, dtype=torch.long, device=self.device)])
        self.turn_tokens.extend(self.analyzer.many(self.renderer.render(turns), self.text_cache))
        self.window_tokens.extend(self.analyzer.many(self.windows[first:], self.text_cache))
        self._lexical = {}
        # what the configured signals embed is embedded here, once, not by the first query
        # (BEAM-500K's first conversation: 872 s of pronoun-resolved messages, issue 45)
        if self.weights.get("dense_resolved", 0.0) > 0:
            self.resolved_embeddings()

    def resolved_embeddings(self) -> torch.Tensor:
        """``[N, d]`` embeddings of the pronoun-resolved turns (``dense_resolved``). Ingestion
        computes them when the weights use the signal; otherwise (a retrieval setting that turns
        it on later, a weight search) the turns not embedded yet are embedded here, on first use.
        A vector does not depend on the texts embedded with it (:class:`HFEmbedder`), so when
        they are embedded does not change them."""
        done = 0 if self._resolved_emb is None else self._resolved_emb.shape[0]
        if self._resolved_emb is None or done < len(self.resolved):
            emb = self.encoder.encode(self.resolved[done:]).to(self.device)
            self._resolved_emb = emb if self._resolved_emb is None else torch.cat(
                [self._resolved_emb, emb])
        return self._resolved_emb

    def lexical_indices(self, k1: float | None = None, b: float | None = None
                        ) -> tuple[BM25Index, BM25Index]:
        """The turn and window BM25 indices for ``k1``, ``b`` (default: the configured ones),
        built on first use and kept."""
        k1 = self.bm25_args["k1"] if k1 is None else float(k1)
        b = self.bm25_args["b"] if b is None else float(b)
        if (k1, b) not in self._lexical:
            self._lexical[(k1, b)] = (
                BM25Index(self.turn_tokens, doc_group=self.node_graph, k1=k1, b=b),
                BM25Index(self.window_tokens, doc_group=self.node_graph, k1=k1, b=b))
        return self._lexical[(k1, b)]

    # ---------------------------------------------------------------------------- signals
    def signals(self, questions: Sequence[Question], query_graph: torch.Tensor,
                names: Sequence[str] = SIGNALS, bm25_k1: float | None = None,
                bm25_b: float | None = None) -> dict[str, torch.Tensor]:
        """``{signal: [N, B]}`` for the named signals (0 outside a question's conversation for
        the lexical ones; the caller masks); ``bm25_k1``/``bm25_b`` override the configured
        BM25 parameters (sweeps)."""
        out: dict[str, torch.Tensor] = {}
        texts = [q.question for q in questions]
        speakers = [self.registry.speakers(q.sample_id) for q in questions]
        neutral = [neutralise_speakers(q.question, s) for q, s in zip(questions, speakers,
                                                                      strict=True)]
        if {"dense", "dense_sentence", "dense_prf"} & set(names):
            q_neutral = self.encoder.encode(neutral).to(self.device)
            dense = cosine_scores(self.x, q_neutral)
            if "dense" in names:
                out["dense"] = dense
            if "dense_prf" in names:
                out["dense_prf"] = self._feedback_scores(dense, q_neutral, query_graph)
            if "dense_sentence" in names:
                cos = cosine_scores(self.sentence_emb, q_neutral)  # [S, B]
                best = torch.full((self.x.shape[0], len(questions)), -1.0, dtype=cos.dtype,
                                  device=cos.device)
                index = self.sentence_turn[:, None].expand_as(cos)
                out["dense_sentence"] = best.scatter_reduce(0, index, cos, reduce="amax")
        if {"dense_resolved", "dense_named"} & set(names):
            q_named = self.encoder.encode(texts).to(self.device)  # the question as asked, once
            if "dense_resolved" in names:
                out["dense_resolved"] = cosine_scores(self.resolved_embeddings(), q_named)
            if "dense_named" in names:
                out["dense_named"] = cosine_scores(self.x, q_named)
        tokens = self.analyzer.many(texts, self.text_cache)
        if {"bm25", "bm25_window"} & set(names):
            turn_index, window_index = self.lexical_indices(bm25_k1, bm25_b)
            if "bm25" in names:
                out["bm25"] = turn_index.scores(tokens, query_group=query_graph).T.to(self.device)
            if "bm25_window" in names:
                out["bm25_window"] = window_index.scores(
                    tokens, query_group=query_graph).T.to(self.device)
        if "speaker" in names:
            named = torch.tensor([named_speaker(q.question, s)
                                  for q, s in zip(questions, speakers, strict=True)],
                                 dtype=torch.long, device=self.device)
            out["speaker"] = speaker_prior(self.node_speaker, named)
        return out

    def _feedback_scores(self, dense: torch.Tensor, query: torch.Tensor,
                         query_graph: torch.Tensor) -> torch.Tensor:
        """``[N, B]`` cosine with the Rocchio query: ``query`` ``[B, d]`` plus ``prf_beta`` times
        the mean embedding of each question's ``prf_docs`` best turns by ``dense`` in its own
        conversation (fewer where the conversation is smaller), re-normalised. Turns tied at the
        ``prf_docs``-th place are taken lower node first (:func:`masked_topk`), so the centroid
        does not depend on which tied turn ``topk`` happens to return."""
        mask = own_graph_mask(self.node_graph, query_graph)
        values, rows = masked_topk(dense, mask, self.prf_docs)  # [m, B]
        ok = torch.isfinite(values).to(self.x.dtype)  # [m, B]
        centroid = (self.x[rows] * ok[..., None]).sum(0) / ok.sum(0).clamp_min(1)[:, None]
        moved = torch.nn.functional.normalize(query + self.prf_beta * centroid, dim=1)
        return cosine_scores(self.x, moved)

    def score(self, questions, mask, query_graph):
        used = [n for n, w in self.weights.items() if w > 0]
        signals = self.signals(questions, query_graph, used)
        return fuse(signals, {n: self.weights[n] for n in used}, mask, prev=self.prev,
                    nxt=self.next, rho=self.rho, session=self.session_id, sigma=self.sigma)

    def normalised_scores(self, questions: Sequence[Question]) -> torch.Tensor:
        """``[N, B]`` fused score of every turn, 0 outside a question's conversation, divided by
        the question's best turn (so the best turn scores 1): the strong LLM-free similarity the
        other memories take in place of the cosine (SYNAPSE's ``fused_trigger``, GAAMA's
        ``fused_seeds``, Membox's ``fused_ranking``)."""
        query_graph = self.registry.graph_ids(questions, self.device)
        mask = own_graph_mask(self.node_graph, query_graph)
        score = self.score(questions, mask, query_graph).masked_fill(~mask, 0.0)
        return score / score.amax(dim=0, keepdim=True).clamp_min(1e-12)

    def search_inputs(self, questions: Sequence[Question],
                      bm25_variants: Sequence[tuple[float, float]],
                      reference_bm25: bool = True) -> FusionSearchInputs:
        """What a held-out weight search needs (:mod:`synapse_pt.eval.tuning.fusion_search`),
        computed
        once for all ``questions``: every signal of :data:`SIGNALS` min-max normalised within
        each question's conversation, as one ``[S, N, B]`` stack per BM25 variant ``(k1, b)``
        (the lexical signals recomputed for each), the own-conversation mask and the neighbour
        and session structure the fused score propagates over. With
        ``reference_bm25`` the stacks also hold ``bm25_plain``, BM25 over plain tokens of the
        rendered turns (``memory=bm25``: a reference row, not a tuned signal)."""
        query_graph = self.registry.graph_ids(questions, self.device)
        mask = own_graph_mask(self.node_graph, query_graph)
        shared_names = [s for s in SIGNALS if s not in LEXICAL_SIGNALS]
        shared = self.signals(questions, query_graph, shared_names)
        names = list(shared_names)
        if reference_bm25:
            plain = BM25Index([tokenize(self.renderer(self.registry.turns[k])) for k in self.keys],
                              doc_group=self.node_graph)
            shared["bm25_plain"] = plain.scores([tokenize(q.question) for q in questions],
                                                query_group=query_graph).T
            names.append("bm25_plain")
        shared_stack = torch.stack([minmax_normalise(shared[s].float(), mask) for s in names])
        del shared
        stacks = {}
        for k1, b in bm25_variants:
            lex = self.signals(questions, query_graph, LEXICAL_SIGNALS, bm25_k1=k1, bm25_b=b)
            stacks[bm25_variant_name(k1, b)] = torch.cat([shared_stack, torch.stack(
                [minmax_normalise(lex[s].float(), mask) for s in LEXICAL_SIGNALS])])
        return FusionSearchInputs(stacks, [*names, *LEXICAL_SIGNALS], mask, self.prev,
                                  self.next, self.session_id)

    def row_of(self) -> dict[tuple[str, str], int]:
        """``{(sample_id, dia_id): row}`` of the turns in :meth:`normalised_scores`."""
        return {key: i for i, key in enumerate(self.keys)}


def inner_fused(encoder: TextEncoder | None, args: Mapping[str, Any] | None, *, key: str,
                owner: str, turn_template: str, device: str) -> FusedMemory | None:
    """The fused retriever another memory builds over the same turns (SYNAPSE's
    ``fused_trigger``, GAAMA's ``fused_seeds``, Membox's ``fused_ranking``; ``key`` names that
    config key in errors); ``None`` when ``args`` is. The ``owner`` memory sets ``k``,
    ``tau_gate``, the turn template and the device."""
    if args is None:
        return None
    args = dict(args)
    for owned in ("k", "tau_gate", "turn_template", "device"):
        if owned in args:
            raise ConfigError(f"memory.{key}.{owned}: set by the {owner} memory")
    return FusedMemory(encoder, turn_template=turn_template, device=device, **args)
