r"""The rejection gate as a pluggable part of retrieval (issue 14): ``memory.gate``.

A memory hands its retrieval result to its :class:`RejectionGate`, which computes the configured
signal for every question at once and refuses where it falls below the threshold. Signals
(:data:`GATE_SIGNALS`, maths in :mod:`synapse_pt.retrieval.gate_signals`):

* ``c_ret``: the memory's own retrieval confidence (SYNAPSE: the paper's C_ret under the reading
  ``c_ret_source`` names), thresholded by the memory's ``tau_gate`` (the paper's gate);
* ``speaker_share``: share of the top-``k`` turns of a name-neutral content ranking spoken by the
  speaker the question names;
* ``swap_contrast``: top-``k`` similarity of the question against pronoun-resolved turns, minus
  that of the question with the speakers' names exchanged;
* ``ownership``: mean ownership of the top-``k`` content-ranked turns by the named person
  (first- versus second-person wording);
* ``ownership_contrast``: best content score of a turn owned by the named person minus the best
  of one owned by the other;
* ``combined``: a logistic regression over any of the above, its ``weights`` and ``intercept``
  fitted on training conversations (:mod:`synapse_pt.eval.tuning.gate_fit`).

The content ranking is the cosine of each turn's rendering with the question stripped of the
speakers' names (:func:`~synapse_pt.retrieval.text.neutralise_speakers`): which events match,
whoever lived them. Every signal other than ``c_ret`` reads the question text and the ingested
turns only. A question naming no single speaker cannot be judged by them: its ``ownership`` and
``speaker_share`` are 1, its ``swap_contrast`` 0 (swapping changes nothing) and its
``ownership_contrast`` its best content score.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence

import torch

from synapse_pt.common.errors import ConfigError
from synapse_pt.data.render import TurnRenderer
from synapse_pt.data.schema import Dialogue, Question
from synapse_pt.models.base import TextEncoder
from synapse_pt.retrieval.dense import cosine_scores, masked_topk, own_graph_mask
from synapse_pt.retrieval.gate_signals import (
    logistic_combination,
    owned_share,
    ownership,
    ownership_contrast,
    speaker_share,
    swap_contrast,
)
from synapse_pt.retrieval.scoring import gate
from synapse_pt.retrieval.text import (
    named_speaker,
    neutralise_speakers,
    person_references,
    resolve_pronouns,
    swap_speakers,
)

TURN_SIGNALS = ("speaker_share", "swap_contrast", "ownership", "ownership_contrast")
GATE_SIGNALS = ("c_ret", *TURN_SIGNALS, "combined")


class RejectionGate:
    """Computes the gate signals for a batch of questions and applies the configured gate.

    Args:
        encoder: the memory's embedder (turn renderings, resolved turns, questions).
        renderer: the memory's turn template (the content ranking embeds its renderings).
        signal: which of :data:`GATE_SIGNALS` the gate thresholds.
        tau: the threshold of a signal other than ``c_ret`` (``None``: that signal is computed
            and reported but nothing is gated); ``c_ret`` is thresholded by the memory's own
            ``tau_gate`` and ``tau`` must then be unset.
        k: top turns the share, ownership and swap-contrast signals read.
        smoothing: :math:`\\alpha` of the ownership.
        weights, intercept: the ``combined`` logistic regression (``{signal: weight}``).
        device: where the turn tensors live.
    """

    def __init__(self, encoder: TextEncoder | None, renderer: TurnRenderer, *,
                 signal: str = "c_ret", tau: float | None = None, k: int = 3,
                 smoothing: float = 0.5, weights: Mapping[str, float] | None = None,
                 intercept: float = 0.0, device: str | torch.device = "cpu") -> None:
        if signal not in GATE_SIGNALS:
            raise ConfigError(f"memory.gate.signal: {signal!r} is not one of {list(GATE_SIGNALS)}")
        if signal == "c_ret" and tau is not None:
            raise ConfigError("memory.gate.tau: the c_ret gate is thresholded by the memory's "
                              "tau_gate; leave gate.tau null")
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ConfigError(f"memory.gate.k must be an integer >= 1, got {k!r}")
        if not float(smoothing) > 0.0:
            raise ConfigError(f"memory.gate.smoothing must be > 0, got {smoothing!r}")
        weights = {str(n): float(w) for n, w in (weights or {}).items()}
        bad = sorted(set(weights) - set(GATE_SIGNALS[:-1]))
        if bad:
            raise ConfigError(f"memory.gate.weights: unknown signals {bad}; known: "
                              f"{list(GATE_SIGNALS[:-1])}")
        if signal == "combined" and not weights:
            raise ConfigError("memory.gate.weights: the combined gate needs fitted weights "
                              "(scripts/gate_study.py prints them)")
        self.encoder, self.renderer = encoder, renderer
        self.signal, self.tau, self.k, self.smoothing = signal, tau, k, float(smoothing)
        self.weights, self.intercept = weights, float(intercept)
        self.device = torch.device(device)
        self.sample_ids: list[str] = []
        self.speakers: dict[str, tuple[str, str]] = {}
        self.node_graph = torch.empty(0, dtype=torch.long, device=self.device)
        self.node_speaker = torch.empty(0, dtype=torch.long, device=self.device)
        self.refs = torch.empty(0, 2, dtype=torch.float64, device=self.device)
        self.renderings: list[str] = []
        self.resolved: list[str] = []
        self._emb: tuple[torch.Tensor, torch.Tensor] | None = None

    @property
    def uses_turns(self) -> bool:
        """Whether the configured gate reads anything beyond the memory's ``c_ret``."""
        return self.signal in TURN_SIGNALS or any(n in TURN_SIGNALS for n in self.weights)

    def describe(self) -> dict[str, object]:
        out: dict[str, object] = {"gate": self.signal}
        if self.signal != "c_ret":
            out.update(gate_tau=self.tau, gate_k=self.k)
        if self.signal == "combined":
            out.update(gate_weights=dict(self.weights), gate_intercept=self.intercept)
        return out

    # ---------------------------------------------------------------------------- ingest
    def ingest(self, dialogues: Sequence[Dialogue]) -> None:
        """Index the turns of ``dialogues`` and embed them (with the memory's encoder; without
        one, the turn signals fail when first asked for)."""
        graph, speaker, refs = [], [], []
        for d in dialogues:
            if d.sample_id in self.speakers:
                raise ValueError(f"RejectionGate: conversation {d.sample_id!r} already ingested")
            self.speakers[d.sample_id] = (d.speaker_a, d.speaker_b)
            g = len(self.sample_ids)
            self.sample_ids.append(d.sample_id)
            for t in d.turns():
                is_a = t.speaker == d.speaker_a
                listener = d.speaker_b if is_a else d.speaker_a
                own, other = person_references(t.content, t.speaker, listener)
                refs.append((own, other) if is_a else (other, own))
                graph.append(g)
                speaker.append(0 if is_a else 1)
                self.renderings.append(self.renderer(t))
                self.resolved.append(resolve_pronouns(t.content, t.speaker, listener))
        dev = self.device
        self.node_graph = torch.cat([self.node_graph, torch.tensor(graph, dtype=torch.long,
                                                                   device=dev)])
        self.node_speaker = torch.cat([self.node_speaker, torch.tensor(speaker, dtype=torch.long,
                                                                       device=dev)])
        self.refs = torch.cat([self.refs, torch.tensor(refs, dtype=torch.float64,
                                                       device=dev).view(-1, 2)])
        if self.encoder is not None:  # at ingestion, not in the first query (issue 45)
            self._embeddings()

    def _embeddings(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``[N, d]`` embeddings of the rendered and of the pronoun-resolved turns; only the
        turns ingested since the last call are embedded (a vector does not depend on the texts
        embedded with it)."""
        if self.encoder is None:
            raise RuntimeError("RejectionGate: the turn signals need the memory's encoder")
        done = 0 if self._emb is None else self._emb[0].shape[0]
        if self._emb is None or done < len(self.renderings):
            new = (self.encoder.encode(self.renderings[done:]).to(self.device),
                   self.encoder.encode(self.resolved[done:]).to(self.device))
            self._emb = new if self._emb is None else (
                torch.cat([self._emb[0], new[0]]), torch.cat([self._emb[1], new[1]]))
        return self._emb

    # ---------------------------------------------------------------------------- signals
    def turn_signals(self, questions: Sequence[Question]) -> dict[str, torch.Tensor]:
        """``{signal: [B]}`` for every signal of :data:`TURN_SIGNALS`."""
        pos = {s: i for i, s in enumerate(self.sample_ids)}
        missing = sorted({q.sample_id for q in questions} - pos.keys())
        if missing:
            raise KeyError(f"RejectionGate: questions refer to conversations it never ingested: "
                           f"{missing}")
        rendered, resolved = self._embeddings()
        dev = self.device
        query_graph = torch.tensor([pos[q.sample_id] for q in questions], device=dev)
        mask = own_graph_mask(self.node_graph, query_graph)
        speakers = [self.speakers[q.sample_id] for q in questions]
        named = torch.tensor([named_speaker(q.question, s) for q, s in zip(questions, speakers,
                                                                           strict=True)],
                             dtype=torch.long, device=dev)
        texts = [q.question for q in questions]
        neutral = [neutralise_speakers(t, s) for t, s in zip(texts, speakers, strict=True)]
        swapped = [swap_speakers(t, s) for t, s in zip(texts, speakers, strict=True)]
        q_neutral, q_asked, q_swapped = (self.encoder.encode(x).to(dev)  # type: ignore[union-attr]
                                         for x in (neutral, texts, swapped))
        content = cosine_scores(rendered, q_neutral).to(torch.float64)  # [N, B]
        own = ownership(self.refs[:, 0], self.refs[:, 1], named, self.smoothing)
        top_score, top_index = masked_topk(content, mask, self.k)
        share = speaker_share(top_index.T, torch.isfinite(top_score).T, self.node_speaker, named)
        return {
            "speaker_share": torch.nan_to_num(share, nan=1.0),
            "swap_contrast": swap_contrast(cosine_scores(resolved, q_asked).to(torch.float64),
                                           cosine_scores(resolved, q_swapped).to(torch.float64),
                                           mask, self.k),
            "ownership": owned_share(content, own, mask, self.k),
            "ownership_contrast": ownership_contrast(content, own, mask),
        }

    def signals(self, questions: Sequence[Question], c_ret: torch.Tensor
                ) -> dict[str, torch.Tensor]:
        """``{signal: [B]}``: ``c_ret``, the turn signals and (with weights) ``combined``."""
        out = {"c_ret": c_ret.to(self.device, torch.float64)}
        out.update(self.turn_signals(questions))
        if self.weights:
            out["combined"] = logistic_combination(out, self.weights, self.intercept)
        return out

    def __call__(self, questions: Sequence[Question], c_ret: torch.Tensor,
                 gated_by_c_ret: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """``(gate_score [B], gated [B], signals)`` for a batch; the ``c_ret`` gate keeps the
        memory's own decision (``gated_by_c_ret``) and computes nothing more."""
        if self.signal == "c_ret":
            return c_ret, gated_by_c_ret, {}
        signals = self.signals(questions, c_ret)
        score = signals[self.signal]
        gated = (gate(score, self.tau) if self.tau is not None
                 else torch.zeros_like(score, dtype=torch.bool))
        return score.cpu(), gated.cpu(), {k: v.cpu() for k, v in signals.items()}


def build_gate(settings: Mapping[str, object] | None, encoder: TextEncoder | None,
               renderer: TurnRenderer, device: str | torch.device) -> RejectionGate:
    """A memory's gate from its ``gate`` config mapping (``None``: the paper's c_ret gate)."""
    settings = dict(settings or {})
    known = set(inspect.signature(RejectionGate.__init__).parameters) - {
        "self", "encoder", "renderer", "device"}
    unknown = sorted(set(settings) - known)
    if unknown:
        raise ConfigError(f"memory.gate: unknown keys {unknown}; known: {sorted(known)}")
    return RejectionGate(encoder, renderer, device=device, **settings)  # type: ignore[arg-type]
