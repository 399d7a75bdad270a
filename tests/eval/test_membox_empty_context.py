"""Membox's evaluation scores no question whose context is empty (issue 44; ``membox.py``
``AnswerGenerator._generate_for_ranking`` returns before answering when ``contexts`` is empty),
so ``f1_membox`` leaves such a question out of its means. The other metrics count it. Worked by
hand on three questions, the second with no retrieved item."""

from __future__ import annotations

from datetime import datetime

import pytest
import torch

from synapse_pt.data.schema import Question
from synapse_pt.eval.qa.aggregate import summarize
from synapse_pt.eval.qa.pipeline import EvalSettings, prediction_frame, retrieval_summary
from synapse_pt.memory.base import RetrievalResult
from synapse_pt.models.llm.base import ChatResponse
from synapse_pt.retrieval.items import RetrievedItem

NAMES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
DAY = datetime(2023, 5, 8)


def frame():
    questions = [Question("c", i, f"q{i}", "red car", 4, ("D1:1",), ("D1:1",)) for i in range(3)]
    box = RetrievedItem("B:0", "Ann: a red car", "box", 0.9, DAY, dated=True,
                        turn_ids=("D1:1",))
    result = RetrievalResult([[box], [], [box]], torch.zeros(3), torch.zeros(3, dtype=torch.bool))
    answers = ["red car", "red car", "blue car"]  # f1_membox 1, 1, 0.5
    responses = [ChatResponse(a, 1, 1, 0.0, "m") for a in answers]
    settings = EvalSettings(mode="qa")
    return prediction_frame(questions, result, [3, 0, 3], responses, settings, peer_rules=False)


def test_exclude_leaves_the_empty_context_question_out_of_f1_membox_only() -> None:
    df = frame()
    assert df["f1_membox"].isna().tolist() == [False, True, False]
    out = summarize(df, ["f1_membox", "f1_official"], NAMES)
    assert out["f1_membox"]["single-hop"] == pytest.approx((1 + 0.5) / 2)
    assert out["f1_membox"]["n"]["single-hop"] == 2
    assert out["f1_official"]["n"]["single-hop"] == 3  # every other metric counts it
    assert retrieval_summary(df)["empty_context_questions"] == 1.0
