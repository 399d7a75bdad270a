"""How a sweep is cut into batched calls (``auto_chunk``), worked by hand."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

import synapse_pt.eval.tuning.grid as sweep


def _memory_and_questions():
    # two graphs of 100 and 300 nodes; 4 questions on the first, 2 on the second:
    # blocks of 400 and 600 cells per configuration, 1,000 in all
    batch = SimpleNamespace(ptr=torch.tensor([0, 100, 400]), sample_ids=["a", "b"])
    questions = [SimpleNamespace(sample_id=s) for s in "aaaabb"]
    return SimpleNamespace(batch=batch), questions


@pytest.mark.parametrize(("free", "cap", "device", "limit", "want"), [
    (10**9, 1 << 22, "cuda", 10**6, 10**9 // 2 // (1000 * 4 * 16)),  # memory only: 31,250
    (10**9, 1 << 22, "cpu", 10**6, (1 << 22) // 600),                # largest block: 6,990
    (10**9, 1 << 22, "cpu", 100, 100),                                # the configurations asked
    (10**5, 1 << 22, "cpu", 100, 1),                                  # at least one
    (10**9, 6000, "cpu", 100, 10),
])
def test_auto_chunk_by_hand(monkeypatch, free, cap, device, limit, want):
    monkeypatch.setattr(sweep, "available_bytes", lambda _device: free)
    monkeypatch.setattr(sweep, "CPU_BLOCK_CELLS", cap)
    memory, questions = _memory_and_questions()
    assert sweep.auto_chunk(memory, questions, device, limit) == want
