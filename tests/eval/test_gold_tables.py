"""Tables name the gold their numbers were scored against (issue 42, item 3): ``dataset.gold`` is a
protocol field of ``scripts/make_tables.py``, ``runs.md`` has a gold column, a ``gold=both`` run
writes the audited tables beside the official ones, an ``audited`` run's tables say so, and runs
scored against different golds are never set side by side."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from scripts_loader import load_script  # tests/ is on sys.path (rootdir conftest)

from synapse_pt.eval.records.collect import protocol_differences
from synapse_pt.eval.records.record import build_tables

REPO_ROOT = Path(__file__).resolve().parents[2]
NAMES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}


def _section(recall: float) -> dict:
    entry = {name: recall for name in NAMES.values()}
    entry.update(mean_cat_1_4=recall, mean_q_1_4=recall, overall=recall,
                 n={"mean_q_1_4": 4, "overall": 5})
    return {"recall@10": entry}


def _metrics(gold: str | None, experiment: str) -> dict:
    """A retrieval run's metrics.json: recall@10 0.5 under the official gold, 0.75 under the
    audited one (``gold=None``: a run recorded before ``dataset.gold`` existed)."""
    dataset = {"name": "locomo10", "questions": 5}
    if gold is not None:
        dataset["gold"] = gold
    if gold in ("audited", "both"):
        dataset["audit"] = {"sha256": "abc", "entries": 2, "unanswerable_as_asked": 1}
    metrics = {"identity": {"experiment": experiment, "eval_mode": "retrieval",
                            "category_names": {str(k): v for k, v in NAMES.items()},
                            "answerable_categories": [1, 2, 3, 4], "unanswerable_category": 5,
                            "dataset": dataset, "memory": {"memory": "bm25"}},
               "metrics": _section(0.75 if gold == "audited" else 0.5),
               "retrieval": {"context_tokens_mean": 100.0}}
    if gold == "both":
        metrics["metrics_audited"] = _section(0.75)
    return metrics


def test_a_both_run_writes_the_audited_tables_too():
    tables = build_tables(_metrics("both", "bm25"), NAMES, "bm25")
    official, audited = tables["main_recall@10"], tables["main_recall@10_audited"]
    assert official.index.name == "system (official gold)"
    assert audited.index.name == "system (audited gold)"
    assert official.loc["bm25", "mean_q_1_4"] == 50.0
    assert audited.loc["bm25", "mean_q_1_4"] == 75.0


def test_an_audited_run_says_its_tables_are_audited():
    tables = build_tables(_metrics("audited", "bm25"), NAMES, "bm25")
    assert "main_recall@10" not in tables  # no table of its passes for the official gold's
    table = tables["main_recall@10_audited"]
    assert table.index.name == "system (audited gold)" and table.attrs["gold"] == "audited"
    assert table.loc["bm25", "mean_q_1_4"] == 75.0


def test_the_paper_rows_stand_only_beside_the_official_gold():
    metrics = _metrics("both", "bm25")
    for section in ("metrics", "metrics_audited"):
        metrics[section]["f1_official"] = metrics[section]["recall@10"]
    metrics["identity"]["eval_mode"] = "qa"
    tables = build_tables(metrics, NAMES, "bm25")
    assert any(str(i).startswith("paper: ") for i in tables["main_f1_official"].index)
    assert not any(str(i).startswith("paper: ") for i in tables["main_f1_official_audited"].index)


def test_gold_is_a_protocol_field():
    runs = {"a": _metrics("official", "a"), "b": _metrics("audited", "b")}
    assert protocol_differences(runs)["dataset.gold"] == {"a": "official", "b": "audited"}
    # a run from before dataset.gold scored the official gold: no difference
    assert "dataset.gold" not in protocol_differences({"a": _metrics("official", "a"),
                                                       "old": _metrics(None, "old")})


def _make_tables():
    return load_script("make_tables")


def _folders(tmp_path: Path, golds: dict[str, str]) -> Path:
    for i, (label, gold) in enumerate(golds.items()):
        folder = tmp_path / "runs" / f"{i}_{label}"
        folder.mkdir(parents=True)
        (folder / "metrics.json").write_text(json.dumps(_metrics(gold, label)))
    return tmp_path / "runs"


def test_make_tables_refuses_an_official_and_an_audited_run(tmp_path, capsys):
    runs = _folders(tmp_path, {"official_run": "official", "audited_run": "audited"})
    assert _make_tables().main([str(runs), "--out", str(tmp_path / "t")]) == 2
    err = capsys.readouterr().err
    assert "refused" in err and "dataset.gold: official_run=official, audited_run=audited" in err
    assert not (tmp_path / "t").exists()
    # allowed mixed protocols still never set the two golds side by side
    assert _make_tables().main([str(runs), "--out", str(tmp_path / "t"),
                                "--allow-mixed-protocols"]) == 2
    assert "different golds" in capsys.readouterr().err
    assert not (tmp_path / "t" / "main_recall@10.md").exists()


def test_make_tables_names_the_gold(tmp_path, capsys):
    runs = _folders(tmp_path, {"a": "both", "b": "both"})
    out = tmp_path / "t"
    assert _make_tables().main([str(runs), "--out", str(out)]) == 0
    audited = (out / "main_recall@10_audited.md").read_text().splitlines()
    assert audited[0].startswith("| system (audited gold) |")
    assert [line.split("|")[1].strip() for line in audited[2:]] == ["a", "b"]
    assert "| 75.0 |" in audited[2]
    assert (out / "main_recall@10.md").read_text().startswith("| system (official gold) |")
    combined = (out / "tables.md").read_text()
    assert "### main_recall@10_audited (recall@10, x100, audited gold)" in combined
    assert "audited gold" in (out / "main_recall@10_audited.tex").read_text()
    runs_md = (out / "runs.md").read_text().splitlines()
    header = [c.strip() for c in runs_md[0].split("|")]
    assert "gold" in header
    assert [c.strip() for c in runs_md[2].split("|")][header.index("gold")] == "both"


@pytest.mark.parametrize("golds", [{"a": "official", "b": "both"}])
def test_an_official_and_a_both_run_share_the_official_tables(tmp_path, capsys, golds):
    runs = _folders(tmp_path, golds)
    out = tmp_path / "t"
    # the gold differs (refused by default); allowed, only the gold both hold is tabulated
    assert _make_tables().main([str(runs), "--out", str(out)]) == 2
    assert _make_tables().main([str(runs), "--out", str(out), "--allow-mixed-protocols"]) == 0
    assert (out / "main_recall@10.md").is_file()
    assert not (out / "main_recall@10_audited.md").exists()
    assert "dataset.gold" in (out / "protocols.md").read_text()


def test_the_peer_rules_tables_name_their_gold():
    rules = {"session_hit@5": {"overall": 0.5, "mean_q_1_4": 0.5,
                               "n": {"overall": 5, "mean_q_1_4": 4}}}
    audited = _metrics("audited", "bm25") | {"peer_rules": rules}
    tables = build_tables(audited, NAMES, "bm25")
    assert "peer_rules" not in tables  # an audited run's peer rules are the audited gold's
    assert tables["peer_rules_audited"].index.name == "rule@k (audited gold)"
    both = _metrics("both", "bm25") | {"peer_rules": rules, "peer_rules_audited": rules}
    tables = build_tables(both, NAMES, "bm25")
    assert tables["peer_rules"].index.name == "rule@k (official gold)"
    assert tables["peer_rules_audited"].index.name == "rule@k (audited gold)"


def test_prompt_source_is_a_protocol_field_of_runs_that_send_prompts() -> None:
    """Our wording and the related systems' files are two protocols; a retrieval run sends no
    prompt, so its setting does not set it apart."""
    def run(mode: str, source: str) -> dict:
        return {"identity": {"eval_mode": mode, "prompt_source": source}}

    assert protocol_differences({"a": run("qa", "upstream"), "b": run("qa", "ours")}) == {
        "prompt_source": {"a": "upstream", "b": "ours"}}
    assert protocol_differences({"a": run("retrieval", "upstream"),
                                 "b": run("retrieval", "ours")}) == {}
