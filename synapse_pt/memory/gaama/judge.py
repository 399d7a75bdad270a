"""GAAMA's judge (SPEC §2; ``eval.judge_protocol=gaama``, its memory's own): the fraction of the
reference answer's key facts the answer covers, 0-1, extra information not penalised, over
categories 1-4.

Under ``eval.prompts=upstream`` (the default) it is GAAMA's code (gaama ``evals/locomo/
locomo_eval.py``, ``_compute_hypothesis_reward``): its prompt and its retry prompt read from that
file (:data:`GAAMA_JUDGE_FILE`, :mod:`synapse_pt.data.upstream`), JSON only, 400 completion tokens,
up to three attempts (a reply that does not parse is answered by the retry prompt with the parse
error and the reply's first 500 characters), a reward outside [0, 1] clipped and rounded to two
decimals, an empty answer or reference scored 0 without a call (:func:`parse_gaama_reward`,
:func:`gaama_judge`). Under ``eval.prompts=ours``: the judge lists the key facts, then a JSON score
(:data:`COVERAGE_PROMPT`, :func:`~synapse_pt.steps.parse_coverage_score`), one try, out of
range unreadable. An unreadable reply (after the retries) scores **0**, as GAAMA's code does (it
returns ``reward 0.0``, which enters the mean), and is counted as a failure.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace

from synapse_pt.data.upstream import fstring
from synapse_pt.models.llm.base import LLM, ChatRequest
from synapse_pt.steps import Judge, JudgeCall, JudgeInputs, parse_coverage_score, register

#: GAAMA's LoCoMo judge: the file, function and variables its prompts are read from, and the
#: code's call (``llm.complete(prompt, max_tokens=400, ...)``, ``_MAX_RETRIES = 3``)
GAAMA_JUDGE_FILE = "gaama/evals/locomo/locomo_eval.py"
GAAMA_JUDGE_FUNCTION = "_compute_hypothesis_reward"
GAAMA_JUDGE_MAX_TOKENS = 400
GAAMA_JUDGE_ATTEMPTS = 3

COVERAGE_PROMPT = """You grade an answer to a question about a conversation against a reference
answer.

Question: {question}
Reference answer: {gold_answer}
Generated answer: {generated_answer}

List the key facts of the reference answer, then decide for each whether the generated answer
states it (a date may be written differently; extra information in the generated answer is not
penalised). The score is the fraction of the key facts covered, a number from 0 to 1.
Finish with a JSON object with the key "score", for example {{"score": 0.5}}."""

_FENCE_OPEN = re.compile(r"^```(?:json)?\s*\n?")
_FENCE_CLOSE = re.compile(r"\n?```\s*$")


def parse_gaama_reward(text: str) -> tuple[float | None, str, str]:
    """GAAMA's reading of a judge reply (``_compute_hypothesis_reward``): ``(reward, error, raw)``.

    The reply is stripped and, when it starts with a code fence, unfenced; it must then be a JSON
    object as a whole (``json.loads``); its ``reward`` (0.0 when the key is missing) is clipped
    to [0, 1] and rounded to two decimals. An unreadable reply gives ``(None, the parse error's
    text, the stripped reply)``, which the retry prompt quotes."""
    raw = (text or "").strip()
    if raw.startswith("```"):
        raw = _FENCE_CLOSE.sub("", _FENCE_OPEN.sub("", raw)).strip()
    try:
        reward = float(json.loads(raw).get("reward", 0.0))
    except (json.JSONDecodeError, ValueError, AttributeError, TypeError) as err:
        return None, str(err), raw
    return round(max(0.0, min(1.0, reward)), 2), "", raw


def gaama_judge(llm: LLM, inputs: JudgeInputs, call: JudgeCall
                ) -> tuple[list[float | None], list[str]]:
    """GAAMA's judge over ``inputs`` (one run; ``call.max_tokens`` and ``call.prompts`` not read):
    per question the reward (``None`` when every attempt was unreadable) and the replies of its
    attempts. Each attempt is one ``llm.generate`` batch of the questions still unread: the first
    sends the file's prompt, a later one the file's retry prompt (the code sends it alone, without
    the first prompt)."""
    retry = fstring(GAAMA_JUDGE_FILE, GAAMA_JUDGE_FUNCTION, "retry_prompt", call.upstream_path)
    n = len(inputs.questions)
    scores: list[float | None] = [None] * n
    replies: list[list[str]] = [[] for _ in range(n)]
    asked = [i for i in range(n) if inputs.predictions[i] and str(inputs.golds[i])]
    for i in set(range(n)) - set(asked):  # the code: no hypothesis or reference -> 0.0, no call
        scores[i] = 0.0
    first = GAAMA_JUDGE.requests(inputs.select(asked), replace(call, prompts="upstream"))
    pending = {i: r.messages[0][1] for i, r in zip(asked, first, strict=True)}
    for _ in range(GAAMA_JUDGE_ATTEMPTS):
        if not pending:
            break
        order = list(pending)
        requests = [call.request(pending[i], max_tokens=GAAMA_JUDGE_MAX_TOKENS) for i in order]
        responses = llm.generate(requests)
        if len(responses) != len(requests):
            raise ValueError(f"gaama_judge: the LLM answered {len(responses)} of "
                             f"{len(requests)} requests")
        pending = {}
        for i, resp in zip(order, responses, strict=True):
            replies[i].append(resp.text)
            reward, error, raw = parse_gaama_reward(resp.text)
            if reward is not None:
                scores[i] = reward
            else:
                pending[i] = retry.render(last_error=error, last_raw=raw)
    return scores, ["\n---\n".join(r) for r in replies]


class GaamaJudge(Judge):
    """GAAMA's judge: its code under ``prompts=upstream`` (:func:`gaama_judge`, ``max_tokens``
    not used), :data:`COVERAGE_PROMPT` under ``ours``; an unreadable reply scores 0."""

    name = "gaama"
    rank = 1
    unreadable_zero = True  # gaama evals/locomo/locomo_eval.py: a failed parse is reward 0.0

    def upstream_files(self, prompts: str) -> tuple[str, ...]:
        return (GAAMA_JUDGE_FILE,) if prompts == "upstream" else ()

    def requests(self, inputs: JudgeInputs, call: JudgeCall) -> list[ChatRequest]:
        items = zip(inputs.questions, inputs.golds, inputs.predictions, strict=True)
        if call.prompts == "upstream":
            first = fstring(GAAMA_JUDGE_FILE, GAAMA_JUDGE_FUNCTION, "prompt", call.upstream_path)
            return [call.request(first.render(question=q, answer=str(g), hypothesis=p),
                                 max_tokens=GAAMA_JUDGE_MAX_TOKENS) for q, g, p in items]
        return [call.request(COVERAGE_PROMPT.format(question=q, gold_answer=str(g),
                                                    generated_answer=p)) for q, g, p in items]

    def verdict(self, text: str, prompts: str = "upstream") -> float | None:
        return parse_coverage_score(text)

    def ask(self, llm: LLM, inputs: JudgeInputs, call: JudgeCall
            ) -> tuple[list[float | None], list[str]] | None:
        return gaama_judge(llm, inputs, call) if call.prompts == "upstream" else None


GAAMA_JUDGE = register(GaamaJudge())
