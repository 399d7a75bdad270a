r"""Optional LLM judge: the mem0-style CORRECT/WRONG grading (SPEC §3).

The prompt is mem0's ``ACCURACY_PROMPT`` (mem0ai/mem0 ``evaluation/metrics/llm_judge.py``), with
its typographic quotes written as ASCII. mem0 asks once per question at temperature 0 with
``response_format=json_object`` and skips category 5; its parse is
``json.loads(extract_json(text))["label"] == "CORRECT"``, which crashes on a reply without JSON and
counts any other label (even "Correct") as wrong.

Here:

* the judge runs ``n_runs`` times (default once, as mem0 and GAAMA ask) with seeds
  ``base_seed + r`` (one ``llm.generate`` batch per run), and each question gets the mean and the
  spread of its labels over the runs;
* :func:`parse_judge_label` accepts a JSON object with a ``label`` key (any case, fenced or not),
  else exactly one bare upper-case ``CORRECT`` / ``WRONG`` word;
* an unparseable reply is a **failure**, counted in ``n_failures`` under every protocol; under
  ``"mem0"``, ``"realtalk"`` and ``"beam_rubric"`` it is NaN in that run (left out, never silently
  WRONG), under ``"gaama"`` it scores 0 as GAAMA's code does (``unreadable`` chooses; see below);
* category 5 is skipped by default (NaN, not a failure), as in mem0: it is scored by the official
  phrase rule instead.

``protocol="gaama"`` is GAAMA's evaluation instead (SPEC §2): the fraction of the reference
answer's key facts the answer covers, 0-1, extra information not penalised; the per-question value
is that fraction, averaged over runs. GAAMA reports it over categories 1-4 only, which the default
``skip_categories`` already gives. Under ``prompts="upstream"`` (the default) it is GAAMA's code
(gaama ``evals/locomo/locomo_eval.py``, ``_compute_hypothesis_reward``): its prompt and its retry
prompt read from that file (:data:`GAAMA_JUDGE_FILE`, :mod:`synapse_pt.data.upstream`), JSON
only, 400 completion tokens, up to three attempts (a reply that does not parse is answered by the
retry prompt with the parse error and the reply's first 500 characters), a reward outside [0, 1]
clipped and rounded to two decimals, an empty answer or reference scored 0 without a call
(:func:`parse_gaama_reward`, :func:`gaama_judge`). Under ``prompts="ours"`` it is our earlier
reading: the judge lists the key facts, then a JSON score (:data:`COVERAGE_PROMPT`,
:func:`parse_coverage_score`), one try, out of range unreadable. An unreadable reply (after the
retries) under ``"gaama"`` scores **0** by default, as GAAMA's code does (it returns
``reward 0.0``, which enters the mean); ``unreadable="drop"`` leaves it out (NaN). Either way it
is counted in ``n_failures``.

``protocol="realtalk"`` is the LLM score REALTALK's authors report beside LoCoMo's official F1
(danny911kr/REALTALK ``eval_memory/qa_tool.py``, ``gpt_score``): the judge gives the prediction a
correctness score in [0, 1] as JSON ``{"score": ...}`` (:data:`SCORE_PROMPT`, our wording of that
instruction; :func:`parse_coverage_score` reads it). Their code raises on an unreadable reply; here
it is a counted failure.

``protocol="beam_rubric"`` is BEAM's rubric judge (mohammadtavakoli78/BEAM
``src/evaluation/compute_metrics.py``): every item of the question's rubric is judged on its own
(one request per item), and the question's score is the share of items satisfied,

.. math::
    s_q = \frac{1}{|R_q|} \sum_{r \in R_q} \mathbb{1}[\text{judge}(q, r, \hat a) = 1].

Upstream's prompt offers 0, 0.5 and 1 per item and then casts with ``int()``, so a half mark counts
as not satisfied; ours (:data:`RUBRIC_PROMPT`, our wording) asks for the binary verdict directly.
An unreadable item makes that question's run a failure (NaN, counted), never a silent 0 or 1.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from synapse_pt.models.llm.base import LLM, ChatRequest, ChatResponse
from synapse_pt.models.llm.recording import RecordingLLM
from synapse_pt.progress import Progress

__all__ = ["ACCURACY_PROMPT", "COVERAGE_PROMPT", "JUDGE_PROTOCOLS", "JUDGE_UNREADABLE",
           "RUBRIC_PROMPT", "SCORE_PROMPT", "JudgeResult", "build_judge_requests", "judge_answers",
           "parse_coverage_score", "parse_judge_label", "parse_rubric_verdict",
           "unreadable_scores_zero"]

log = logging.getLogger(__name__)

JUDGE_PROTOCOLS = ("mem0", "gaama", "realtalk", "beam_rubric")

#: GAAMA's LoCoMo judge: the file, function and variables its prompts are read from, and the
#: code's call (``llm.complete(prompt, max_tokens=400, ...)``, ``_MAX_RETRIES = 3``)
GAAMA_JUDGE_FILE = "gaama/evals/locomo/locomo_eval.py"
GAAMA_JUDGE_FUNCTION = "_compute_hypothesis_reward"
GAAMA_JUDGE_MAX_TOKENS = 400
GAAMA_JUDGE_ATTEMPTS = 3
GAAMA_RETRY_SHOWN = 500  # characters of the unreadable reply its retry prompt repeats

# What an unreadable judge reply counts as: "protocol" (the protocol's own rule: 0 under "gaama",
# as its code scores it; left out elsewhere), "zero" (always 0) or "drop" (always left out, NaN; our
# earlier reading of "gaama"). It is counted in ``n_failures`` under every choice.
JUDGE_UNREADABLE = ("protocol", "zero", "drop")


def unreadable_scores_zero(protocol: str, unreadable: str = "protocol") -> bool:
    """Whether an unreadable reply scores 0 (``True``) or is left out (``False``) under
    ``protocol`` and the ``unreadable`` choice (:data:`JUDGE_UNREADABLE`)."""
    if unreadable not in JUDGE_UNREADABLE:
        raise ValueError(f"judge unreadable must be one of {JUDGE_UNREADABLE}, got {unreadable!r}")
    if unreadable == "protocol":
        return protocol == "gaama"  # gaama evals/locomo/locomo_eval.py: a failed parse is 0.0
    return unreadable == "zero"

Label = Literal["CORRECT", "WRONG"]

ACCURACY_PROMPT = """
Your task is to label an answer to a question as 'CORRECT' or 'WRONG'. You will be given the following data:
    (1) a question (posed by one user to another user), 
    (2) a 'gold' (ground truth) answer, 
    (3) a generated answer
which you will score as CORRECT/WRONG.

The point of the question is to ask about something one user should know about the other user based on their prior conversations.
The gold answer will usually be a concise and short answer that includes the referenced topic, for example:
Question: Do you remember what I got the last time I went to Hawaii?
Gold answer: A shell necklace
The generated answer might be much longer, but you should be generous with your grading - as long as it touches on the same topic as the gold answer, it should be counted as CORRECT. 

For time related questions, the gold answer will be a specific date, month, year, etc. The generated answer might be much longer or use relative time references (like "last Tuesday" or "next month"), but you should be generous with your grading - as long as it refers to the same date or time period as the gold answer, it should be counted as CORRECT. Even if the format differs (e.g., "May 7th" vs "7 May"), consider it CORRECT if it's the same date.

Now it's time for the real question:
Question: {question}
Gold answer: {gold_answer}
Generated answer: {generated_answer}

First, provide a short (one sentence) explanation of your reasoning, then finish with CORRECT or WRONG. 
Do NOT include both CORRECT and WRONG in your response, or it will break the evaluation script.

Just return the label CORRECT or WRONG in a json format with the key as "label".
"""  # noqa: E501, W291 - kept line for line (trailing spaces included) as mem0 sends it

COVERAGE_PROMPT = """You grade an answer to a question about a conversation against a reference
answer.

Question: {question}
Reference answer: {gold_answer}
Generated answer: {generated_answer}

List the key facts of the reference answer, then decide for each whether the generated answer
states it (a date may be written differently; extra information in the generated answer is not
penalised). The score is the fraction of the key facts covered, a number from 0 to 1.
Finish with a JSON object with the key "score", for example {{"score": 0.5}}."""

SCORE_PROMPT = """Judge how correct a model's prediction is, given the question and its ground-truth
answer.

Question: {question}
Ground truth: {gold_answer}
Prediction: {generated_answer}

Give a score from 0 to 1: 0 means the prediction is entirely wrong, 1 means it is entirely correct.
Reply with a JSON object only, for example {{"score": 0.7}}."""

RUBRIC_PROMPT = """You check one criterion of a grading rubric against a response to a user's
question.

Question: {question}
Criterion: {rubric_item}
Response: {generated_answer}

The criterion is satisfied when the response addresses the question and meets the criterion in
meaning (paraphrases, synonyms and equivalent numbers or dates count; tone and length do not). A
criterion that forbids something is satisfied only when the response addresses the question and
does not contain it. Reply with a JSON object only: {{"score": 1}} if the criterion is satisfied,
{{"score": 0}} if it is not."""

_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL | re.IGNORECASE)
_JSON_OBJECT = re.compile(r"\{.*?\}", re.DOTALL)
_BARE = re.compile(r"\b(CORRECT|WRONG)\b")


def parse_judge_label(text: str) -> Label | None:
    """The judge's label, or ``None`` when the reply cannot be read.

    1. A JSON object (inside a code fence or anywhere in the text) with a string ``label`` that is
       ``correct`` or ``wrong`` in any case decides. A JSON ``label`` with another value is
       unreadable (``None``).
    2. Otherwise the reply must contain bare upper-case ``CORRECT`` or ``WRONG`` words of one kind
       only (``INCORRECT`` does not count; both kinds present -> ``None``).
    """
    fenced = _FENCE.search(text)
    candidates = ([fenced.group(1)] if fenced else []) + _JSON_OBJECT.findall(text)
    for chunk in candidates:
        try:
            obj = json.loads(chunk.strip())
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict) and "label" in obj:
            label = obj["label"]
            if isinstance(label, str) and label.strip().upper() in ("CORRECT", "WRONG"):
                return label.strip().upper()  # type: ignore[return-value]
            return None
    words = set(_BARE.findall(text))
    if len(words) == 1:
        return words.pop()  # type: ignore[return-value]
    return None


def parse_coverage_score(text: str) -> float | None:
    """The fraction in the last JSON object with a numeric ``score`` in [0, 1] (``None``: the
    reply cannot be read, or its score lies outside [0, 1])."""
    fenced = _FENCE.findall(text)
    for chunk in reversed(fenced + _JSON_OBJECT.findall(text)):
        try:
            obj = json.loads(chunk.strip())
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict) and "score" in obj:
            score = obj["score"]
            if isinstance(score, bool) or not isinstance(score, (int, float)):
                return None
            return float(score) if 0.0 <= score <= 1.0 else None
    return None


_GAAMA_FENCE_OPEN = re.compile(r"^```(?:json)?\s*\n?")
_GAAMA_FENCE_CLOSE = re.compile(r"\n?```\s*$")


def parse_gaama_reward(text: str) -> tuple[float | None, str, str]:
    """GAAMA's reading of a judge reply (``_compute_hypothesis_reward``): ``(reward, error, raw)``.

    The reply is stripped and, when it starts with a code fence, unfenced; it must then be a JSON
    object as a whole (``json.loads``); its ``reward`` (0.0 when the key is missing) is clipped
    to [0, 1] and rounded to two decimals. An unreadable reply gives ``(None, the parse error's
    text, the stripped reply)``, which the retry prompt quotes."""
    raw = (text or "").strip()
    if raw.startswith("```"):
        raw = _GAAMA_FENCE_CLOSE.sub("", _GAAMA_FENCE_OPEN.sub("", raw)).strip()
    try:
        reward = float(json.loads(raw).get("reward", 0.0))
    except (json.JSONDecodeError, ValueError, AttributeError, TypeError) as err:
        return None, str(err), raw
    return round(max(0.0, min(1.0, reward)), 2), "", raw


def gaama_judge(llm: LLM, questions: Sequence[str], golds: Sequence[str],
                predictions: Sequence[str], *, seed: int = 0, temperature: float = 0.0,
                extra: Mapping[str, Any] | None = None,
                upstream_path: str | None = None) -> tuple[list[float | None], list[str]]:
    """GAAMA's judge over aligned questions (one run): per question the reward (``None`` when
    every attempt was unreadable) and the replies of its attempts. Each attempt is one
    ``llm.generate`` batch of the questions still unread: the first sends the file's prompt, a
    later one the file's retry prompt (the code sends it alone, without the first prompt)."""
    from synapse_pt.data.upstream import fstring

    retry = fstring(GAAMA_JUDGE_FILE, GAAMA_JUDGE_FUNCTION, "retry_prompt", upstream_path)
    n = len(questions)
    scores: list[float | None] = [None] * n
    replies: list[list[str]] = [[] for _ in range(n)]
    asked = [i for i in range(n) if predictions[i] and str(golds[i])]
    for i in set(range(n)) - set(asked):  # the code: no hypothesis or reference -> 0.0, no call
        scores[i] = 0.0
    first = build_judge_requests([questions[i] for i in asked], [golds[i] for i in asked],
                                 [predictions[i] for i in asked], seed=seed,
                                 temperature=temperature, extra=extra, protocol="gaama",
                                 upstream_path=upstream_path)
    pending = {i: r.messages[0][1] for i, r in zip(asked, first, strict=True)}
    for _ in range(GAAMA_JUDGE_ATTEMPTS):
        if not pending:
            break
        order = list(pending)
        requests = [ChatRequest.from_messages([{"role": "user", "content": pending[i]}],
                                              max_tokens=GAAMA_JUDGE_MAX_TOKENS,
                                              temperature=temperature, seed=seed,
                                              extra=dict(extra or {})) for i in order]
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


def parse_rubric_verdict(text: str) -> float | None:
    """A rubric item's verdict: 1.0 or 0.0 from the last JSON object with a ``score`` of exactly
    0 or 1 (``None``: unreadable, or another value such as a half mark)."""
    score = parse_coverage_score(text)
    return score if score in (0.0, 1.0) else None


def build_judge_requests(
    questions: Sequence[str],
    golds: Sequence[str | int],
    predictions: Sequence[str],
    *,
    seed: int = 0,
    max_tokens: int = 128,
    temperature: float = 0.0,
    extra: Mapping[str, Any] | None = None,
    protocol: str = "mem0",
    rubrics: Sequence[Sequence[str]] | None = None,
    prompts: str = "upstream",
    upstream_path: str | None = None,
) -> list[ChatRequest]:
    """Single-message (user) requests with the protocol's prompt filled in: one per question
    (:data:`ACCURACY_PROMPT` for ``"mem0"``, for ``"gaama"`` the first attempt of GAAMA's code
    under ``prompts="upstream"`` (its file's prompt, 400 tokens, ``max_tokens`` not used) or
    :data:`COVERAGE_PROMPT` under ``"ours"``, :data:`SCORE_PROMPT` for ``"realtalk"``), or for
    ``"beam_rubric"`` one per rubric item (:data:`RUBRIC_PROMPT`), question by question in
    rubric order (``rubrics`` needed)."""
    if protocol not in JUDGE_PROTOCOLS:
        raise ValueError(f"judge protocol must be one of {JUDGE_PROTOCOLS}, got {protocol!r}")
    if protocol == "gaama" and prompts == "upstream":
        from synapse_pt.data.upstream import fstring

        first = fstring(GAAMA_JUDGE_FILE, GAAMA_JUDGE_FUNCTION, "prompt", upstream_path)
        return [ChatRequest.from_messages(
            [{"role": "user", "content": first.render(question=q, answer=str(g),
                                                      hypothesis=p)}],
            max_tokens=GAAMA_JUDGE_MAX_TOKENS, temperature=temperature, seed=seed,
            extra=dict(extra or {})) for q, g, p in zip(questions, golds, predictions, strict=True)]

    def request(content: str) -> ChatRequest:
        return ChatRequest.from_messages([{"role": "user", "content": content}],
                                         max_tokens=max_tokens, temperature=temperature,
                                         seed=seed, extra=dict(extra or {}))

    if protocol == "beam_rubric":
        if rubrics is None or len(rubrics) != len(questions):
            raise ValueError("judge protocol 'beam_rubric' needs one rubric per question")
        return [request(RUBRIC_PROMPT.format(question=q, rubric_item=item, generated_answer=p))
                for q, p, rubric in zip(questions, predictions, rubrics, strict=True)
                for item in rubric]
    prompt = {"mem0": ACCURACY_PROMPT, "gaama": COVERAGE_PROMPT, "realtalk": SCORE_PROMPT}[protocol]
    return [request(prompt.format(question=q, gold_answer=str(g), generated_answer=p))
            for q, g, p in zip(questions, golds, predictions, strict=True)]


@dataclass
class JudgeResult:
    """Judge labels over ``R`` runs for ``B`` questions.

    Attributes:
        labels: ``[R, B]``: 1.0 CORRECT, 0.0 WRONG (``"gaama"``: the covered fraction), NaN for a
            skipped question and for a failure unless ``unreadable_scored_zero`` (then 0.0).
        mean: ``[B]``: mean label over the runs that parsed (NaN if none did or skipped).
        std: ``[B]``: population standard deviation (ddof = 0) over the runs that parsed.
        n_failures: ``[B]``: runs whose reply could not be parsed (scored 0 or left out).
        skipped: ``[B]`` bool: questions not judged (category in ``skip_categories``).
        replies: ``[R][B]`` raw reply texts (``None`` for skipped questions).
        seeds: the seed of each run.
        unreadable_scored_zero: whether a failure scored 0 (in ``labels`` and the means) rather
            than being left out.
        responses: every response the judge was served, retries included (``cached`` where the
            response cache answered): what this judge cost (``spend.json``).
    """

    labels: np.ndarray
    mean: np.ndarray
    std: np.ndarray
    n_failures: np.ndarray
    skipped: np.ndarray
    replies: list[list[str | None]]
    seeds: list[int]
    unreadable_scored_zero: bool = False
    responses: list[ChatResponse] = field(default_factory=list)

    @property
    def total_failures(self) -> int:
        return int(self.n_failures.sum())

    def run_accuracy(self, mask: np.ndarray | None = None) -> np.ndarray:
        """``[R]``: each run's accuracy over the questions it parsed (the run-to-run spread mem0
        reports is the std of this); ``mask`` (``[B]`` bool) restricts it to some questions,
        e.g. one category."""
        labels = self.labels if mask is None else self.labels[:, np.asarray(mask, dtype=bool)]
        with np.errstate(invalid="ignore"):
            judged = ~np.isnan(labels)
            return np.where(judged.sum(1) > 0,
                            np.nansum(labels, 1) / np.maximum(judged.sum(1), 1), np.nan)


def judge_verdict(protocol: str, text: str) -> float | None:
    """One judge reply's verdict under ``protocol``: a rubric item satisfied or not (1 or 0;
    ``beam_rubric``), the coverage score (``gaama``, ``realtalk``) or CORRECT / WRONG as 1 / 0
    (``mem0``); ``None`` when the reply is unreadable."""
    if protocol == "beam_rubric":
        return parse_rubric_verdict(text)
    if protocol in ("gaama", "realtalk"):
        return parse_coverage_score(text)
    label = parse_judge_label(text)
    return None if label is None else (1.0 if label == "CORRECT" else 0.0)


def judge_answers(
    llm: LLM,
    questions: Sequence[str],
    golds: Sequence[str | int | None],
    predictions: Sequence[str],
    *,
    categories: Sequence[int] | None = None,
    n_runs: int = 1,
    base_seed: int = 0,
    temperature: float = 0.0,
    max_tokens: int = 128,
    skip_categories: Sequence[int] = (5,),
    extra: Mapping[str, Any] | None = None,
    protocol: str = "mem0",
    rubrics: Sequence[Sequence[str]] | None = None,
    unreadable: str = "protocol",
    prompts: str = "upstream",
    upstream_path: str | None = None,
    batch_size: int = 64,
) -> JudgeResult:
    """Judge every answer ``n_runs`` times (seeds ``base_seed + r``).

    Args:
        llm: any backend with ``generate(requests) -> responses`` (``.text`` is read).
        questions, golds, predictions: aligned per question; integer golds are sent as ``str``.
        categories: raw category numbers; questions in ``skip_categories`` are not sent (needed
            when ``skip_categories`` is non-empty).
        n_runs: judge runs (1, as GAAMA's and mem0's code ask; a retry after an unreadable
            reply is not a run); over several, the spread is the judge's own noise.
        extra: backend parameters passed through (e.g. a JSON response format).
        protocol: ``"mem0"`` (CORRECT/WRONG, 1/0), ``"gaama"`` (fraction of key facts covered),
            ``"realtalk"`` (a correctness score in [0, 1]) or ``"beam_rubric"`` (share of the
            rubric's items satisfied).
        rubrics: per question, its rubric items (``"beam_rubric"`` only).
        unreadable: what an unreadable reply counts as (:data:`JUDGE_UNREADABLE`): the
            protocol's rule (``"protocol"``: 0 under ``"gaama"``, GAAMA's code; left out
            elsewhere), ``"zero"`` or ``"drop"``. Counted in ``n_failures`` either way; under
            ``"beam_rubric"`` with 0, an unreadable item counts as not satisfied.
        prompts: ``"upstream"``: ``"gaama"`` is GAAMA's code (:func:`gaama_judge`, its prompts
            read from the file in ``upstream_path``, ``max_tokens`` not used); ``"ours"``: our
            wording (:data:`COVERAGE_PROMPT`). The other protocols are the same under both.
        batch_size: judge requests per ``llm.generate`` call (the progress a log shows,
            :mod:`synapse_pt.progress`, advances between calls; GAAMA's code judges a run's
            questions in one call).

    Raises:
        ValueError: on misaligned inputs, a judged question whose gold is ``None`` or, under
            ``"beam_rubric"``, one without rubric items.
    """
    zero = unreadable_scores_zero(protocol, unreadable)
    served = RecordingLLM(llm)  # what this judge is served: its own spend
    n = len(questions)
    if not (len(golds) == len(predictions) == n):
        raise ValueError(f"judge_answers: {n} questions, {len(golds)} golds, "
                         f"{len(predictions)} predictions")
    if n_runs < 1:
        raise ValueError(f"judge_answers: n_runs must be >= 1, got {n_runs}")
    if skip_categories and categories is None:
        raise ValueError("judge_answers: categories are needed to skip categories "
                         f"{tuple(skip_categories)} (pass skip_categories=() to judge all)")
    if categories is not None and len(categories) != n:
        raise ValueError(f"judge_answers: {n} questions but {len(categories)} categories")
    skipped = np.array([categories is not None and int(c) in set(skip_categories)
                        for c in (categories if categories is not None else [None] * n)],
                       dtype=bool)
    todo = [i for i in range(n) if not skipped[i]]
    rubric = protocol == "beam_rubric"
    if rubric and (rubrics is None or len(rubrics) != n):
        raise ValueError(f"judge_answers: protocol 'beam_rubric' needs {n} rubrics, got "
                         f"{None if rubrics is None else len(rubrics)}")
    for i in todo:
        if rubric and not rubrics[i]:  # type: ignore[index]
            raise ValueError(f"judge_answers: question {i} ({questions[i]!r}) has no rubric items "
                             "for judge protocol 'beam_rubric'")
        if not rubric and golds[i] is None:
            raise ValueError(f"judge_answers: question {i} ({questions[i]!r}) has no gold answer")
    # the request of each rubric item belongs to question owner[j]
    owner = ([i for i in todo for _ in rubrics[i]] if rubric else todo)  # type: ignore[index]

    labels = np.full((n_runs, n), np.nan)
    failed = np.zeros((n_runs, n), dtype=bool)
    replies: list[list[str | None]] = [[None] * n for _ in range(n_runs)]
    seeds = [base_seed + r for r in range(n_runs)]
    upstream_gaama = protocol == "gaama" and prompts == "upstream"
    step = max(1, batch_size)
    with Progress(n_runs * len(owner), "judge", "requests", logger=log) as bar:
        for r, seed in enumerate(seeds):
            if upstream_gaama:
                scores, said = gaama_judge(served, [questions[i] for i in todo],
                                           [str(golds[i]) for i in todo],
                                           [predictions[i] for i in todo], seed=seed,
                                           temperature=temperature, extra=extra,
                                           upstream_path=upstream_path)
                for i, score, text in zip(todo, scores, said, strict=True):
                    replies[r][i] = text
                    failed[r, i] = score is None
                    if score is not None or zero:
                        labels[r, i] = 0.0 if score is None else score
                bar.update(len(todo))
                continue
            requests = build_judge_requests(
                [questions[i] for i in todo], [golds[i] for i in todo],  # type: ignore[misc]
                [predictions[i] for i in todo], seed=seed, max_tokens=max_tokens,
                temperature=temperature, extra=extra, protocol=protocol,
                rubrics=[rubrics[i] for i in todo] if rubric else None,  # type: ignore[index]
                prompts=prompts, upstream_path=upstream_path,
            )
            responses = []
            for start in range(0, len(requests), step):
                chunk = requests[start:start + step]
                responses += served.generate(chunk)
                bar.update(len(chunk))
            if len(responses) != len(requests):
                raise ValueError(f"judge_answers: the LLM answered {len(responses)} of "
                                 f"{len(requests)} requests (run {r}, seed {seed})")
            # one verdict per request; a question's label is the mean of its verdicts (a rubric's
            # items; one otherwise), unreadable when any is (then 0 under a zero rule, else none)
            verdicts: dict[int, list[float | None]] = {}
            texts: dict[int, list[str]] = {}
            for i, resp in zip(owner, responses, strict=True):
                verdicts.setdefault(i, []).append(judge_verdict(protocol, resp.text))
                texts.setdefault(i, []).append(resp.text)
            for i, items in verdicts.items():
                replies[r][i] = "\n---\n".join(texts[i])
                failed[r, i] = any(v is None for v in items)
                if not failed[r, i] or zero:
                    labels[r, i] = float(np.mean([0.0 if v is None else v for v in items]))

    parsed = ~np.isnan(labels)
    n_ok = parsed.sum(0)
    n_failures = np.where(skipped, 0, failed.sum(0)).astype(np.int64)
    safe = np.where(parsed, labels, 0.0)
    mean = np.where(n_ok > 0, safe.sum(0) / np.maximum(n_ok, 1), np.nan)
    var = np.where(parsed, (safe - mean) ** 2, 0.0).sum(0) / np.maximum(n_ok, 1)
    std = np.where(n_ok > 0, np.sqrt(var), np.nan)
    return JudgeResult(labels=labels, mean=mean, std=std, n_failures=n_failures, skipped=skipped,
                       replies=replies, seeds=seeds, unreadable_scored_zero=zero,
                       responses=served.served)
