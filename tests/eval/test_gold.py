"""Scoring under the audited gold (``dataset.gold``): the same retrieval and answers, scored twice;
the audited columns differ exactly where the audit corrects, its unanswerable questions are left
out, and a run's metrics.json carries both golds and the peers' rules."""

from __future__ import annotations

import math

import pytest
from test_pipeline import QA, Counter, HandMemory, ScriptedLLM, turn_item

from synapse_pt.data import load_locomo, sample_path
from synapse_pt.data.audit import ANSWERABLE, UNANSWERABLE, AuditedGold, GoldAudit
from synapse_pt.eval.qa.pipeline import EvalSettings, evaluate
from synapse_pt.eval.qa.scorers.official import score_official
from synapse_pt.eval.records.record import RunCategories, run_metrics

NAMES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}


@pytest.fixture(scope="module")
def ds():
    return load_locomo(sample_path(), name="sample")


def _audit(ds):
    q1, q2 = [q for q in ds.questions() if q.category in (1, 2, 3, 4) and q.evidence][:2]
    other = next(t.dia_id for t in ds.turns() if t.dia_id not in q1.evidence)
    corrected = AuditedGold(q1.key, "locomo_0_qa0", "WRONG_CITATION", ANSWERABLE, None,
                            (other,), (other,), (), "a new answer", q1.answer, "a new answer")
    dropped = AuditedGold(q2.key, "locomo_0_qa1", "ATTRIBUTION_ERROR", UNANSWERABLE, "premise",
                          q2.evidence, q2.evidence_raw, (), None, q2.answer, "x (not Bob)")
    return GoldAudit("audit.json", "h", {q1.key: corrected, q2.key: dropped}, 0), q1, q2, other


def test_both_golds_score_the_same_retrieval(ds):
    audit, q1, q2, other = _audit(ds)
    # every question retrieves q1's evidence turn first, then `other`
    memory = HandMemory(default=[turn_item(ds, q1.evidence[0]), turn_item(ds, other)])
    official, _ = evaluate(memory, ds, settings=EvalSettings(), token_counter=Counter())
    both, summary = evaluate(memory, ds, settings=EvalSettings(), token_counter=Counter(),
                             audit=audit, gold="both")
    for col in official.columns:  # the official columns are untouched
        assert both[col].astype(str).equals(official[col].astype(str)), col
    rows = {q: both.index[(both["sample_id"] == q.sample_id) & (both["qa_index"] == q.qa_index)][0]
            for q in (q1, q2)}
    # q1: audited evidence is `other` alone, retrieved second: recall@5 1, any@1 0 (hand-worked)
    assert both.at[rows[q1], "recall@5"] == 1.0 / len(q1.evidence)
    assert both.at[rows[q1], "audited_recall@5"] == 1.0
    assert both.at[rows[q1], "audited_peer_any@1"] == 0.0
    assert list(both.at[rows[q1], "audited_evidence"]) == [other]
    # q2: unanswerable as asked: left out of every audited metric
    assert math.isnan(both.at[rows[q2], "audited_recall@5"])
    assert math.isnan(both.at[rows[q2], "audited_peer_session_recall@5"])
    assert both.at[rows[q2], "audit_status"] == UNANSWERABLE
    # every other row: the audited columns equal the official ones
    rest = ~both.index.isin(list(rows.values()))
    for col in [c for c in official.columns if c.startswith(("recall@", "peer_"))]:
        assert both.loc[rest, f"audited_{col}"].astype(str).equals(
            both.loc[rest, col].astype(str)), col
    assert set(both.loc[rest, "audit_status"]) == {"official"}
    assert summary["audit_listed"] == 2 and summary["audit_unanswerable_as_asked"] == 1
    # an audited-only run holds the audited values in the plain columns
    audited, _ = evaluate(memory, ds, settings=EvalSettings(), token_counter=Counter(),
                          audit=audit, gold="audited")
    for col in ("recall@5", "evidence", "gold"):
        assert audited[col].astype(str).equals(both[f"audited_{col}"].astype(str)), col


def test_qa_scores_take_the_audited_answer(ds):
    audit, q1, q2, _ = _audit(ds)
    memory = HandMemory(default=[turn_item(ds, q1.evidence[0])])
    llm = ScriptedLLM(answers={q1.question: "a new answer"})
    df, _ = evaluate(memory, ds, settings=QA, token_counter=Counter(), llm=llm, audit=audit,
                     gold="both")
    row = df[(df["sample_id"] == q1.sample_id) & (df["qa_index"] == q1.qa_index)].iloc[0]
    assert row["audited_gold"] == "a new answer"
    assert row["audited_f1_official"] == score_official("a new answer", "a new answer",
                                                        q1.category) == 1.0
    assert row["f1_official"] == score_official("a new answer", q1.answer, q1.category)


def test_metrics_json_carries_both_golds_and_the_peers_rules(ds):
    audit, *_ = _audit(ds)
    memory = HandMemory(default=[turn_item(ds, next(ds.turns()).dia_id)])
    settings = EvalSettings()
    df, summary = evaluate(memory, ds, settings=settings, token_counter=Counter(), audit=audit,
                           gold="both")
    metrics = run_metrics(df, summary, {}, settings=settings, categories=RunCategories(NAMES),
                          context_tokenizer="words", llm=None, prices={})
    assert set(metrics["metrics"]) == set(metrics["metrics_audited"])
    assert "session_hit@5" in metrics["peer_rules"] and "strict@10" in metrics["peer_rules"]
    assert set(metrics["peer_rules"]) == set(metrics["peer_rules_audited"])
    n_official = metrics["metrics"]["recall@5"]["n"]["overall"]
    assert metrics["metrics_audited"]["recall@5"]["n"]["overall"] == n_official - 1  # q2 out


def test_a_gold_needs_its_audit(ds):
    with pytest.raises(ValueError, match="needs the audit file"):
        evaluate(HandMemory(), ds, settings=EvalSettings(), token_counter=Counter(),
                 gold="audited")
    with pytest.raises(ValueError, match="dataset.gold must be one of"):
        evaluate(HandMemory(), ds, settings=EvalSettings(), token_counter=Counter(),
                 gold="silver")


@pytest.mark.slow
@pytest.mark.locomo
def test_a_run_on_locomo_scores_both_golds_and_prints_both(locomo_path, tmp_path):
    from synapse_pt.commands.build import composed_config, run_category_names
    from synapse_pt.commands.run import run
    from synapse_pt.eval.reports.console import render_summary

    cfg = composed_config(["memory=bm25", "dataset.gold=both", f"dataset.path={locomo_path}",
                           f"paths.cache_dir={tmp_path / 'cache'}",
                           f"paths.output_dir={tmp_path / 'out'}"])
    metrics = run(cfg)
    identity = metrics["identity"]["dataset"]
    assert identity["gold"] == "both" and identity["upstream"] == "identical"
    assert identity["audit"]["entries"] == 156 and identity["audit"]["unanswerable_as_asked"] == 40
    assert identity["content_sha256"]
    # 40 unanswerable questions of categories 1-4 leave the audited means, none else
    n = metrics["metrics"]["recall@10"]["n"]["mean_q_1_4"]
    assert metrics["metrics_audited"]["recall@10"]["n"]["mean_q_1_4"] == n - 40
    assert metrics["peer_rules"]["session_hit@5"]["n"]["overall"] == 1982
    assert metrics["peer_rules"]["session_recall@10"]["n"]["overall"] == 1986
    assert (tmp_path / "out" / "tables" / "peer_rules.md").is_file()
    text = render_summary(metrics, run_category_names(cfg), label="bm25", output_dir="out")
    assert "official gold:" in text and "audited gold (156 questions corrected" in text
