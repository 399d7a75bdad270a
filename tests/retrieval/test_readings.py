"""The readings of SPEC §1.5 as SynapseParams values, each against hand-worked values."""

from __future__ import annotations

import pytest
import torch

from synapse_pt.graph.pagerank import rescale_pagerank
from synapse_pt.retrieval.anchors import initial_energy
from synapse_pt.retrieval.settings import SynapseParams
from synapse_pt.retrieval.spreading import SynapseInputs, synapse_retrieve

COS = torch.tensor([[0.9], [0.4], [-0.2], [0.1]])
BM25 = torch.tensor([[0.0], [2.0], [4.0], [1.0]])
MASK = torch.ones(4, 1, dtype=torch.bool)


def test_energy_readings_by_hand() -> None:
    # k_anchor = 1: dense anchor node 0 (cos 0.9), BM25 anchor node 2 (4.0 = the max)
    a0, anchors = initial_energy(COS, BM25, MASK, 1)
    assert anchors[:, 0].tolist() == [True, False, True, False]
    assert a0[:, 0].tolist() == pytest.approx([0.9, 0.0, 1.0, 0.0])
    a0, _ = initial_energy(COS, BM25, MASK, 2, energy="max")
    # anchors 0, 1 (dense) and 2, 1 (BM25): max(cos+, bm25 / 4)
    assert a0[:, 0].tolist() == pytest.approx([0.9, 0.5, 1.0, 0.0])
    a0, _ = initial_energy(COS, BM25, MASK, 2, energy="constant")
    assert a0[:, 0].tolist() == [1.0, 1.0, 1.0, 0.0]
    with pytest.raises(ValueError, match="initial energy"):
        initial_energy(COS, BM25, MASK, 1, energy="sum")


def test_pagerank_scales_by_hand() -> None:
    pr = torch.tensor([0.2, 0.3, 0.5, 0.1, 0.9])
    batch = torch.tensor([0, 0, 0, 1, 1])
    assert rescale_pagerank(pr, batch, "minmax").tolist() == pytest.approx([0, 1 / 3, 1, 0, 1])
    assert rescale_pagerank(pr, batch, "max").tolist() == pytest.approx([0.4, 0.6, 1, 1 / 9, 1])
    assert rescale_pagerank(pr, batch, "none").tolist() == pytest.approx(pr.tolist())
    with pytest.raises(ValueError, match="pagerank_scale"):
        rescale_pagerank(pr, batch, "log")


def _chain():
    """Episodes 0 -> 1 -> 2 (temporal) and concept 3 <-> 0, 1 (abstraction), one query."""
    x = torch.nn.functional.normalize(torch.tensor(
        [[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [0.6, 0.8]]), dim=1)
    edge_index = torch.tensor([[0, 1, 3, 0, 3, 1], [1, 2, 0, 3, 1, 3]])
    return dict(x=x, node_graph=torch.zeros(4, dtype=torch.long), edge_index=edge_index,
                edge_weight=torch.ones(6), pagerank_unit=torch.tensor([0.0, 0.5, 0.2, 1.0]),
                query_emb=torch.tensor([[1.0, 0.0]]), query_graph=torch.zeros(1, dtype=torch.long),
                bm25=torch.zeros(4, 1), episodic=torch.tensor([True, True, True, False]))


def test_turns_only_lists_concepts_apart() -> None:
    both = synapse_retrieve(SynapseInputs(**_chain()), SynapseParams(k=4, k_anchor=1))
    assert 3 in both.index[0].tolist()
    turns = synapse_retrieve(SynapseInputs(**_chain()), SynapseParams(k=2, k_anchor=1,
                                                              rank_episodic_only=True,
                                                              k_concepts=1))
    assert turns.index[0].tolist()[2:] == [3]  # the concept after the k turns
    assert set(turns.index[0].tolist()[:2]) <= {0, 1, 2}


def test_c_ret_readings_on_a_graph() -> None:
    runs = {src: synapse_retrieve(SynapseInputs(**_chain()), SynapseParams(k=2, k_anchor=1,
                                                                  c_ret_source=src))
            for src in ("activation", "max_activation", "potential", "score", "similarity")}
    top = int(runs["score"].index[0, 0])
    assert runs["score"].c_ret.item() == pytest.approx(runs["score"].score[0, 0].item())
    cos = (_chain()["x"] @ torch.tensor([1.0, 0.0])).tolist()
    assert runs["similarity"].c_ret.item() == pytest.approx(cos[top])
    assert runs["max_activation"].c_ret.item() >= runs["activation"].c_ret.item()
    # firing is sigmoid(gamma (uhat - theta)) for a node with uhat > 0
    act, pot = runs["activation"].c_ret.item(), runs["potential"].c_ret.item()
    if pot > 0:
        assert act == pytest.approx(torch.sigmoid(torch.tensor(5.0 * (pot - 0.5))).item())


@pytest.mark.parametrize("field, value, message", [
    ("energy", "sum", "memory.readings.energy"),
    ("c_ret_source", "entropy", "memory.readings.c_ret_source"),
    ("inhibition", "never", "memory.readings.inhibition"),
    ("inhibition_scope", "global", "memory.readings.inhibition_scope"),
    ("pagerank_scale", "log", "memory.readings.pagerank_scale"),
    ("k", 0, "memory.params.k"),
    ("k", -3, "memory.params.k"),
    ("k_anchor", 0, "memory.readings.k_anchor"),
    ("T", -1, "memory.params.T"),
    ("k_concepts", 3, "rank_episodic_only"),
])
def test_params_validated_with_the_key_named(field, value, message) -> None:
    with pytest.raises(ValueError, match=message):
        SynapseParams(**{field: value})


@pytest.mark.parametrize("field, value", [
    ("tau_gate", 1.5), ("tau_gate", -0.1), ("delta", 1.2), ("beta", -1.0), ("S", -0.5),
    ("gamma", -1.0), ("theta", 2.0), ("lambda1", -0.1), ("delta", float("nan")),
    ("beta", torch.tensor([0.1, -0.2])),
])
def test_out_of_range_hyperparameters_name_key_and_range(field, value) -> None:
    with pytest.raises(ValueError, match=f"memory.params.{field} must be"):
        SynapseParams(**{field: value})


def test_potential_gate_may_exceed_one() -> None:
    assert SynapseParams(c_ret_source="potential", tau_gate=1.5).tau_gate == 1.5
