"""Guards a recorded figure: dense retrieval's evidence recall@10 on the full LoCoMo-10.

experiments/turn_template.md records 0.4446 for dense top-k with the bundled MiniLM and the
default turn template (categories 1-4, mean over questions). A change to the turn text, the
embedder or the loader that moves it by more than 0.02 must be deliberate (update the record).
"""

from __future__ import annotations

import pytest
import torch

from synapse_pt.eval.qa.pipeline import blind
from synapse_pt.eval.qa.scorers.retrieval import evidence_recall_at_k
from synapse_pt.memory.baselines import VectorRAG

RECORDED_DENSE_RECALL_AT_10 = 0.4446


@pytest.mark.slow
@pytest.mark.locomo
def test_dense_recall_at_10_stays_at_the_recorded_figure(locomo, minilm) -> None:
    memory = VectorRAG(minilm, k=10)
    memory.ingest(locomo.conversations)
    questions = [q for q in locomo.questions() if q.category < 5]
    result = memory.retrieve([blind(q) for q in questions])
    recall = evidence_recall_at_k(result.node_ids(), [q.evidence for q in questions], ks=(10,))
    value = float(torch.nanmean(recall[10]))
    assert value == pytest.approx(RECORDED_DENSE_RECALL_AT_10, abs=0.02)
