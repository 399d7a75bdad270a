"""The activation figure's question choice and subgraph, on the shipped sample."""

from __future__ import annotations

import torch

from synapse_pt.eval.reports.activation_view import descending_rank, pick_activation_example
from synapse_pt.eval.reports.plots import activation_subgraph_plot
from synapse_pt.graph.extraction import KeywordConceptExtractor
from synapse_pt.memory.synapse import SynapseMemory
from synapse_pt.models.hashing import HashingEncoder


def test_descending_rank_by_hand():
    score = torch.tensor([[0.5, 1.0], [0.9, 1.0], [0.5, 3.0], [7.0, 0.0]])
    mask = torch.tensor([[True, True], [True, True], [True, True], [False, True]])
    # column 0: node 1 (0.9) first, nodes 0 and 2 tie at 0.5 (smaller id first), node 3 masked
    # column 1: node 2 (3.0), then the tie 0 / 1, then node 3
    assert descending_rank(score, mask).tolist() == [[1, 1], [0, 2], [2, 0], [4, 3]]


def test_pick_activation_example_meets_its_criterion(sample_dataset, tmp_path):
    enc = HashingEncoder(128)
    memory = SynapseMemory(enc, KeywordConceptExtractor(enc), params={"k": 5})
    memory.ingest(sample_dataset.conversations)
    questions = list(sample_dataset.questions())
    example = None
    for category in sorted({q.category for q in questions}):
        example = pick_activation_example(memory, questions, category=category, k=5)
        if example is not None:
            break
    assert example is not None, "no question of the sample meets the criterion at k = 5"
    target = example.nodes[example.target]
    assert target["evidence"] and target["type"] == "episodic"
    assert target["synapse_rank"] < 5 <= target["cos_rank"]
    assert target["activation"] > 0 and example.gain > 0
    assert target["key"] in example.question.evidence
    # the ranks agree with the memory's own retrieval of that question
    retrieved = memory.retrieve([example.question]).node_ids()[0]
    assert retrieved[target["synapse_rank"]] == target["key"]
    # every drawn edge joins two drawn nodes; anchors carry initial energy
    assert all(0 <= i < len(example.nodes) and 0 <= j < len(example.nodes)
               for i, j, _, _ in example.edges)
    assert all(n["a0"] > 0 for n in example.nodes if n["anchor"])
    png, svg = activation_subgraph_plot(example, tmp_path / "activation")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and svg.is_file()
