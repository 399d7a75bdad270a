"""LLM judge: parsing, failure counting, runs and seeds, with a scripted fake LLM."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pytest

from synapse_pt.eval.qa.scorers.judge import (
    ACCURACY_PROMPT,
    JudgeCall,
    JudgeInputs,
    build_judge_requests,
    judge_answers,
    parse_judge_label,
)
from synapse_pt.models.llm.base import LLM, ChatRequest, ChatResponse


class ScriptedJudge(LLM):
    """Answers from a script ``{(seed, question): reply}``; records every request."""

    backend = "scripted"
    model = "scripted-judge"

    def __init__(self, script: dict[tuple[int, str], str]) -> None:
        self.script = script
        self.requests: list[ChatRequest] = []

    def generate(self, requests: Sequence[ChatRequest]) -> list[ChatResponse]:
        out = []
        for req in requests:
            self.requests.append(req)
            prompt = req.messages[0][1]
            question = prompt.split("Question: ")[-1].split("\n")[0]
            out.append(ChatResponse(text=self.script[(req.seed, question)], prompt_tokens=0,
                                    completion_tokens=0, latency_s=0.0, model=self.model))
        return out

    def count_tokens(self, text: str) -> int:
        return len(text.split())


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ('{"label": "CORRECT"}', "CORRECT"),
        ('The dates match.\n```json\n{"label": "wrong"}\n```', "WRONG"),
        ('Same topic. {"label": "Correct"}', "CORRECT"),
        ('{"reasoning": "not CORRECT at all", "label": "WRONG"}', "WRONG"),  # JSON decides
        ("It refers to the same date. CORRECT", "CORRECT"),
        ("The answer is correct in spirit but names another city: WRONG", "WRONG"),
        ("CORRECT or WRONG, hard to say", None),  # both labels
        ("I cannot decide.", None),
        ('{"label": "MAYBE"}', None),
        ("INCORRECT", None),  # not one of the two labels
        ("", None),
    ],
)
def test_parse_judge_label(reply: str, expected: str | None) -> None:
    assert parse_judge_label(reply) == expected


def test_requests_carry_prompt_and_seed() -> None:
    reqs = build_judge_requests(JudgeInputs(["When?"], [2022], ["In 2022"]),
                                JudgeCall(seed=7, max_tokens=50))
    assert len(reqs) == 1
    (role, content), = reqs[0].messages
    assert role == "user"
    assert "Question: When?\nGold answer: 2022\nGenerated answer: In 2022\n" in content
    assert content.startswith(ACCURACY_PROMPT.split("{question}")[0])
    assert reqs[0].seed == 7 and reqs[0].max_tokens == 50 and reqs[0].temperature == 0.0


def test_judge_runs_mean_std_and_failures() -> None:
    script = {
        (10, "q0"): '{"label": "CORRECT"}', (11, "q0"): "CORRECT", (12, "q0"): "WRONG",
        (10, "q1"): "CORRECT", (11, "q1"): "no idea", (12, "q1"): '{"label": "CORRECT"}',
        (10, "q3"): "???", (11, "q3"): "", (12, "q3"): "maybe",
    }
    llm = ScriptedJudge(script)
    res = judge_answers(
        llm, JudgeInputs(["q0", "q1", "q2", "q3"], ["a", 5, None, "b"], ["x", "y", "z", "w"]),
        JudgeCall(seed=10), categories=[1, 2, 5, 4], n_runs=3,
    )
    assert res.seeds == [10, 11, 12]
    # q2 (category 5) was never sent
    assert len(llm.requests) == 9
    assert all("Question: q2" not in r.messages[0][1] for r in llm.requests)
    np.testing.assert_array_equal(res.skipped, [False, False, True, False])
    # q0: 1, 1, 0 -> mean 2/3, population std sqrt(((1/3)^2 * 2 + (2/3)^2) / 3) = sqrt(2)/3
    assert res.mean[0] == pytest.approx(2 / 3)
    assert res.std[0] == pytest.approx(math.sqrt(2) / 3)
    # q1: 1, failure, 1 -> mean 1 over 2 parsed runs, one failure recorded (not WRONG)
    assert res.mean[1] == 1.0 and res.std[1] == 0.0
    assert math.isnan(res.labels[1, 1])
    # q2 skipped, q3 all failures
    assert math.isnan(res.mean[2]) and math.isnan(res.mean[3])
    np.testing.assert_array_equal(res.n_failures, [0, 1, 0, 3])
    assert res.total_failures == 4
    assert res.replies[1][1] == "no idea" and res.replies[0][2] is None
    # per-run accuracy over parsed questions: run 10: q0 1, q1 1 -> 1.0; run 11: q0 1 -> 1.0;
    # run 12: q0 0, q1 1 -> 0.5
    np.testing.assert_allclose(res.run_accuracy(), [1.0, 1.0, 0.5])


def test_judge_input_errors() -> None:
    llm = ScriptedJudge({})
    with pytest.raises(ValueError, match="categories are needed"):
        judge_answers(llm, JudgeInputs(["q"], ["a"], ["p"]))
    with pytest.raises(ValueError, match="no gold"):
        judge_answers(llm, JudgeInputs(["q"], [None], ["p"]), categories=[2])
    with pytest.raises(ValueError, match="2 golds"):
        judge_answers(llm, JudgeInputs(["q"], ["a", "b"], ["p"]), skip_categories=())


def test_judge_defaults_are_the_mem0_protocol_and_one_run_works() -> None:
    """Survivors of the mutation run (experiments/hardening.md): the defaults (one run from seed
    0, as mem0's and GAAMA's code ask, temperature 0, 128 tokens) were never exercised, nor
    several runs' seeds, nor the length check."""
    script = {(s, "q0"): "CORRECT" for s in range(4)}
    llm = ScriptedJudge(script)
    res = judge_answers(llm, JudgeInputs(["q0"], ["a"], ["x"]), categories=[1])
    assert res.seeds == [0] and res.mean[0] == 1.0 and res.std[0] == 0.0
    assert [(r.seed, r.temperature, r.max_tokens) for r in llm.requests] == [(0, 0.0, 128)]
    three = ScriptedJudge(script)
    res = judge_answers(three, JudgeInputs(["q0"], ["a"], ["x"]), categories=[1], n_runs=3)
    assert res.seeds == [0, 1, 2]
    assert [(r.seed, r.temperature, r.max_tokens) for r in three.requests] == [
        (0, 0.0, 128), (1, 0.0, 128), (2, 0.0, 128)]
    with pytest.raises(ValueError, match="n_runs must be >= 1, got 0"):
        judge_answers(llm, JudgeInputs(["q0"], ["a"], ["x"]), categories=[1], n_runs=0)
    with pytest.raises(ValueError, match="1 questions but 2 categories"):
        judge_answers(llm, JudgeInputs(["q0"], ["a"], ["x"]), categories=[1, 2])


def test_judge_parsing_and_request_survivors() -> None:
    """Survivors of the mutation run: a JSON object without a label is skipped for the next one
    (not the end of the search); temperature and extra parameters reach the request; zip is
    strict; a run with no parsed reply has accuracy NaN."""
    assert parse_judge_label('{"reasoning": "WRONG, no"} {"label": "CORRECT"}') == "CORRECT"
    req, = build_judge_requests(JudgeInputs(["q"], ["g"], ["p"]),
                                JudgeCall(temperature=0.5,
                                          extra={"response_format": {"type": "json_object"}}))
    assert req.temperature == 0.5
    assert dict(req.extra) == {"response_format": {"type": "json_object"}}
    assert build_judge_requests(JudgeInputs(["q"], ["g"], ["p"]))[0].seed == 0
    with pytest.raises(ValueError):
        build_judge_requests(JudgeInputs(["q", "r"], ["g", "h"], ["p"]))
    llm = ScriptedJudge({(0, "q0"): "CORRECT", (1, "q0"): "???"})
    res = judge_answers(llm, JudgeInputs(["q0"], ["a"], ["x"]), categories=[1], n_runs=2)
    acc = res.run_accuracy()
    assert acc[0] == 1.0 and math.isnan(acc[1])


def test_coverage_score_parse_by_hand() -> None:
    from synapse_pt.eval.qa.scorers.judge import parse_coverage_score

    assert parse_coverage_score('Key facts: a, b. Covered: a. {"score": 0.5}') == 0.5
    assert parse_coverage_score('```json\n{"score": 1}\n```') == 1.0
    assert parse_coverage_score('{"score": 0.2} then {"score": 0.75}') == 0.75  # the last one
    assert parse_coverage_score('{"score": 1.5}') is None  # outside [0, 1]
    assert parse_coverage_score('{"score": "half"}') is None
    assert parse_coverage_score("about half") is None


def test_gaama_protocol_averages_coverage_over_runs_and_counts_failures() -> None:
    from synapse_pt.eval.qa.scorers.judge import judge_answers
    from synapse_pt.memory.gaama.judge import COVERAGE_PROMPT
    from synapse_pt.models.llm.base import ChatResponse

    class Coverage:
        backend, model = "scripted", "cov"

        def __init__(self):
            self.prompts = []

        def generate(self, requests):
            out = []
            for r in requests:
                prompt = r.messages[-1][1]
                self.prompts.append(prompt)
                text = ("garbled" if "Q2" in prompt else
                        '{"score": %s}' % (0.5 if r.seed == 0 else 1.0))
                out.append(ChatResponse(text, 1, 1, 0.0, model="cov"))
            return out

    llm = Coverage()
    res = judge_answers(llm, JudgeInputs(["Q1", "Q2", "Q3"], ["a and b", "c", "d"],
                                         ["a", "c", "x"]),
                        JudgeCall(prompts="ours"), categories=[1, 4, 5], n_runs=2,
                        protocol="gaama")
    assert res.mean[0] == pytest.approx(0.75) and res.std[0] == pytest.approx(0.25)
    # unreadable: counted, and scored 0 as GAAMA's code does (was NaN, left out, before #30)
    assert res.mean[1] == 0.0 and res.n_failures[1] == 2
    assert res.skipped[2] and res.n_failures[2] == 0  # category 5 not judged
    assert all("fraction of the key facts covered" in p for p in llm.prompts)
    assert COVERAGE_PROMPT.split("\n")[0] in llm.prompts[0]
    with pytest.raises(ValueError, match="judge protocol"):
        judge_answers(llm, JudgeInputs(["Q1"], ["a"], ["a"]), categories=[1], protocol="vibes")


class ByPrompt:
    """Answers each request with ``reply(prompt, seed)``; records the prompts."""

    backend, model = "scripted", "by-prompt"

    def __init__(self, reply) -> None:
        self.reply = reply
        self.prompts: list[str] = []

    def generate(self, requests):
        out = []
        for r in requests:
            prompt = r.messages[-1][1]
            self.prompts.append(prompt)
            out.append(ChatResponse(self.reply(prompt, r.seed), 1, 1, 0.0, model=self.model))
        return out


def test_parse_rubric_verdict_accepts_only_zero_or_one() -> None:
    from synapse_pt.eval.qa.scorers.judge import parse_rubric_verdict

    assert parse_rubric_verdict('{"score": 1}') == 1.0
    assert parse_rubric_verdict('reasons... ```json\n{"score": 0}\n```') == 0.0
    assert parse_rubric_verdict('{"score": 0.5}') is None  # a half mark is not a verdict
    assert parse_rubric_verdict("satisfied") is None


def test_realtalk_protocol_scores_in_unit_interval_and_counts_failures() -> None:
    from synapse_pt.eval.qa.scorers.judge import SCORE_PROMPT

    def reply(prompt: str, seed: int) -> str:
        if "Question: Q2" in prompt:
            return "no idea"
        return '{"score": 0.7}' if "Question: Q1" in prompt else '{"score": 0}'

    llm = ByPrompt(reply)
    res = judge_answers(llm, JudgeInputs(["Q1", "Q2", "Q3"], ["a", "b", "c"], ["a", "b", "z"]),
                        categories=[1, 2, 3], n_runs=2, protocol="realtalk")
    assert res.mean.tolist()[0] == pytest.approx(0.7) and res.std[0] == 0.0
    assert math.isnan(res.mean[1]) and res.n_failures[1] == 2
    assert res.mean[2] == 0.0 and res.n_failures[2] == 0
    assert len(llm.prompts) == 6 and SCORE_PROMPT.split("\n")[0] in llm.prompts[0]
    assert "Ground truth: a" in llm.prompts[0]


def test_beam_rubric_protocol_share_of_items_by_hand() -> None:
    from synapse_pt.eval.qa.scorers.judge import RUBRIC_PROMPT

    # Q1: 3 items, 2 satisfied -> 2/3; Q2: 2 items, one reply a half mark -> unreadable run;
    # Q3 (abstention category) is judged under the rubric protocol when not skipped: 1 of 1.
    verdicts = {"names the city": '{"score": 1}', "gives the year": '{"score": 0}',
                "mentions the dog": 'yes. {"score": 1}', "says 42": '{"score": 1}',
                "says 43": '{"score": 0.5}', "declines to answer": '{"score": 1}'}

    def reply(prompt: str, seed: int) -> str:
        item = prompt.split("Criterion: ")[1].split("\n")[0]
        return verdicts[item]

    llm = ByPrompt(reply)
    rubrics = [["names the city", "gives the year", "mentions the dog"], ["says 42", "says 43"],
               ["declines to answer"]]
    res = judge_answers(llm, JudgeInputs(["Q1", "Q2", "Q3"], [None, None, None],
                                         ["p1", "p2", "p3"], rubrics=rubrics),
                        categories=[1, 2, 5], skip_categories=(), n_runs=2,
                        protocol="beam_rubric")
    assert res.mean[0] == pytest.approx(2 / 3)
    assert math.isnan(res.mean[1]) and res.n_failures[1] == 2  # never a silent 0 or 1
    assert res.mean[2] == 1.0
    assert len(llm.prompts) == 2 * 6  # one request per rubric item per run
    assert RUBRIC_PROMPT.split("\n")[0] in llm.prompts[0]
    assert res.replies[0][0].count("---") == 2  # the item replies are kept, in order

    with pytest.raises(ValueError, match="rubric"):
        judge_answers(llm, JudgeInputs(["Q1"], [None], ["p"]), categories=[1],
                      protocol="beam_rubric")
    with pytest.raises(ValueError, match="no rubric items"):
        judge_answers(llm, JudgeInputs(["Q1"], [None], ["p"], rubrics=[[]]), categories=[1],
                      protocol="beam_rubric")


def test_judge_skip_categories_per_protocol() -> None:
    from synapse_pt.eval.qa.pipeline import judge_skip_categories

    assert tuple(judge_skip_categories(5, "mem0")) == (5,)
    assert tuple(judge_skip_categories(5, "realtalk")) == (5,)
    assert tuple(judge_skip_categories(None, "gaama")) == ()
    # BEAM's abstention questions carry a rubric ("declines...") and are judged like the rest
    assert tuple(judge_skip_categories(3, "beam_rubric")) == ()


def test_gaama_protocol_scores_an_unreadable_reply_zero_as_its_code_does() -> None:
    """GAAMA's ``_compute_hypothesis_reward`` returns reward 0.0 when its reply cannot be parsed,
    and that 0 enters the mean. By hand, two runs: Q1 0.5 then garbled -> labels [0.5, 0] (mean
    0.25, std 0.25, one failure); Q2 garbled twice -> mean 0 (two failures)."""
    from synapse_pt.eval.qa.pipeline import judge_summary

    class Garbled:
        backend, model = "scripted", "garbled"

        def generate(self, requests):
            out = []
            for r in requests:
                prompt = r.messages[-1][1]
                ok = "Q1" in prompt and r.seed == 0
                out.append(ChatResponse('{"score": 0.5}' if ok else "no idea", 1, 1, 0.0,
                                        model="garbled"))
            return out

    res = judge_answers(Garbled(), JudgeInputs(["Q1", "Q2"], ["a and b", "c"], ["a", "x"]),
                        JudgeCall(prompts="ours"), categories=[1, 2], n_runs=2, protocol="gaama")
    assert res.unreadable_scored_zero
    np.testing.assert_allclose(res.labels, [[0.5, 0.0], [0.0, 0.0]])
    assert res.mean[0] == pytest.approx(0.25) and res.std[0] == pytest.approx(0.25)
    assert res.mean[1] == 0.0
    np.testing.assert_array_equal(res.n_failures, [1, 2])
    np.testing.assert_allclose(res.run_accuracy(), [0.25, 0.0])
    summary = judge_summary(res, [1, 2])
    assert summary["judge_failures"] == 3.0 and summary["judge_unreadable_scored_zero"] == 1.0

    # the other protocols leave an unreadable reply out
    judge = ScriptedJudge({(0, "Q"): "no label here"})
    mem0 = judge_answers(judge, JudgeInputs(["Q"], ["a"], ["a"]), categories=[1], n_runs=1)
    assert math.isnan(mem0.mean[0]) and mem0.n_failures[0] == 1
