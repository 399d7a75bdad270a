"""Held-out selection (SPEC §1.5): chosen on the other conversations, read on the fold's own."""

from __future__ import annotations

import math

import pytest
import torch

from synapse_pt.data.schema import Question
from synapse_pt.eval.tuning.heldout import (
    SweepMatrix,
    calibrate_tau,
    candidates,
    choose,
    heldout,
    make_folds,
    summary_table,
)
from synapse_pt.retrieval.settings import SynapseParams

NAMES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}


def q(sample: str, i: int, category: int) -> Question:
    return Question(sample, i, f"q{i}", "a", category, ("D1:1",), ("D1:1",))


def test_folds() -> None:
    ids = [f"c{i}" for i in range(10)]
    assert make_folds(ids, "kfold5") == [["c0", "c1"], ["c2", "c3"], ["c4", "c5"], ["c6", "c7"],
                                         ["c8", "c9"]]
    assert make_folds(ids, ["c3", "c7"]) == [["c3", "c7"]]
    for bad in ("kfold1", "kfold11", "fivefold", ["c3", "zz"], ids):
        with pytest.raises(ValueError):
            make_folds(ids, bad)


def test_each_fold_is_scored_by_the_config_chosen_on_the_others() -> None:
    # two conversations A, B; candidate 0 is best on A, candidate 1 best on B
    questions = [q("A", 0, 1), q("A", 1, 4), q("B", 0, 1), q("B", 1, 4), q("B", 2, 5)]
    r10 = torch.tensor([[1.0, 1.0, 0.0, 0.0, math.nan],
                        [0.0, 0.5, 1.0, 1.0, math.nan]], dtype=torch.float64)
    c_ret = torch.tensor([[0.9, 0.8, 0.7, 0.6, 0.1],
                          [0.5, 0.4, 0.3, 0.2, 0.1]])
    sweep = SweepMatrix([{"id": 0}, {"id": 1}], {5: r10, 10: r10, 30: r10}, c_ret)
    per_q, records = heldout(sweep, questions, [["A"], ["B"]], NAMES, target_fr=0.0)
    # fold A is read with the candidate chosen on B (1), fold B with the one chosen on A (0)
    assert [r["candidate"] for r in records] == [1, 0]
    assert per_q["recall@10"].tolist()[:4] == [0.0, 0.5, 0.0, 0.0]
    # tau at a 0 % target: the smallest training C_ret of answerable questions
    assert records[0]["tau_gate"] == pytest.approx(0.2)
    assert records[1]["tau_gate"] == pytest.approx(0.8)
    table, gate = summary_table(per_q, NAMES)
    assert table.loc["recall@10", "mean_q_1_4"] == pytest.approx(0.125)
    assert table.loc["recall@10", "multi-hop"] == pytest.approx(0.0)
    # fold B with tau 0.8: its answerable C_ret 0.7, 0.6 and the adversarial 0.1 are gated
    assert gate["false_rejection (1-4)"] == pytest.approx(0.5)
    assert gate["true_rejection (5)"] == pytest.approx(1.0)


def test_choose_and_calibrate() -> None:
    r10 = torch.tensor([[0.5, math.nan, 0.5], [0.4, 1.0, 0.9]], dtype=torch.float64)
    sweep = SweepMatrix([{}, {}], {10: r10}, torch.zeros(2, 3))
    answerable = torch.tensor([True, True, False])
    everything = torch.ones(3, dtype=torch.bool)
    assert choose(sweep, everything, answerable) == 1  # 0.7 > 0.5 (NaN ignored)
    assert choose(sweep, torch.tensor([True, False, True]), answerable) == 0
    assert calibrate_tau(torch.arange(101.0), 0.025) == pytest.approx(2.5)


def test_synapse_candidates_start_with_the_paper_values() -> None:
    from synapse_pt.memory.synapse import SynapseMemory

    space = SynapseMemory.declared_search_space()
    cands = candidates(space, 4, 3, seed=0)
    assert len(cands) == 4
    discrete, values = cands[0]
    p = SynapseParams()  # the paper's values
    field = lambda key: key.split(".", 1)[1]  # noqa: E731 (params.S -> S)
    assert all(discrete[k] == getattr(p, field(k)) for k in discrete)
    assert all(float(v[0]) == pytest.approx(float(getattr(p, field(k))))
               for k, v in values.items())
    assert len({tuple(d.values()) for d, _ in cands}) == 4
    assert candidates(space, 4, 3, seed=0)[2][0] == cands[2][0]  # seeded


def test_fold_table_and_write_study(tmp_path, capsys) -> None:
    import json

    from synapse_pt.eval.tuning.heldout import fold_table, write_study

    records = [{"fold": 0, "test": ["a", "b"], "train_recall@10": 0.5, "test_recall@10": 0.25,
                "config": {"T": 2}}]
    table = fold_table(records, lambda r: {"T": r["config"]["T"]})
    assert table.loc[0].to_dict() == {"test": "a b", "train R@10": 0.5, "test R@10": 0.25, "T": 2}
    write_study(tmp_path, "report", ["# title", "body"], {"m": 1}, {"c": 2}, "score", 0.123456)
    assert (tmp_path / "report.md").read_text() == "# title\nbody\n"
    assert json.loads((tmp_path / "folds.json").read_text()) == {"m": 1}
    assert json.loads((tmp_path / "chosen_on_all.json").read_text()) == {"c": 2}
    assert capsys.readouterr().out.splitlines()[-1] == "score: 0.1235"
