"""The operator breakdown the benchmarks print with --profile."""

from __future__ import annotations

import pytest
import torch

from synapse_pt.eval.reports.profile import op_breakdown, primitive_seconds


def test_op_breakdown_counts_the_calls_made_and_shares_sum_to_one():
    a = torch.rand(300, 200)
    adj = torch.eye(300).to_sparse_csr()

    def work():
        for _ in range(3):
            torch.topk(a, 7, dim=0)
        torch.sparse.mm(adj, a)
        return a.double() @ a.double().T

    table, total = op_breakdown(work)
    calls = dict(zip(table["op"], table["calls"], strict=True))
    assert calls["aten::topk"] == 3 and calls["aten::mm"] == 1
    assert table["share"].sum() == pytest.approx(1.0)
    assert total == pytest.approx(table["self_s"].sum())
    assert table["self_s"].is_monotonic_decreasing
    groups = primitive_seconds(table)
    assert groups["top-k"] == pytest.approx(float(table.loc[table["op"] == "aten::topk",
                                                             "self_s"].iloc[0]))
    assert groups["sparse products"] > 0 and groups["dense matmul"] > 0
    assert sum(groups.values()) <= total + 1e-9
