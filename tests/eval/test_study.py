from __future__ import annotations

from pathlib import Path

import pytest

from synapse_pt.commands.build import composed_config
from synapse_pt.commands.study import run_study
from synapse_pt.common.resources import study_dir
from synapse_pt.eval.tuning.variants import load_study, study_table


@pytest.mark.parametrize("name", sorted(p.stem for p in study_dir().glob("*.yaml")))
def test_every_shipped_study_composes(name: str) -> None:
    study = load_study(name)
    assert study["variants"]
    for label, overrides in study["variants"].items():
        cfg = composed_config([*study["base"], *overrides])
        assert cfg.memory["_target_"], label


def test_bad_study_files_are_named(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="studies:"):
        load_study("no_such_study")
    bad = tmp_path / "bad.yaml"
    bad.write_text("variants: [a, b]\n")
    with pytest.raises(ValueError, match="variants"):
        load_study(bad)
    bad.write_text("variants:\n  'a b': [x=1]\n")
    with pytest.raises(ValueError, match="label"):
        load_study(bad)


def test_a_study_runs_each_variant_and_tabulates(tmp_path: Path) -> None:
    study = {"base": ["dataset=sample", "embedder=hashing", f"paths.cache_dir={tmp_path}/c"],
             "variants": {"bm25": ["memory=bm25"], "bm25.k5": ["memory=bm25", "memory.k=5"]}}
    results = run_study(study, tmp_path / "out")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["0_bm25", "1_bm25.k5"]
    table = study_table(results)
    assert list(table.index) == ["bm25", "bm25.k5"]
    assert results["bm25.k5"]["identity"]["experiment"] == "bm25.k5"
    # k = 5 returns 5 turns: recall@30 equals recall@5, and it cannot beat k = 30 at 30
    row = table.loc["bm25.k5"]
    assert row["R@30 (1-4)"] == pytest.approx(row["R@5 (1-4)"])
    assert row["R@30 (1-4)"] <= table.loc["bm25", "R@30 (1-4)"]
    assert table.loc["bm25", "R@5 (1-4)"] == pytest.approx(row["R@5 (1-4)"])
