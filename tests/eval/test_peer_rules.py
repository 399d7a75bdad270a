"""Peers' retrieval rules (SPEC §3) on hand-worked rankings, and against a plain reference written
from the rules' published definitions (experiments/published_retrieval.md)."""

from __future__ import annotations

import math
import random
import re

import pytest

from synapse_pt.eval.qa.scorers.peer_rules import (
    parse_prefix_sessions,
    parse_strict_sessions,
    peer_metrics,
    turn_code,
)


def values(out, name):
    return [None if math.isnan(v) else v for v in out[name].tolist()]


def test_turn_codes_and_parsers():
    assert turn_code("D3:14") == 3_000_014
    assert turn_code("D30:05") == -2 and turn_code("D") == -2 and turn_code("D:11:26") == -2
    # the readings of the peers' code (experiments/published_retrieval.md, edge-case table)
    assert parse_prefix_sessions(["D8:6; D9:17"]) == {8}
    assert parse_prefix_sessions(["D9:1 D4:4 D4:6", "D30:05", "D:11:26", "D"]) == {9, 30}
    assert parse_strict_sessions(["D8:6; D9:17", " D30:05 ", "D:11:26", "D2:3"]) == {30, 2}


def test_hand_worked_question():
    # ranked turns: sessions 2, 2, 5, 1, 5, 3 -> distinct sessions in order U = [2, 5, 1, 3]
    ranked = [["D2:1", "D2:7", "D5:3", "D1:4", "D5:9", "D3:2"]]
    raw = [["D1:4", "D3:2", "D30:05"]]  # the last is malformed: never found as a raw string
    resolved = [["D1:4", "D3:2", "D30:5"]]
    out = peer_metrics(ranked, raw, resolved, ks=(1, 2, 3, 4, 6))
    # gold sessions (prefix reading) {1, 3, 30}: session 1 is U's 3rd, session 3 its 4th
    assert values(out, "session_hit@2") == [0.0]
    assert values(out, "session_hit@3") == [1.0]
    assert values(out, "session_recall@3") == [pytest.approx(1 / 3)]
    assert values(out, "session_recall@4") == [pytest.approx(2 / 3)]
    # over the first k turns: k = 3 covers sessions {2, 5}; k = 4 adds session 1
    assert values(out, "session_hit_turns@3") == [0.0]
    assert values(out, "session_hit_turns@4") == [1.0]
    # raw strings: D1:4 is the 4th turn, D3:2 the 6th, D30:05 never
    assert values(out, "turn_recall_raw@4") == [pytest.approx(1 / 3)]
    assert values(out, "turn_recall_raw@6") == [pytest.approx(2 / 3)]
    assert values(out, "raw_any@3") == [0.0] and values(out, "raw_any@4") == [1.0]
    assert values(out, "raw_strict@6") == [0.0]  # the malformed string makes strict impossible
    # resolved ids: D30:5 is not retrieved either, so strict fails; any at the 4th turn
    assert values(out, "any@4") == [1.0] and values(out, "strict@6") == [0.0]
    assert values(out, "any@1") == [0.0]


def test_empty_evidence_is_counted_as_each_rule_says():
    out = peer_metrics([["D1:1"], ["D1:1", "D2:2"]], [[], ["D2:2", "D1:1"]], [[], ["D2:2", "D1:1"]],
                       ks=(1, 2))
    # MemPalace counts an empty gold set as 1.0; infolang as 0; hit rules and ours leave it out
    assert values(out, "session_recall@1") == [1.0, 0.5]
    assert values(out, "turn_recall_raw@1") == [1.0, 0.5]
    assert values(out, "raw_any@1") == [0.0, 1.0]
    assert values(out, "raw_strict@2") == [0.0, 1.0]
    assert values(out, "session_hit@1") == [None, 1.0]
    assert values(out, "session_hit_turns@1") == [None, 1.0]
    assert values(out, "any@1") == [None, 1.0] and values(out, "strict@1") == [None, 0.0]
    assert values(out, "strict@2") == [None, 1.0]


def reference(ranked, raw, resolved, k):
    """The rules exactly as the notes define them, one question at a time."""
    sess = [int(re.match(r"D(\d+):", t).group(1)) for t in ranked]
    distinct = list(dict.fromkeys(sess))
    prefix = parse_prefix_sessions(raw)
    strict = parse_strict_sessions(raw)
    raw_set, top = set(raw), set(ranked[:k])
    out = {
        "session_hit": float(bool(prefix & set(distinct[:k]))) if prefix else None,
        "session_hit_turns": float(bool(strict & set(sess[:k]))) if strict else None,
        "session_recall": len(prefix & set(distinct[:k])) / len(prefix) if prefix else 1.0,
        "turn_recall_raw": (sum(e in top for e in raw_set) / len(raw_set)) if raw_set else 1.0,
        "raw_any": float(bool(raw_set & top)),
        "raw_strict": float(bool(raw_set) and raw_set <= top),
        "any": float(bool(set(resolved) & top)) if resolved else None,
        "strict": float(set(resolved) <= top) if resolved else None,
    }
    return out


def test_equals_the_plain_reference_on_random_rankings():
    rng = random.Random(0)
    turns = [f"D{s}:{t}" for s in range(1, 9) for t in range(1, 6)]
    rankings, raws, resolveds = [], [], []
    for _ in range(300):
        rankings.append(rng.sample(turns, rng.randint(0, 25)))
        gold = rng.sample(turns, rng.randint(0, 4))
        resolveds.append(gold)
        raw = list(gold)
        if raw and rng.random() < 0.3:  # the release's quirks
            raw[0] = rng.choice(["D" + raw[0][1:].replace(":", ":0"), "D", "D:1:2",
                                 f"{raw[0]}; D9:1"])
        raws.append(raw)
    ks = (1, 3, 10)
    got = peer_metrics(rankings, raws, resolveds, ks=ks)
    for i, (r, raw, res) in enumerate(zip(rankings, raws, resolveds, strict=True)):
        for k in ks:
            for rule, want in reference(r, raw, res, k).items():
                value = float(got[f"{rule}@{k}"][i])
                assert (math.isnan(value) if want is None else value == pytest.approx(want)), \
                    (rule, k, r, raw, res)


def test_cut_at_depth_and_neighbours_hand_worked():
    """Issue 42: a peer's rule at the peer's depth. Ranked turns (sessions 2, 2, 5, 1, 5, 3); the
    gold session 3 is the 4th distinct session but only at the 6th turn: Engram's R@5 over our
    whole ranking finds it, over the first 4 turns (sessions 2, 5, 1) it does not."""
    from synapse_pt.eval.qa.scorers.peer_rules import cut_at_depth, with_neighbours

    ranked = [["D2:1", "D2:7", "D5:3", "D1:4", "D5:9", "D3:2"]]
    raw = resolved = [["D3:2"]]
    assert values(peer_metrics(ranked, raw, resolved, ks=(5,)), "session_hit@5") == [1.0]
    cut = cut_at_depth(ranked, 4)
    assert cut == [["D2:1", "D2:7", "D5:3", "D1:4"]]
    assert values(peer_metrics(cut, raw, resolved, ks=(5,)), "session_hit@5") == [0.0]
    # Hebb Mind's neighbours: the conversation runs D1:1..D1:4, D2:1..D2:7, D3:1.., so D1:4's
    # next neighbours (radius 2) are D2:1 and D2:2, D2:1's previous ones D1:3 and D1:4; with
    # radius 1 the 2nd turn D2:7's next neighbour is D3:1, in the gold session.
    conversation = [[*(f"D1:{t}" for t in range(1, 5)), *(f"D2:{t}" for t in range(1, 8)),
                     *(f"D3:{t}" for t in range(1, 4)), *(f"D5:{t}" for t in range(1, 10))]]
    two = cut_at_depth(ranked, 2)
    grown = with_neighbours(two, conversation, 1)
    assert grown == [["D2:1", "D2:7", "D1:4", "D2:2", "D2:6", "D3:1"]]
    assert values(peer_metrics(two, raw, resolved, ks=(2,)), "session_hit_turns@2") == [0.0]
    assert values(peer_metrics(grown, raw, resolved, ks=(6,)), "session_hit_turns@6") == [1.0]
    assert with_neighbours(two, conversation, 0) == two
    with pytest.raises(ValueError, match="'D9:9' is not in its conversation"):
        with_neighbours([["D9:9"]], conversation, 2)
    with pytest.raises(ValueError, match="depth must be >= 1"):
        cut_at_depth(ranked, 0)
