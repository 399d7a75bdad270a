"""The QA pipeline: gate path, answers and scores, prompts, label blindness, judge, retrieval mode.

A scripted fake LLM (it records every request) stands in for the answer model; memories are either
a hand-made one (exact control over items and the gate) or a real baseline on the shipped sample.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Sequence
from datetime import datetime

import pandas as pd
import pytest
import torch

from synapse_pt.data import load_locomo, sample_path
from synapse_pt.data.render import TurnRenderer
from synapse_pt.data.schema import Dataset, Dialogue, Question
from synapse_pt.eval.qa.pipeline import EvalSettings, evaluate
from synapse_pt.eval.qa.prompts import DATE_INSTRUCTION, NO_RECORD_REPLY, STRICT_EVIDENCE
from synapse_pt.eval.qa.scorers.amem import score_amem
from synapse_pt.eval.qa.scorers.judge import ACCURACY_PROMPT
from synapse_pt.eval.qa.scorers.official import score_official
from synapse_pt.memory.base import MemorySystem, RetrievalResult
from synapse_pt.memory.baselines import BM25Memory, VectorRAG
from synapse_pt.memory.membox.score import f1_membox
from synapse_pt.models.hashing import HashingEncoder
from synapse_pt.models.llm.base import LLM, ChatRequest, ChatResponse
from synapse_pt.retrieval.items import EPISODIC, SEMANTIC, RetrievedItem

QUESTION_LINE = re.compile(r"^Question: (.*)$", re.MULTILINE)
JUDGE_MARK = "Your task is to label an answer"


class ScriptedLLM(LLM):
    """Answers from a script and records every request it gets.

    ``script(request) -> text``; by default the answer is looked up by the prompt's question line.
    """

    backend = "scripted"
    model = "scripted-1"

    def __init__(self, answers: dict[str, str] | None = None,
                 script: Callable[[ChatRequest], str] | None = None) -> None:
        self.answers = answers or {}
        self.script = script
        self.requests: list[ChatRequest] = []
        self.calls = 0

    def generate(self, requests: Sequence[ChatRequest]) -> list[ChatResponse]:
        self.calls += 1
        out = []
        for r in requests:
            self.requests.append(r)
            text = self.script(r) if self.script else self.answers.get(question_of(r), "no idea")
            out.append(ChatResponse(text=text, prompt_tokens=len(user_text(r).split()),
                                    completion_tokens=len(text.split()), latency_s=0.25,
                                    model=self.model))
        return out

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def answer_requests(self) -> list[ChatRequest]:
        return [r for r in self.requests if JUDGE_MARK not in user_text(r)]


def user_text(request: ChatRequest) -> str:
    return "\n".join(content for role, content in request.messages if role == "user")


def question_of(request: ChatRequest) -> str:
    match = QUESTION_LINE.search(user_text(request))
    return match.group(1) if match else ""


class HandMemory(MemorySystem):
    """A hand-made memory: fixed items per question text, gated where ``gate(question)`` says.

    Records the questions it is shown (to check that it never sees labels).
    """

    name = "hand"

    def __init__(self, items: dict[str, list[RetrievedItem]] | None = None,
                 gated: set[str] | None = None, default: list[RetrievedItem] | None = None
                 ) -> None:
        self.items = items or {}
        self.gated_questions = gated or set()
        self.default = default or []
        self.seen: list[Question] = []

    def ingest_dialogues(self, conversations: Sequence[Dialogue]) -> None:
        pass

    def retrieve(self, questions: Sequence[Question]) -> RetrievalResult:
        self.seen.extend(questions)
        rows = [self.items.get(q.question, self.default) for q in questions]
        gated = torch.tensor([q.question in self.gated_questions for q in questions])
        c_ret = torch.where(gated, 0.05, 0.5).float()
        return RetrievalResult(rows, c_ret, gated)


class Counter:
    name = "words"

    def count_many(self, texts: Sequence[str]) -> list[int]:
        return [len(t.split()) for t in texts]


def turn_item(ds: Dataset, dia_id: str, score: float = 1.0) -> RetrievedItem:
    t = next(t for t in ds.turns() if t.dia_id == dia_id)
    return RetrievedItem(dia_id, TurnRenderer()(t), EPISODIC, score, t.timestamp, t.speaker)


@pytest.fixture(scope="module")
def ds() -> Dataset:
    return load_locomo(sample_path(), name="sample")


def by_text(ds: Dataset) -> dict[str, Question]:
    return {q.question: q for q in ds.questions()}


QA = EvalSettings(mode="qa")


def test_gated_questions_get_no_record_reply_and_no_llm_call(ds: Dataset) -> None:
    qs = list(ds.questions())
    gated = {qs[0].question, qs[6].question, qs[11].question, qs[13].question}
    memory = HandMemory(gated=gated, default=[turn_item(ds, "D1:7")])
    llm = ScriptedLLM()
    df, summary = evaluate(memory, ds, settings=QA, token_counter=Counter(), llm=llm)

    asked = [question_of(r) for r in llm.requests]
    assert sorted(asked) == sorted(q.question for q in qs if q.question not in gated)
    assert not set(asked) & gated
    rows = df.set_index("question")
    for text in gated:
        row = rows.loc[text]
        assert row["gated"]
        assert row["prediction"] == NO_RECORD_REPLY
        assert row["prompt_tokens"] == 0 and row["completion_tokens"] == 0
        assert row["latency_s"] == 0.0
    # the no-record reply is a correct refusal on category 5, under both protocols
    cat5 = rows.loc[qs[11].question]
    assert cat5["f1_official"] == 1.0 and cat5["f1_amem"] == 1.0 and cat5["bleu1"] == 1.0
    assert pd.isna(cat5["f1_membox"])  # Membox's protocol skips category 5
    assert summary["gated_rate"] == pytest.approx(len(gated) / len(qs))
    assert summary["true_rejection_rate"] == pytest.approx(2 / 3)
    assert summary["false_rejection_rate"] == pytest.approx(2 / 11)


def test_all_gated_makes_no_llm_call_at_all(ds: Dataset) -> None:
    memory = HandMemory(gated={q.question for q in ds.questions()})
    llm = ScriptedLLM()
    df, _ = evaluate(memory, ds, settings=QA, token_counter=Counter(), llm=llm)
    assert llm.calls == 0 and llm.requests == []
    assert (df["prediction"] == NO_RECORD_REPLY).all()


def test_answers_flow_into_predictions_and_are_scored_under_both_protocols(ds: Dataset) -> None:
    qs = by_text(ds)
    answers = {
        "What is the name of Nora's dog?": "Biscuit",
        "What class did Tomas sign up for?": "a pottery class",
        "What pets does Nora have?": "a cat called Pepper, a greyhound",
        "What breed is Tomas's dog?": "greyhound",  # the distractor: must score 0 on category 5
        "Which city did Tomas visit for a conference?": "Not mentioned in the memory.",
    }
    llm = ScriptedLLM({**answers, "When did Tomas make his first bowl?": "  19 March 2024\n"})
    memory = HandMemory(default=[turn_item(ds, "D1:2")])
    df, _ = evaluate(memory, ds, settings=QA, token_counter=Counter(), llm=llm)
    rows = df.set_index("question")

    assert rows.loc["When did Tomas make his first bowl?", "prediction"] == "19 March 2024"
    for text, pred in answers.items():
        row = rows.loc[text]
        q = qs[text]
        assert row["prediction"] == pred
        assert row["f1_official"] == pytest.approx(score_official(pred, q.answer, q.category))
        amem = score_amem(pred, q.answer, q.category)
        assert row["f1_amem"] == pytest.approx(amem["f1_amem"])
        assert row["bleu1"] == pytest.approx(amem["bleu1"])
        if q.category != 5:
            assert row["f1_membox"] == pytest.approx(f1_membox(pred, q.answer))
        assert row["prompt_tokens"] > 0 and row["latency_s"] == 0.25
    # worked values: the protocols differ (articles dropped and stems vs a plain token set)
    assert rows.loc["What is the name of Nora's dog?", "f1_official"] == 1.0
    assert rows.loc["What is the name of Nora's dog?", "f1_amem"] == 1.0
    assert rows.loc["What class did Tomas sign up for?", "f1_official"] == 1.0
    assert rows.loc["What class did Tomas sign up for?", "f1_amem"] == pytest.approx(0.8)
    assert rows.loc["What class did Tomas sign up for?", "f1_membox"] == pytest.approx(0.8)
    assert rows.loc["What breed is Tomas's dog?", "f1_official"] == 0.0
    assert rows.loc["What breed is Tomas's dog?", "f1_amem"] == 0.0
    assert rows.loc["Which city did Tomas visit for a conference?", "f1_official"] == 1.0
    assert 0.0 < rows.loc["What pets does Nora have?", "f1_official"] < 1.0
    # every question answered exactly once, in order of the dataset
    assert len(llm.requests) == len(qs)
    assert list(df["qa_index"]) == list(range(len(qs)))


def test_date_instruction_only_when_the_flag_is_on(ds: Dataset) -> None:
    memory = HandMemory(default=[turn_item(ds, "D2:1")])
    temporal = {q.question for q in ds.questions() if q.category == 2}
    assert temporal
    for flag in (False, True):
        llm = ScriptedLLM()
        settings = EvalSettings(mode="qa", category_date_instruction=flag)
        evaluate(memory, ds, settings=settings, token_counter=Counter(), llm=llm)
        with_instruction = {question_of(r) for r in llm.requests
                            if DATE_INSTRUCTION.strip() in user_text(r)}
        assert with_instruction == (temporal if flag else set())
        assert all(STRICT_EVIDENCE in user_text(r) for r in llm.requests)


def test_strict_evidence_instruction_can_be_turned_off(ds: Dataset) -> None:
    llm = ScriptedLLM()
    evaluate(HandMemory(), ds, settings=EvalSettings(mode="qa", strict_evidence=False),
             token_counter=Counter(), llm=llm)
    assert not any(STRICT_EVIDENCE in user_text(r) for r in llm.requests)


def test_prompt_holds_context_in_time_order_with_dates_and_marked_concepts(ds: Dataset) -> None:
    # rank order (best first) differs from time order on purpose
    items = [turn_item(ds, "D3:6", 0.9), RetrievedItem("S:4", "pottery class", SEMANTIC, 0.8),
             turn_item(ds, "D1:4", 0.7), RetrievedItem("S:1", "Lena", SEMANTIC, 0.6),
             turn_item(ds, "D2:5", 0.5)]
    question = "What did Tomas do with the voucher Lena gave him, and what did he give her back?"
    memory = HandMemory(items={question: items})
    llm = ScriptedLLM()
    df, _ = evaluate(memory, ds, settings=QA, token_counter=Counter(), llm=llm)

    prompt = user_text(next(r for r in llm.requests if question_of(r) == question))
    lines = [ln for ln in prompt.splitlines() if ln.startswith("- ")]
    turns = {t.dia_id: t for t in ds.turns()}
    expected = [f"- [3 March 2024] Tomas: {turns['D1:4'].content}",
                f"- [20 March 2024] {turns['D2:5'].speaker}: {turns['D2:5'].content}",
                f"- [22 April 2024] {turns['D3:6'].speaker}: {turns['D3:6'].content}",
                "- [concept] pottery class", "- [concept] Lena"]
    assert lines == expected
    assert "Nora and Tomas" in prompt
    assert f"Question: {question}" in prompt
    # the predictions keep the rank order, with LoCoMo dia_ids and prefixed concept ids
    row = df.set_index("question").loc[question]
    assert list(row["retrieved"]) == ["D3:6", "S:4", "D1:4", "S:1", "D2:5"]
    assert row["recall@5"] == 1.0 and row["context_tokens"] > 0


def test_memory_and_prompt_never_see_labels(ds: Dataset) -> None:
    memory = HandMemory(default=[turn_item(ds, "D1:1")])
    llm = ScriptedLLM()
    evaluate(memory, ds, settings=QA, token_counter=Counter(), llm=llm)
    qs = list(ds.questions())
    assert [q.question for q in memory.seen] == [q.question for q in qs]
    assert [q.sample_id for q in memory.seen] == [q.sample_id for q in qs]
    for q in memory.seen:
        assert q.answer is None and q.adversarial_answer is None
        assert q.category == 0 and q.evidence == () and q.evidence_raw == ()


def test_prompts_do_not_depend_on_labels(ds: Dataset) -> None:
    """Relabelling every question (category, gold) leaves the answer requests unchanged."""
    def relabel(q: Question) -> Question:
        return dataclasses.replace(q, category=4 if q.category != 4 else 1, answer="zzz",
                                   adversarial_answer=None)

    conv = ds.conversations[0]
    relabelled = dataclasses.replace(conv, questions=tuple(map(relabel, conv.questions)))
    other = Dataset([relabelled], ds.path, ds.name)
    memory = BM25Memory(k=5)
    memory.ingest(ds.conversations)
    requests = []
    for data in (ds, other):
        llm = ScriptedLLM()
        evaluate(memory, data, settings=QA, token_counter=Counter(), llm=llm)
        requests.append(llm.requests)
    assert requests[0] == requests[1]


def test_real_baseline_end_to_end_with_gate(ds: Dataset) -> None:
    memory = VectorRAG(HashingEncoder(256), k=10, tau_gate=0.3)
    memory.ingest(ds.conversations)
    llm = ScriptedLLM({"What is the name of Nora's dog?": "Biscuit"})
    df, summary = evaluate(memory, ds, settings=QA, token_counter=Counter(), llm=llm)
    n_gated = int(df["gated"].sum())
    assert 0 < n_gated < len(df)  # the threshold splits the sample
    assert len(llm.requests) == len(df) - n_gated
    assert set(question_of(r) for r in llm.requests) == set(df.loc[~df["gated"], "question"])
    assert (df.loc[df["gated"], "prediction"] == NO_RECORD_REPLY).all()
    assert (df["c_ret"][df["gated"]] < 0.3).all() and (df["c_ret"][~df["gated"]] >= 0.3).all()
    assert df["retrieved"].map(len).eq(10).all()
    assert all(re.fullmatch(r"D\d+:\d+", i) for ids in df["retrieved"] for i in ids)
    for col in ("f1_official", "f1_amem", "bleu1", "recall@5", "recall@10", "recall@30"):
        assert col in df.columns
    assert summary["num_questions"] == len(df)


def test_retrieval_mode_needs_no_llm_and_leaves_prediction_null(ds: Dataset) -> None:
    memory = BM25Memory(k=30)
    memory.ingest(ds.conversations)
    df, summary = evaluate(memory, ds, settings=EvalSettings(mode="retrieval"),
                           token_counter=Counter(), llm=None)
    assert df["prediction"].isna().all()
    assert not {"f1_official", "f1_amem", "bleu1", "judge"} & set(df.columns)
    assert (df["prompt_tokens"] == 0).all() and (df["completion_tokens"] == 0).all()
    for k in (5, 10, 30):
        assert df[f"recall@{k}"].dtype == "float64"
        assert df[f"recall@{k}"].between(0, 1).all()
    assert (df["recall@5"] <= df["recall@10"]).all() and (df["recall@10"] <= df["recall@30"]).all()
    assert summary["answer_seconds"] == 0.0
    assert 0.0 <= summary["c_ret_auc_adversarial"] <= 1.0
    # an LLM handed over in retrieval mode is never called
    llm = ScriptedLLM()
    evaluate(memory, ds, settings=EvalSettings(mode="retrieval"), token_counter=Counter(), llm=llm)
    assert llm.calls == 0


def test_qa_mode_without_llm_is_an_error(ds: Dataset) -> None:
    with pytest.raises(ValueError, match="needs an answer model"):
        evaluate(HandMemory(), ds, settings=QA, token_counter=Counter(), llm=None)


def judge_script(answers: dict[str, str], verdicts: dict[str, list[str]]
                 ) -> Callable[[ChatRequest], str]:
    """Answers questions from ``answers``; judge prompts get ``verdicts[question][seed]``."""
    def script(r: ChatRequest) -> str:
        text = user_text(r)
        if JUDGE_MARK in text:
            q = re.search(r"real question:\nQuestion: (.*)$", text, re.MULTILINE).group(1)
            replies = verdicts.get(q, ['{"label": "WRONG"}'] * 8)
            return replies[r.seed]
        return answers.get(question_of(r), "no idea")
    return script


def test_llm_judge_mean_spread_and_failures(ds: Dataset) -> None:
    dog, bowl = "What is the name of Nora's dog?", "When did Tomas make his first bowl?"
    work = "Where does Nora work?"
    verdicts = {
        dog: ['{"label": "CORRECT"}', "CORRECT", '{"label": "WRONG"}'],
        bowl: ["I cannot tell.", "hmm", "???"],  # every run unreadable: a failure, not WRONG
        work: ['{"label": "CORRECT"}', "garbled", '{"label": "CORRECT"}'],
    }
    llm = ScriptedLLM(script=judge_script({dog: "Biscuit"}, verdicts))
    memory = HandMemory(gated={work}, default=[turn_item(ds, "D1:7")])
    settings = EvalSettings(mode="qa", judge_runs=3, seed=0)
    df, summary = evaluate(memory, ds, settings=settings, token_counter=Counter(), llm=llm)
    rows = df.set_index("question")

    assert rows.loc[dog, "judge"] == pytest.approx(2 / 3)
    assert rows.loc[dog, "judge_std"] == pytest.approx(math.sqrt(2 / 9))
    assert rows.loc[dog, "n_judge_failures"] == 0
    assert math.isnan(rows.loc[bowl, "judge"]) and rows.loc[bowl, "n_judge_failures"] == 3
    assert rows.loc[work, "judge"] == 1.0 and rows.loc[work, "n_judge_failures"] == 1
    # category 5 is not judged (scored by the phrase rule); not a failure either
    cat5 = df[df["category"] == 5]
    assert cat5["judge"].isna().all() and (cat5["n_judge_failures"] == 0).all()
    assert df["judge"].dtype == "float64" and df["judge_std"].dtype == "float64"

    judge_requests = [r for r in llm.requests if JUDGE_MARK in user_text(r)]
    n_judged = int((df["category"] != 5).sum())
    assert len(judge_requests) == 3 * n_judged
    assert sorted({r.seed for r in judge_requests}) == [0, 1, 2]
    # the judge sees the gold and the final answer, the gated reply included
    work_prompt = next(t for t in map(user_text, judge_requests) if f"Question: {work}\n" in t)
    assert "Gold answer: the city library" in work_prompt
    assert f"Generated answer: {NO_RECORD_REPLY}" in work_prompt
    assert ACCURACY_PROMPT.splitlines()[1] in work_prompt

    assert summary["judge_runs"] == 3
    assert summary["judge_failures"] == 4
    assert summary["judge_questions"] == n_judged
    assert summary["judge_questions_unjudged"] == 1
    assert summary["judge_failure_rate"] == pytest.approx(4 / (3 * n_judged))

    # per category, over runs: labels by hand (1 CORRECT, 0 WRONG, None unreadable)
    by_hand = {dog: [1, 1, 0], bowl: [None] * 3, work: [1, None, 1]}
    cats = df.set_index("question")["category"]
    for k in (1, 2, 3, 4):
        rows_k = [by_hand.get(q, [0, 0, 0]) for q in cats.index[cats == k]]
        if not rows_k:
            continue
        per_run = []
        for r in range(3):
            values = [row[r] for row in rows_k if row[r] is not None]
            per_run.append(sum(values) / len(values) if values else float("nan"))
        mean = sum(per_run) / 3
        std = math.sqrt(sum((a - mean) ** 2 for a in per_run) / 3)
        assert summary[f"judge_accuracy_mean_cat{k}"] == pytest.approx(mean), k
        assert summary[f"judge_accuracy_std_over_runs_cat{k}"] == pytest.approx(std), k
    assert "judge_accuracy_mean_cat5" not in summary  # not judged


def test_several_judges_score_the_same_answers_each_in_its_column(ds: Dataset) -> None:
    """eval.judges=[mem0, realtalk]: each answer asked once, each judge once a question, its
    verdicts in judge_<protocol> (no judge column), its figures and its responses apart."""
    dog, bowl = "What is the name of Nora's dog?", "When did Tomas make his first bowl?"

    def script(r: ChatRequest) -> str:
        text = user_text(r)
        if JUDGE_MARK in text:
            return '{"label": "CORRECT"}' if "Generated answer: Biscuit" in text else "WRONG"
        if text.startswith("Judge how correct"):
            return "unsure" if f"Question: {bowl}\n" in text else '{"score": 0.25}'
        return {dog: "Biscuit"}.get(question_of(r), "no idea")

    llm = ScriptedLLM(script=script)
    settings = EvalSettings(mode="qa", judge_runs=1, judges=("mem0", "realtalk"))
    served: dict[str, list[ChatResponse]] = {}
    df, summary = evaluate(HandMemory(default=[turn_item(ds, "D1:7")]), ds, settings=settings,
                           token_counter=Counter(), llm=llm, judge_served=served)
    rows = df.set_index("question")
    judged = df["category"] != 5
    n_judged = int(judged.sum())

    answers = [r for r in llm.requests if JUDGE_MARK not in user_text(r)
               and not user_text(r).startswith("Judge how correct")]
    assert sorted(map(question_of, answers)) == sorted(df["question"])  # each asked once
    assert "judge" not in df.columns
    for col in ("judge_mem0", "judge_mem0_std", "judge_realtalk", "judge_realtalk_std"):
        assert df[col].dtype == "float64", col
    assert rows.loc[dog, "judge_mem0"] == 1.0
    assert (df.loc[judged & (df["question"] != dog), "judge_mem0"] == 0.0).all()
    assert math.isnan(rows.loc[bowl, "judge_realtalk"])
    assert rows.loc[bowl, "n_judge_realtalk_failures"] == 1
    assert (df.loc[judged & (df["question"] != bowl), "judge_realtalk"] == 0.25).all()
    assert df.loc[~judged, ["judge_mem0", "judge_realtalk"]].isna().all().all()
    assert summary["judge_mem0_runs"] == 1 and summary["judge_mem0_failures"] == 0
    assert summary["judge_realtalk_failures"] == 1
    assert summary["judge_realtalk_questions"] == n_judged
    assert not any(k.startswith("judge_") and k.split("_")[1] not in ("mem0", "realtalk")
                   for k in summary)
    # each judge's responses apart: one a judged question, in the order asked
    assert [len(served["mem0"]), len(served["realtalk"])] == [n_judged, n_judged]
    assert sum(r.text == '{"label": "CORRECT"}' for r in served["mem0"]) == 1
    assert sum(r.text == "unsure" for r in served["realtalk"]) == 1


def test_judge_off_by_default_and_in_retrieval_mode(ds: Dataset) -> None:
    llm = ScriptedLLM()
    df, summary = evaluate(HandMemory(), ds, settings=QA, token_counter=Counter(), llm=llm)
    assert "judge" not in df.columns and "judge_failures" not in summary
    assert not any(JUDGE_MARK in user_text(r) for r in llm.requests)
    memory = BM25Memory(k=5)
    memory.ingest(ds.conversations)
    df, _ = evaluate(memory, ds, settings=EvalSettings(mode="retrieval", judge_runs=3),
                     token_counter=Counter(), llm=llm)
    assert "judge" not in df.columns


def test_chunked_retrieval_equals_one_batch(ds: Dataset) -> None:
    memory = VectorRAG(HashingEncoder(64), k=5)
    memory.ingest(ds.conversations)
    one, _ = evaluate(memory, ds, settings=EvalSettings(), token_counter=Counter())
    chunked, _ = evaluate(memory, ds, settings=EvalSettings(retrieval_batch_size=4),
                          token_counter=Counter())
    assert one["retrieved"].map(list).tolist() == chunked["retrieved"].map(list).tolist()
    assert one["c_ret"].tolist() == chunked["c_ret"].tolist()


def test_answer_batches_respect_the_batch_size(ds: Dataset) -> None:
    llm = ScriptedLLM()
    evaluate(HandMemory(), ds, settings=EvalSettings(mode="qa", answer_batch_size=4),
             token_counter=Counter(), llm=llm)
    n = ds.num_questions
    assert llm.calls == -(-n // 4)
    assert len(llm.requests) == n


def test_settings_validate() -> None:
    with pytest.raises(ValueError, match="eval.mode"):
        EvalSettings(mode="train")
    with pytest.raises(ValueError, match="judge_runs"):
        EvalSettings(judge_runs=-1)


def test_undated_item_kinds_are_marked(ds: Dataset) -> None:
    from synapse_pt.eval.qa.prompts import format_context

    items = [RetrievedItem("F:1", "Nora likes dogs", "fact", 1.0),
             RetrievedItem("D1:1", "Nora: hello", EPISODIC, 0.5, datetime(2024, 3, 3, 14, 15),
                           "Nora"),
             RetrievedItem("D1:2", "[3 March 2024] Tomas: hi", EPISODIC, 0.4,
                           datetime(2024, 3, 3, 14, 16), "Tomas", dated=True)]
    # a turn's text is the memory's rendering; the prompt adds the date unless it carries one
    assert format_context(items).splitlines() == ["- [3 March 2024] Nora: hello",
                                                  "- [3 March 2024] Tomas: hi",
                                                  "- [fact] Nora likes dogs"]


@pytest.mark.parametrize(("field", "value", "message"), [
    ("recall_ks", (0, 10), "eval.recall_ks must be integers >= 1"),
    ("recall_ks", (), "eval.recall_ks must be integers >= 1"),
    ("max_answer_tokens", 0, "eval.max_answer_tokens must be >= 1"),
    ("answer_batch_size", -2, "eval.answer_batch_size must be >= 1"),
    ("judge_max_tokens", 0, "eval.judge_max_tokens must be >= 1"),
    ("retrieval_batch_size", -1, "eval.retrieval_batch_size must be >= 0"),
    ("judge_runs", -1, "eval.judge_runs must be >= 0"),
    ("mode", "answers", "eval.mode must be"),
    ("judges", ("mem0", "vibes"), r"eval.judges: \['vibes'\] not judges"),
    ("judges", ("system",), r"eval.judges: \['system'\] not judges"),
    ("judges", ("mem0", "mem0"), "eval.judges lists a judge twice"),
])
def test_eval_settings_are_validated_with_the_key_named(field, value, message) -> None:
    with pytest.raises(ValueError, match=message):
        EvalSettings(**{field: value})


def test_several_judges_need_a_judge_run_in_qa_mode() -> None:
    with pytest.raises(ValueError, match=r"eval.judges=\['mem0', 'gaama'\] needs "
                       "eval.judge_runs >= 1"):
        EvalSettings(mode="qa", judges=("mem0", "gaama"), judge_runs=0)
    # retrieval mode judges nothing: the list is ignored there, as judge_runs is
    assert EvalSettings(mode="retrieval", judges=("mem0",)).judges == ("mem0",)


STYLE_INSTRUCTIONS = {
    "shared": "Answer with a short phrase taken from the memory.",
    "gaama": "Answer in one or two short paragraphs, directly and specifically.",
    "membox": "Keep the answer under 5-6 words.",
}


@pytest.mark.parametrize(("style", "instruction"), list(STYLE_INSTRUCTIONS.items()))
def test_answer_style_sets_the_instruction(ds: Dataset, style: str, instruction: str) -> None:
    question = "What did Tomas do with the voucher Lena gave him, and what did he give her back?"
    memory = HandMemory(items={question: [turn_item(ds, "D1:4", 0.7)]})
    llm = ScriptedLLM()
    evaluate(memory, ds, settings=dataclasses.replace(QA, answer_style=style, prompts="ours"),
             token_counter=Counter(), llm=llm)
    prompt = user_text(next(r for r in llm.requests if question_of(r) == question))
    assert instruction in prompt
    assert all(other not in prompt for k, other in STYLE_INSTRUCTIONS.items() if k != style)
    with pytest.raises(ValueError, match="eval.answer_style"):
        dataclasses.replace(QA, answer_style="verbose")
    request = next(r for r in llm.requests if question_of(r) == question)
    if style == "gaama":  # the code's budget: 512 tokens, no newline stop; memory in sections
        assert request.max_tokens == 512 and not request.stop
        assert "## Episodes (in time order)" in prompt and "count each distinct" in prompt
    else:
        assert request.max_tokens == QA.max_answer_tokens
    if style == "membox":  # relative dates turned into dates for every question
        assert "Turn every relative time" in prompt


def test_category5_options_only_when_the_flag_is_on(ds: Dataset) -> None:
    memory = HandMemory(default=[turn_item(ds, "D2:1")])
    adversarial = {q.question: q.adversarial_answer for q in ds.questions() if q.category == 5}
    assert adversarial
    mark = "Select the correct answer: (a) "
    for flag in (False, True):
        # the model replies with a bare letter, "a", as the official code expects it may
        llm = ScriptedLLM(script=lambda r: "a" if mark in user_text(r) else "no idea")
        settings = EvalSettings(mode="qa", category5_options=flag)
        df, _ = evaluate(memory, ds, settings=settings, token_counter=Counter(), llm=llm)
        prompts = {question_of(r).split(" Select the correct")[0]: user_text(r)
                   for r in llm.requests}
        with_options = {q for q, text in prompts.items() if mark in text}
        assert with_options == (set(adversarial) if flag else set())
        rows = df.set_index("question")
        for question, distractor in adversarial.items():
            if not flag:
                assert rows.loc[question, "prediction"] == "no idea"
                continue
            line = re.search(r"Select the correct answer: \(a\) (.*) \(b\) (.*)\.$",
                             prompts[question], re.MULTILINE)
            assert line is not None
            assert {line.group(1), line.group(2)} == {distractor,
                                                      "Not mentioned in the conversation"}
            # "a" is replaced by option (a)'s text, and scored by the refusal rule
            assert rows.loc[question, "prediction"] == line.group(1)
            expected = 1.0 if line.group(1).startswith("Not mentioned") else 0.0
            assert rows.loc[question, "f1_official"] == expected
        # answerable questions never see the options
        assert all(mark not in prompts[q.question] for q in ds.questions() if q.category != 5)


def test_resolve_option_reply_follows_the_official_mapping() -> None:
    from synapse_pt.eval.qa.prompts import resolve_option_reply

    options = ("Lisbon", "Not mentioned in the conversation")
    assert resolve_option_reply(" a ", options) == "Lisbon"
    assert resolve_option_reply("B", options) == options[1]
    assert resolve_option_reply("(b)", options) == options[1]
    assert resolve_option_reply("(a)", options) == "Lisbon"
    assert resolve_option_reply("It was Lisbon", options) == "It was Lisbon"


def test_category5_option_order_is_seeded_and_balanced() -> None:
    from synapse_pt.eval.qa.prompts import NOT_MENTIONED_OPTION, category5_options

    keys = [f"conv-{c}/{i}" for c in range(10) for i in range(45)]
    first = [category5_options("x", k, seed=0)[0] == NOT_MENTIONED_OPTION for k in keys]
    # the official code's draw is a fair coin: about half each way over 450 questions
    assert 0.4 < sum(first) / len(first) < 0.6
    assert first == [category5_options("x", k, seed=0)[0] == NOT_MENTIONED_OPTION for k in keys]
    assert first != [category5_options("x", k, seed=1)[0] == NOT_MENTIONED_OPTION for k in keys]
