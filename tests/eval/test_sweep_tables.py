"""The sweep's configuration grid, its chunks and the merge of chunk tables (by hand)."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from synapse_pt.eval.tuning.grid import RANGES, chunk_bounds, draw_configs, merge_tables
from synapse_pt.retrieval.settings import SynapseParams


def test_grid_is_reproducible_starts_at_the_paper_defaults_and_stays_in_range() -> None:
    a, b = draw_configs(50, seed=3), draw_configs(50, seed=3)
    assert all(torch.equal(a[k], b[k]) for k in RANGES)
    assert not torch.equal(a["beta"], draw_configs(50, seed=4)["beta"])
    defaults = SynapseParams()
    for name, (lo, hi) in RANGES.items():
        assert float(a[name][0]) == pytest.approx(float(getattr(defaults, name)))
        assert ((a[name][1:] >= lo) & (a[name][1:] <= hi)).all()


def test_chunks_cover_the_grid_once_in_near_equal_slices() -> None:
    assert [chunk_bounds(7, 3, i) for i in range(3)] == [(0, 3), (3, 5), (5, 7)]
    assert [chunk_bounds(6, 3, i) for i in range(3)] == [(0, 2), (2, 4), (4, 6)]
    assert chunk_bounds(5, 1, 0) == (0, 5)
    with pytest.raises(ValueError, match="sweep.chunk must be in"):
        chunk_bounds(5, 2, 2)
    with pytest.raises(ValueError, match="more than the 2 configurations"):
        chunk_bounds(2, 3, 0)


def test_merge_sorts_and_names_duplicates_and_gaps(tmp_path) -> None:
    def part(name: str, configs: list[int]) -> None:
        pd.DataFrame({"config": configs, "recall@10": [c / 10 for c in configs]}).to_parquet(
            tmp_path / name)

    part("b.parquet", [2, 3])
    part("a.parquet", [0, 1])
    merged = merge_tables([tmp_path / "b.parquet", tmp_path / "a.parquet"], expected=4)
    assert merged["config"].tolist() == [0, 1, 2, 3]
    assert merged["recall@10"].tolist() == [0.0, 0.1, 0.2, 0.3]
    with pytest.raises(ValueError, match=r"1 of 5 configurations have no chunk table \(first: "
                                         r"\[4\]\)"):
        merge_tables([tmp_path / "a.parquet", tmp_path / "b.parquet"], expected=5)
    part("c.parquet", [3])
    with pytest.raises(ValueError, match="configuration 3 is in more than one chunk table"):
        merge_tables(sorted(tmp_path.glob("*.parquet")))
    with pytest.raises(FileNotFoundError, match="no sweep chunk tables"):
        merge_tables([])
