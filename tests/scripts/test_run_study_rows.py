"""scripts/run_study.py into an ``--out`` that holds an earlier study (issue 51): the tables list
this study's variants only, and (issue 58) the earlier study's files it does not write are removed,
a user's files in the same folders never."""

from __future__ import annotations

from pathlib import Path

from scripts_loader import load_script  # tests/ is on sys.path (rootdir conftest)


def load():
    return load_script("run_study")


def study_file(path: Path, variants: dict[str, str]) -> Path:
    lines = ["base: [dataset=sample, embedder=hashing, memory=bm25, logger=none]", "variants:"]
    lines += [f"  {label}: [{override}]" for label, override in variants.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def row_labels(markdown: str) -> list[str]:
    """The first cell of each body row of a pipe table."""
    rows = [line for line in markdown.splitlines() if line.startswith("|")][2:]
    return [row.split("|")[1].strip() for row in rows]


def test_a_rerun_with_fewer_variants_tabulates_only_its_own(tmp_path: Path, capsys) -> None:
    run_study = load()
    out = tmp_path / "out"
    cache = f"paths.cache_dir={tmp_path / 'cache'}"
    three = study_file(tmp_path / "three.yaml", {"k10": "memory.k=10", "k5": "memory.k=5",
                                                 "k3": "memory.k=3"})
    assert run_study.main([str(three), "--out", str(out), cache, "--baseline", "k10"]) == 0
    assert row_labels((out / "tables" / "main_recall@10.md").read_text()) == ["k10", "k5", "k3"]
    assert (out / "tables" / "delta_recall@10.md").is_file()  # written with a baseline only
    capsys.readouterr()
    # the user's own files beside the study's (issue 58: replace=True deleted every .md and .tex
    # in OUT/tables/ that the second study did not write, these included)
    (out / "tables" / "my_notes.md").write_text("mine\n")
    (out / "tables" / "figure.tex").write_text("mine\n")
    (out / "README.md").write_text("mine\n")
    one = study_file(tmp_path / "one.yaml", {"k4": "memory.k=4"})
    assert run_study.main([str(one), "--out", str(out), cache]) == 0
    assert row_labels((out / "tables" / "main_recall@10.md").read_text()) == ["k4"]
    assert "k5" not in (out / "tables" / "tables.md").read_text()
    assert not (out / "tables" / "delta_recall@10.md").exists()  # no table of the earlier study
    for mine in ("tables/my_notes.md", "tables/figure.tex", "README.md"):
        assert (out / mine).read_text() == "mine\n", mine
    said = capsys.readouterr().out
    assert "left out of the tables" in said and "1_k5" in said and "2_k3" in said
