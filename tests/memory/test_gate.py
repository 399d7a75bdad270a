"""The pluggable rejection gate (synapse_pt/memory/gate.py): its signals against a plain
per-question computation on the shipped sample, and its decisions inside the memories."""

from __future__ import annotations

import re

import pytest
import torch

from synapse_pt.data import load_locomo, sample_path
from synapse_pt.data.render import TurnRenderer
from synapse_pt.eval.qa.pipeline import blind
from synapse_pt.graph.extraction import NoConceptExtractor
from synapse_pt.memory.baselines import VectorRAG
from synapse_pt.memory.gate import RejectionGate, build_gate
from synapse_pt.memory.synapse import SynapseMemory
from synapse_pt.models.hashing import HashingEncoder

ENC = HashingEncoder(64)
TEMPLATE = "{speaker}: {text}{caption}"
FIRST = {"i", "i'm", "i've", "i'll", "i'd", "me", "my", "mine", "myself"}
SECOND = {"you", "you're", "you've", "you'll", "you'd", "your", "yours", "yourself",
          "yourselves"}


@pytest.fixture(scope="module")
def conv():
    return load_locomo(sample_path()).conversations[0]


@pytest.fixture(scope="module")
def questions(conv):
    return [blind(q) for q in conv.questions]


def plain_signals(conv, question: str, k: int) -> dict[str, float]:
    """The four turn signals of one question, computed turn by turn with plain Python."""
    a, b = conv.speaker_a, conv.speaker_b
    names = [a, b]

    def words(text: str) -> list[str]:
        return re.findall(r"[a-z']+", text.lower().replace("\u2019", "'"))

    def mentions(text: str, name: str) -> int:
        return len(re.findall(rf"\b{name}(?:'s)?\b", text.replace("\u2019", "'"), re.I))

    named = [i for i, n in enumerate(names) if mentions(question, n)]
    named = named[0] if len(named) == 1 else -1
    neutral = re.sub(r"\s{2,}", " ", re.sub(rf"\b(?:{a}|{b})(?:'s)?\b", "", question,
                                            flags=re.I))
    neutral = re.sub(r"\s+([?.!,;:])", r"\1", neutral).strip()
    swap = re.sub(rf"\b({a}|{b})\b", lambda m: b if m.group(1).lower() == a.lower() else a,
                  question, flags=re.I)
    q_neutral, q_asked, q_swapped = ENC.encode([neutral, question, swap])
    render = TurnRenderer(TEMPLATE)
    from synapse_pt.retrieval.text import resolve_pronouns

    rows = []
    for t in conv.turns():
        w = words(t.content)
        listener = b if t.speaker == a else a
        to_speaker = sum(x in FIRST for x in w) + mentions(t.content, t.speaker)
        to_listener = sum(x in SECOND for x in w) + mentions(t.content, listener)
        refs_named_side = to_speaker if names.index(t.speaker) == named else to_listener
        refs_other = to_listener if names.index(t.speaker) == named else to_speaker
        own = 1.0 if named < 0 else (refs_named_side + 0.5) / (refs_named_side + refs_other + 1)
        resolved = ENC.encode([resolve_pronouns(t.content, t.speaker, listener)])[0]
        rows.append({"content": float(ENC.encode([render(t)])[0] @ q_neutral), "own": own,
                     "spoken": names.index(t.speaker) == named,
                     "asked": float(resolved @ q_asked), "swapped": float(resolved @ q_swapped)})
    order = sorted(range(len(rows)), key=lambda i: (-rows[i]["content"], i))[:k]

    def top_mean(key: str) -> float:
        return sum(sorted((r[key] for r in rows), reverse=True)[:k]) / k

    return {
        "speaker_share": 1.0 if named < 0 else sum(rows[i]["spoken"] for i in order) / k,
        "swap_contrast": top_mean("asked") - top_mean("swapped"),
        "ownership": sum(rows[i]["own"] for i in order) / k,
        "ownership_contrast": max(r["content"] * r["own"] for r in rows)
        - max(r["content"] * (1 - r["own"]) for r in rows),
    }


def test_turn_signals_equal_a_plain_computation(conv, questions) -> None:
    gate = RejectionGate(ENC, TurnRenderer(TEMPLATE), k=3)
    gate.ingest([conv.dialogue])
    got = gate.turn_signals(questions)
    checked_named = 0
    for b, q in enumerate(questions):
        expected = plain_signals(conv, q.question, k=3)
        for name, value in expected.items():
            assert float(got[name][b]) == pytest.approx(value, abs=1e-5), (q.question, name)
        checked_named += expected["speaker_share"] != 1.0
    assert checked_named > 0  # some questions name one speaker


def test_a_gate_in_a_memory_thresholds_its_signal(conv, questions) -> None:
    plain = VectorRAG(ENC, k=5, turn_template=TEMPLATE)
    gated = VectorRAG(ENC, k=5, turn_template=TEMPLATE,
                      gate={"signal": "ownership", "tau": 0.5, "k": 3})
    for m in (plain, gated):
        m.ingest([conv])
    a, b = plain.retrieve(questions), gated.retrieve(questions)
    assert a.node_ids() == b.node_ids() and torch.equal(a.c_ret, b.c_ret)
    assert torch.equal(a.gate_score, a.c_ret) and not a.gated.any() and a.gate_signals == {}
    own = b.gate_signals["ownership"]
    assert torch.equal(b.gate_score, own.float())
    assert torch.equal(b.gated, own < 0.5) and b.gated.any() and not b.gated.all()
    assert gated.describe()["gate"] == "ownership" and gated.describe()["gate_tau"] == 0.5


def test_synapse_memory_takes_the_gate(conv, questions) -> None:
    weights = {"ownership": 3.0, "c_ret": 1.0}
    memory = SynapseMemory(ENC, NoConceptExtractor(), turn_template=TEMPLATE,
                           gate={"signal": "combined", "tau": 0.6, "weights": weights,
                                 "intercept": -1.0})
    memory.ingest([conv])
    result = memory.retrieve(questions)
    sig = result.gate_signals
    expected = torch.sigmoid(-1.0 + 3.0 * sig["ownership"] + 1.0 * result.c_ret.double())
    assert torch.allclose(sig["combined"], expected)
    assert torch.equal(result.gated, sig["combined"] < 0.6)


def test_the_paper_gate_computes_nothing_more(conv, questions) -> None:
    memory = SynapseMemory(ENC, NoConceptExtractor(), turn_template=TEMPLATE)
    memory.ingest([conv])
    result = memory.retrieve(questions)
    assert result.gate_signals == {} and torch.equal(result.gate_score, result.c_ret)
    assert torch.equal(result.gated, result.c_ret < memory.params.tau_gate)
    assert memory.gate.renderings == []  # nothing indexed for the c_ret gate


@pytest.mark.parametrize(("settings", "message"), [
    ({"signal": "entropy"}, r"memory.gate.signal: 'entropy'"),
    ({"signal": "c_ret", "tau": 0.3}, r"memory.gate.tau"),
    ({"signal": "combined", "tau": 0.5}, r"needs fitted weights"),
    ({"signal": "combined", "weights": {"vibes": 1.0}}, r"unknown signals \['vibes'\]"),
    ({"signal": "ownership", "k": 0}, r"memory.gate.k"),
    ({"signal": "ownership", "smoothing": 0}, r"memory.gate.smoothing"),
    ({"signal": "ownership", "threshold": 0.2}, r"memory.gate: unknown keys \['threshold'\]"),
])
def test_bad_gate_settings_are_named(settings, message) -> None:
    with pytest.raises(ValueError, match=message):
        build_gate(settings, ENC, TurnRenderer(TEMPLATE), "cpu")


def test_questions_of_an_unknown_conversation_are_refused(conv, questions) -> None:
    gate = RejectionGate(ENC, TurnRenderer(TEMPLATE), signal="ownership", tau=0.2)
    with pytest.raises(KeyError, match="never ingested"):
        gate.turn_signals(questions)
