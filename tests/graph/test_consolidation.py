from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from graph_helpers import (
    ScriptedExtractor,
    TableEncoder,
    edges_of,
    make_conversation,
    make_turn,
    simple_conversation,
    unit,
)

from synapse_pt.data.render import TurnRenderer
from synapse_pt.graph.consolidation import (
    Consolidation,
    GraphBuilder,
    Maintenance,
    cooccurrence_weight,
    hours_since_epoch,
    windows_of,
)
from synapse_pt.graph.types import ABSTRACTION, ASSOCIATION, EPISODIC, SEMANTIC, TEMPORAL
from synapse_pt.models.hashing import HashingEncoder

BARE = TurnRenderer("{text}{caption}")


def _builder(script, encoder=None, **kw) -> GraphBuilder:
    # graph-structure tests: nodes hold the bare utterance (the template is tested on its own)
    kw.setdefault("renderer", BARE)
    return GraphBuilder(encoder or HashingEncoder(256), ScriptedExtractor(script), **kw)


def test_nodes_keys_and_trailing_window(device):
    conv = simple_conversation(7)
    g = _builder([["Alpha", "Beta"], ["Gamma"]], device=device).build(conv)
    assert g.num_windows == 2  # 5 turns + a trailing partial window of 2
    assert g.num_nodes_by_type() == {"episodic": 7, "semantic": 3}
    assert g.node_keys == [f"D1:{k}" for k in range(5)] + ["S:0", "S:1"] + \
        ["D1:5", "D1:6", "S:2"]
    assert [g.texts[g.index_of(k)] for k in ("S:0", "S:1", "S:2")] == ["Alpha", "Beta", "Gamma"]
    assert g.speakers[g.index_of("S:0")] is None and g.speakers[0] == "Bob"
    assert g.texts[0] == "turn 0 of s1"
    t0 = hours_since_epoch(conv.sessions[0].turns[0].timestamp)
    # a semantic node carries the time of its window's last turn
    assert g.timestamp[g.index_of("S:0")].item() == pytest.approx(t0 + 4)
    assert g.timestamp[g.index_of("S:2")].item() == pytest.approx(t0 + 6)
    assert g.x.device.type == torch.device(device).type
    assert windows_of(list(conv.turns()), 5)[-1][0].dia_id == "D1:5"


def test_hours_since_epoch():
    from datetime import datetime, timezone

    assert hours_since_epoch(datetime(1970, 1, 2, 1)) == 25.0
    assert hours_since_epoch(datetime(1970, 1, 2, 1, tzinfo=timezone.utc)) == 25.0


@pytest.mark.parametrize(("time_unit", "per_hour"), [("hours", 1.0), ("days", 1 / 24)])
def test_temporal_weights_by_hand(time_unit, per_hour):
    hours = [0.0, 2.0, 2.5, 50.0, 50.1]
    turns = [make_turn(k, hours=h, session=1 if k < 3 else 2) for k, h in enumerate(hours)]
    g = _builder([], window=2, rho=0.01, time_unit=time_unit).build(make_conversation(turns))
    temporal = edges_of(g, TEMPORAL)
    ep = [g.index_of(t.dia_id) for t in turns]
    expected = {(ep[k], ep[k + 1]): math.exp(-0.01 * (hours[k + 1] - hours[k]) * per_hour)
                for k in range(4)}
    assert temporal.keys() == expected.keys()  # t -> t+1 only, across windows and sessions
    for key, w in expected.items():
        assert temporal[key] == pytest.approx(w, rel=1e-6)


def test_abstraction_edges_both_directions_with_cosine():
    enc = TableEncoder({"e0": [1, 0, 0, 0], "e1": [0, 1, 0, 0],
                        "c0": unit(1, 1, 0, 0), "c1": unit(-1, 0.5, 0, 0)}, dim=4)
    turns = [make_turn(0, text="e0"), make_turn(1, text="e1", hours=1)]
    g = _builder([["c0", "c1"]], enc, window=2).build(make_conversation(turns))
    abstraction = edges_of(g, ABSTRACTION)
    e0, e1, c0, c1 = 0, 1, g.index_of("S:0"), g.index_of("S:1")
    expected = {(e0, c0): 1 / math.sqrt(2), (e1, c0): 1 / math.sqrt(2),
                (e0, c1): 0.0,  # cosine -0.894 floored at 0
                (e1, c1): 0.5 / math.sqrt(1.25)}
    assert len(abstraction) == 2 * len(expected)
    for (e, c), w in expected.items():
        assert abstraction[(e, c)] == pytest.approx(w, abs=1e-6)
        assert abstraction[(c, e)] == pytest.approx(w, abs=1e-6)


def test_duplicate_concepts_merge_at_tau_dup():
    near = math.sqrt(1 - 0.95 ** 2)
    far = math.sqrt(1 - 0.90 ** 2)
    enc = TableEncoder({"ski trip": [1, 0, 0, 0], "skiing trip": [0.95, near, 0, 0],
                        "snow": [0.90, 0, far, 0]}, dim=4)
    script = [["ski trip"], ["skiing trip"], ["snow"], ["Ski Trip", "ski trip!"]]
    turns = [make_turn(k, hours=k) for k in range(4)]
    g = _builder(script, enc, window=1, tau_dup=0.92).build(make_conversation(turns))
    assert g.num_nodes_by_type()["semantic"] == 2  # cos 0.95 merges, cos 0.90 does not
    ski, snow = g.index_of("S:0"), g.index_of("S:1")
    assert g.texts[ski] == "ski trip" and g.texts[snow] == "snow"
    # the merged node is only linked: its text and embedding are untouched
    assert torch.allclose(g.x[ski], torch.tensor([1.0, 0, 0, 0]))
    linked = {s for (s, d) in edges_of(g, ABSTRACTION) if d == ski}
    assert linked == {g.index_of(f"D1:{k}") for k in (0, 1, 3)}  # windows 1, 2 and 4
    assert not edges_of(g, ASSOCIATION)  # "Ski Trip" / "ski trip!" collapse to one concept


def test_new_concepts_of_one_window_merge_among_themselves():
    enc = TableEncoder({"a": [1, 0, 0, 0], "a2": [0.99, math.sqrt(1 - 0.99 ** 2), 0, 0],
                        "b": [0, 0, 1, 0]}, dim=4)
    g = _builder([["a", "a2", "b"]], enc, window=1).build(make_conversation([make_turn(0)]))
    assert [g.texts[i] for i in range(g.num_nodes) if g.node_type[i] == SEMANTIC] == ["a", "b"]
    assert len(edges_of(g, ASSOCIATION)) == 2


def test_cooccurrence_weight_accumulates_without_duplicate_edges():
    enc = TableEncoder({"Mark": [1, 0, 0, 0], "ski trip": [0, 1, 0, 0]}, dim=4)
    builder = _builder([], enc, window=1, association_weighting="cooccurrence")
    g = builder.new_graph("s1")
    for k in range(3):
        turn = make_turn(k, hours=k)
        builder.consolidate(g, [turn], enc.encode([turn.content]), ["Mark", "ski trip"],
                            enc.encode(["Mark", "ski trip"]))
        assoc = edges_of(g, ASSOCIATION)
        assert len(assoc) == 2  # Mark -> ski trip and back, never duplicated
        assert list(assoc.values()) == pytest.approx([1 - 0.5 ** (k + 1)] * 2)
    assert g.cooccurrence == {(g.index_of("S:0"), g.index_of("S:1")): 3}
    w = cooccurrence_weight(torch.arange(1, 6))
    assert bool((w > 0).all() and (w <= 1).all() and (w.diff() > 0).all())


def test_similarity_weighting_uses_cosine():
    enc = TableEncoder({"Mark": [1, 0, 0, 0], "ski trip": [0.3, math.sqrt(0.91), 0, 0]}, dim=4)
    script = [["Mark", "ski trip"]] * 2
    g = _builder(script, enc, window=1, association_weighting="similarity").build(
        make_conversation([make_turn(0), make_turn(1, hours=1)]))
    assoc = edges_of(g, ASSOCIATION)
    assert list(assoc.values()) == pytest.approx([0.3, 0.3], abs=1e-6)


def test_max_in_edges_keeps_oldest_among_ties():
    conv = simple_conversation(20)
    # every turn orthogonal to "Hub": all abstraction weights tie at 0
    enc = TableEncoder({"Hub": [0, 0, 0, 1]} | {t.content: [1, 0, 0, 0] for t in conv.turns()},
                       dim=4)
    g = _builder([["Hub"]] * 20, enc, window=1, max_in_edges=15).build(conv)
    hub = g.index_of("S:0")
    assert int(g.in_degree().max()) <= 15
    into_hub = sorted(s for (s, d) in edges_of(g, ABSTRACTION) if d == hub)
    # all tie, so the 15 oldest edges stay
    assert into_hub == [g.index_of(f"D1:{k}") for k in range(15)]
    assert g.in_degree()[hub] == 15


def test_pagerank_kept_with_the_graph_equals_networkx(device):
    """The PageRank the builder keeps (updated window by window) against networkx's weighted
    PageRank of the final graph (parallel edges summed, as networkx does for a multigraph)."""
    import networkx as nx

    conv = simple_conversation(12)
    script = [["Ann", "pottery class"], ["pottery class", "Bob"], ["camping"]]
    g = _builder(script, HashingEncoder(32), device=device).build(conv)
    assert g.num_edges > g.num_nodes  # temporal, abstraction and association edges
    ref = nx.MultiDiGraph()
    ref.add_nodes_from(range(g.num_nodes))
    for (src, dst), w in zip(g.edge_index.T.tolist(), g.edge_weight.tolist(), strict=True):
        ref.add_edge(src, dst, weight=w)
    expected = nx.pagerank(ref, alpha=0.85, weight="weight", tol=1e-12, max_iter=1000)
    got = g.pagerank.double().cpu()
    torch.testing.assert_close(got, torch.tensor([expected[i] for i in range(g.num_nodes)],
                                                 dtype=torch.float64), atol=1e-5, rtol=0)


def test_build_many_batches_encoder_and_extractor_calls():
    convs = [simple_conversation(7, "s1"), simple_conversation(3, "s2")]
    enc = TableEncoder(dim=16)
    script = [["a", "b"], ["c"], ["a", "d"]]
    builder = GraphBuilder(enc, ScriptedExtractor(script), window=5, renderer=BARE)
    graphs = builder.build_many(convs)
    assert enc.calls == [10, 4]  # all turns in one call, all distinct concepts in another
    assert builder.extractor.calls == [3]  # all windows of all conversations at once
    assert set(builder.last_timings) >= {"embed_turns_s", "extract_s", "consolidate_s", "total_s"}
    # the same graph as building each conversation alone
    alone = GraphBuilder(TableEncoder(dim=16), ScriptedExtractor(script[2:]), window=5,
                         renderer=BARE)
    g2 = alone.build(convs[1])
    assert graphs[1].node_keys == g2.node_keys and graphs[1].sample_id == "s2"
    assert torch.equal(graphs[1].edge_index, g2.edge_index)
    assert torch.allclose(graphs[1].edge_weight, g2.edge_weight)
    assert graphs[0].num_nodes_by_type() == {"episodic": 7, "semantic": 3}


def test_invalid_configuration_is_named():
    with pytest.raises(ValueError, match="association_weighting"):
        _builder([], association_weighting="bogus")
    with pytest.raises(ValueError, match="time_unit"):
        _builder([], time_unit="fortnights")
    for bad in (0.0, 1.5):
        with pytest.raises(ValueError, match=r"^memory\.graph\.collect_to must be \(0, 1\], got "):
            _builder([], collect_to=bad)
    with pytest.raises(TypeError, match=r"unknown settings \['windw'\]"):
        _builder([], windw=3)


def test_flat_settings_land_in_their_groups():
    # the config's flat keys (memory.graph.window=...) over the groups given, group by group
    builder = _builder([], consolidation=Consolidation(window=3, rho=0.5),
                       maintenance=Maintenance(max_nodes=7), tau_dup=0.8, collect_to=0.5)
    assert builder.consolidation == Consolidation(window=3, tau_dup=0.8, rho=0.5)
    assert builder.maintenance == Maintenance(max_nodes=7, collect_to=0.5)
    assert _builder([]).consolidation == Consolidation()
    with pytest.raises(ValueError, match=r"^memory\.graph\.window must be an integer >= 1, got 0$"):
        _builder([], consolidation=Consolidation(window=3), window=0)


def test_empty_conversation_and_concept_free_windows():
    g = _builder([]).build(simple_conversation(3))
    assert g.num_nodes_by_type() == {"episodic": 3, "semantic": 0}
    assert g.num_edges_by_type() == {"temporal": 2, "abstraction": 0, "association": 0}
    assert g.node_type.tolist() == [EPISODIC] * 3


@pytest.mark.locomo
def test_real_conversation_builds(locomo):
    from synapse_pt.graph.extraction import KeywordConceptExtractor

    enc = HashingEncoder(64)
    conv = locomo.conversations[0]
    g = GraphBuilder(enc, KeywordConceptExtractor(enc)).build(conv)
    assert g.num_nodes_by_type()["episodic"] == conv.num_turns
    assert int(g.in_degree().max()) <= 15
    assert g.pagerank.sum().item() == pytest.approx(1.0, abs=1e-3)
    assert g.node_reallocations == 0  # buffers pre-sized from the turn count


# -- shared prefixes (issue 59): conversations that begin alike are built once up to where they part

WORDS = ["garden", "piano", "Paris", "marathon", "sister", "recipe", "camping", "novel", "guitar",
         "puppy", "painting", "Boston", "yoga", "concert", "bakery", "hiking"]


SESSIONS = (5, 7, 6, 5)  # base session sizes: session boundaries at turns 5, 12, 18, 23


def _base_turns(sample_id: str) -> list:
    """23 turns in four sessions a day apart, each turn naming two topics."""
    turns, k = [], 0
    for session, size in enumerate(SESSIONS, start=1):
        for _ in range(size):
            text = f"{WORDS[k % 16]} and {WORDS[(3 * k + 5) % 16]} talk {k}"
            turns.append(make_turn(k, hours=24 * session + k, text=text, session=session,
                                   speaker="Ann" if k % 2 else "Bob", sample_id=sample_id))
            k += 1
    return turns


def _stitched(sample_id: str, at: int, hours: float) -> object:
    """The base with a two-turn session 100 inserted before base turn ``at``."""
    base = [dataclasses.replace(t, sample_id=sample_id) for t in _base_turns("base")]
    cue = [make_turn(j, hours=hours + j / 60, text=f"cue {at} {WORDS[j + 7]} plans",
                     session=100, speaker=("Ann", "Bob")[j], sample_id=sample_id)
           for j in range(2)]
    return make_conversation(base[:at] + cue + base[at:], sample_id)


def _state(g) -> tuple:
    data = g.to_data()
    tensors = tuple(getattr(data, k).tolist() for k in (
        "x", "node_type", "timestamp", "active", "last_active_window", "pagerank", "edge_index",
        "edge_type", "edge_weight"))
    return (g.sample_id, tensors, g.texts, g.node_keys, g.speakers, g.num_windows,
            g.concept_index, g.cooccurrence, g.num_collected, g.last_episode)


@pytest.mark.parametrize("graph_kw", [{}, {"max_nodes": 24, "dormancy_windows": 1},
                                      {"association_weighting": "cooccurrence"}])
def test_shared_prefixes_build_the_graphs_built_one_by_one(graph_kw):
    """Stitched copies of one conversation (a cue before the first turn, at a window boundary,
    inside windows, at the end, and one conversation twice under two ids) built together equal
    each built alone, and the windows they share are extracted and consolidated once."""
    from synapse_pt.graph.extraction import KeywordConceptExtractor

    convs = [_stitched("c-first", 0, 1.0), _stitched("c-window", 5, 40.0),
             _stitched("c-inside", 12, 70.0), _stitched("c-twin", 12, 70.0),
             _stitched("c-late", 18, 100.0), _stitched("c-end", 23, 130.0),
             simple_conversation(9, "other")]

    def builder():
        encoder = HashingEncoder(64)
        return GraphBuilder(encoder, KeywordConceptExtractor(encoder, max_concepts=3),
                            **graph_kw)

    together = builder()
    graphs = together.build_many(convs)
    alone = [builder().build(c) for c in convs]
    for g, ref in zip(graphs, alone, strict=True):
        assert _state(g) == _state(ref)
    timings = together.last_timings
    assert timings["windows"] == 6 * 5 + 2
    # by hand (b<k>: base turn k; every conversation has five windows): c-first's five; [b0-b4]
    # once for the other five, then c-window's four; [b5-b9] once for c-inside, c-twin, c-late,
    # c-end; c-inside's three (c-twin's the same); [b10-b14] once for c-late and c-end, then two
    # of each; "other" two
    assert timings["windows_consolidated"] == 5 + 1 + 4 + 1 + 3 + 1 + 2 + 2 + 2
    # extraction reads a window's turns wherever it stands: the windows after a cue at turn 0
    # or 5 are the same ([b8-b12], [b13-b17], [b18-b22]), and c-inside's last two too
    assert timings["windows_extracted"] == 15
