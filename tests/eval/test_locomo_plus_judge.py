"""The LoCoMo-Plus authors' judge (issue 59): its templates read from prompts.json (sha256-pinned,
never pasted), filled with each question's evidence turns and category; labels scored correct 1,
partial 0.5, wrong 0, an unreadable reply a counted failure scored 0; no gold needed."""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

import pytest

from synapse_pt.data import DataFormatError, DatasetNotFoundError
from synapse_pt.data.locomo_plus import judge_templates, prompts_path
from synapse_pt.data.schema import Turn
from synapse_pt.eval.qa.scorers.judge import (
    JudgeCall,
    JudgeInputs,
    build_judge_requests,
    judge_answers,
    parse_label_score,
)
from synapse_pt.models.llm.base import LLM, ChatRequest, ChatResponse

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "locomo_plus"
needs_prompts = pytest.mark.skipif(not (SHARED / "prompts.json").is_file(),
                                   reason="the LoCoMo-Plus prompts.json is not beside the checkout")
WHEN = datetime(2023, 5, 8, 13, 56)


def turn(speaker: str, text: str, k: int) -> Turn:
    return Turn("conv-26-plus000", f"D1000:{k}", speaker, text, 1000, k - 1, WHEN)


CUE = (turn("Caroline", "I quit sugar. ", 1), turn("Melanie", "Good call.", 2))


@pytest.mark.parametrize(("reply", "score"), [
    ('{"label": "correct", "reason": "links"}', 1.0),
    ('```json\n{"label": "Partial", "reason": "vague"}\n```', 0.5),
    ('It does not. {"label": "WRONG", "reason": "no link"}', 0.0),
    ('{"label": "unsure"}', None),
    ("The answer is correct.", None),  # the authors' word fallback is not ours: unreadable
    ("", None),
])
def test_parse_label_score(reply, score):
    assert parse_label_score(reply) == score


@needs_prompts
def test_requests_fill_the_authors_templates():
    raw = json.loads((SHARED / "prompts.json").read_text())["judge_templates"]
    cognitive, fact = build_judge_requests(
        JudgeInputs(["Caroline: I feel sharper.", "Who?"], [None, "Ann"], ["my reply", "Bob"],
                    evidence=[CUE, (turn("Ann", "x", 1),)],
                    category_names=["Cognitive", "no-template-category"]),
        JudgeCall(seed=3), protocol="locomo_plus")
    # Cognitive: evidence lines "speaker：text" (the full-width colon), stripped, no gold
    lines = "Caroline\uff1aI quit sugar.\nMelanie\uff1aGood call."
    expected = raw["Cognitive"].format(gold="", pred="my reply", evidence=lines)
    assert cognitive.messages == (("user", expected),)
    assert cognitive.max_tokens == 512 and cognitive.seed == 3 and cognitive.temperature == 0.0
    assert lines in cognitive.messages[0][1]
    # a category without its own template: "default", which reads the gold
    assert fact.messages[0][1] == raw["default"].format(gold="Ann", pred="Bob",
                                                        evidence="Ann\uff1ax")
    with pytest.raises(ValueError, match="needs each of the 1 questions' evidence"):
        build_judge_requests(JudgeInputs(["q"], [None], ["p"]), protocol="locomo_plus")


class LabelLLM(LLM):
    """Replies with the scripted label of each request's prediction."""

    backend = "scripted"
    model = "scripted"

    def __init__(self, replies: dict[str, str]) -> None:
        self.replies = replies
        self.seen: list[ChatRequest] = []

    def generate(self, requests: Sequence[ChatRequest]) -> list[ChatResponse]:
        out = []
        for req in requests:
            self.seen.append(req)
            pred = req.messages[0][1].split("Model Prediction:\n")[1].split("\n")[0]
            out.append(ChatResponse(text=self.replies[pred], prompt_tokens=0,
                                    completion_tokens=0, latency_s=0.0, model=self.model))
        return out

    def count_tokens(self, text: str) -> int:
        return len(text.split())


@needs_prompts
def test_judge_answers_scores_labels_without_gold():
    llm = LabelLLM({"a": '{"label": "correct", "reason": ""}',
                    "b": '{"label": "partial", "reason": ""}',
                    "c": '{"label": "wrong", "reason": ""}', "d": "no idea"})
    result = judge_answers(llm, JudgeInputs(["t1", "t2", "t3", "t4"], [None] * 4,
                                            ["a", "b", "c", "d"], evidence=[CUE] * 4,
                                            category_names=["Cognitive"] * 4),
                           categories=[1, 2, 3, 4], skip_categories=(), protocol="locomo_plus")
    assert result.mean.tolist() == [1.0, 0.5, 0.0, 0.0]  # unreadable: 0, as the authors score
    assert result.n_failures.tolist() == [0, 0, 0, 1] and result.unreadable_scored_zero
    assert len(llm.seen) == 4
    # a judge that reads a gold still refuses a question without one, naming the way out
    with pytest.raises(ValueError, match="eval.judge_protocol=system"):
        judge_answers(llm, JudgeInputs(["t"], [None], ["a"]), skip_categories=(), protocol="mem0")
    with pytest.raises(ValueError, match="1 questions but 2 evidence"):
        judge_answers(llm, JudgeInputs(["t"], [None], ["a"], evidence=[CUE, CUE],
                                       category_names=["Cognitive"]),
                      skip_categories=(), protocol="locomo_plus")


@needs_prompts
def test_prompts_file_pinned(tmp_path, monkeypatch):
    templates, path = judge_templates()
    assert path == SHARED / "prompts.json" and {"Cognitive", "default"} <= set(templates)
    edited = tmp_path / "prompts.json"
    shutil.copy(SHARED / "prompts.json", edited)
    edited.write_text(edited.read_text().replace("Memory Awareness Judge", "Some Judge"))
    monkeypatch.setenv("SYNAPSE_LOCOMO_PLUS", str(tmp_path))
    with pytest.raises(DataFormatError, match=r"prompts.json: file: sha256: .* is not the "
                                              r"pinned dead0337"):
        prompts_path()
    monkeypatch.setenv("SYNAPSE_LOCOMO_PLUS", str(tmp_path / "missing"))
    with pytest.raises(DatasetNotFoundError, match="no prompts.json in .*missing"):
        judge_templates()
