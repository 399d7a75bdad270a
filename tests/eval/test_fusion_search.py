"""The held-out fusion search (synapse_pt/eval/tuning/fusion_search.py): its batched recall matrix
equals
what ``memory=fused`` retrieves through its own path for the same weights."""

from __future__ import annotations

import pytest
import torch

from synapse_pt.data import load_locomo, sample_path
from synapse_pt.eval.qa.pipeline import blind
from synapse_pt.eval.qa.scorers.retrieval import evidence_recall_at_k
from synapse_pt.eval.tuning.fusion_search import fusion_candidates, fusion_sweep
from synapse_pt.memory.fused import SIGNALS, FusedMemory
from synapse_pt.models.hashing import HashingEncoder
from synapse_pt.retrieval.combine import minmax_normalise
from synapse_pt.retrieval.dense import own_graph_mask


@pytest.mark.parametrize("sigma_max", [None, 0.5])
def test_sweep_recall_equals_the_memory_path(sigma_max) -> None:
    conv = load_locomo(sample_path()).conversations[0]
    questions = list(conv.questions)
    blinded = [blind(q) for q in questions]
    memory = FusedMemory(HashingEncoder(64), k=30)
    memory.ingest([conv])
    qg = memory.registry.graph_ids(blinded, "cpu")
    mask = own_graph_mask(memory.node_graph, qg)
    signals = memory.signals(blinded, qg)
    stack = torch.stack([minmax_normalise(signals[s].float(), mask) for s in SIGNALS])
    cands = fusion_candidates(SIGNALS, ["default"], 6, seed=3, sigma_max=sigma_max)
    assert len({tuple(c["weights"].values()) for c in cands}) == 6
    if sigma_max is not None:
        assert any(c["sigma"] > 0 for c in cands) and any(c["sigma"] == 0 for c in cands)
    sweep = fusion_sweep({"default": stack}, SIGNALS, mask, memory.evidence_index(questions),
                         cands, prev=memory.prev, nxt=memory.next, session=memory.session_id,
                         chunk=4)
    for c, cand in enumerate(cands):
        memory.configure_retrieval(weights=cand["weights"], rho=cand["rho"],
                                   sigma=cand.get("sigma", 0.0))
        result = memory.retrieve(blinded)
        expected = evidence_recall_at_k(result.node_ids(), [list(q.evidence) for q in questions],
                                        ks=(5, 10, 30))
        for k in (5, 10, 30):
            torch.testing.assert_close(sweep.recall[k][c], expected[k].double(), equal_nan=True)
        torch.testing.assert_close(sweep.c_ret[c], result.c_ret.float(), atol=1e-5, rtol=0)
