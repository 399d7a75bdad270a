"""GAAMA's and Membox's LLM builds end to end (``python -m synapse_pt.run``'s ``run``: build,
retrieval, answers, scorers, metrics) against a loopback OpenAI-compatible server (issue 30, third
"done when"). The server answers each prompt kind the way a chat model would; the counts expected
below are worked out by hand from the shipped sample (3 sessions, 40 turns, 14 questions) and the
scripted replies, and checked against what the server saw, never read back from the build.

Membox, hand-worked: every Topic Loom decision is "Yes", so each session is one box. A session's
first turn opens its box and its second joins without asking, so the Loom asks once for each
further turn: 40 - 3 * 2 = 34 decisions (the count is recomputed from the sample's sessions).
Three boxes, one extraction request each, every reply the same two events A, B.
- Box 0: no trace yet; its two unmatched events go to one chain request (one call).
- Box 1 and box 2: each event's most similar stored event is its own copy (cosine 1), so the
  candidate traces are the traces holding A and B; each is verified in one call with all of the
  box's events.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
from gaama_replies import gaama_upstream_reply, is_fact_prompt
from loopback import completion_body, run_sample_on_loopback
from upstream_files import (
    ROOT,
    gaama_answer_md,
    membox_qa_template,
    membox_template,
    needs_upstream,
    provenance,
    template_head,
    unformat,
)

from synapse_pt.data import load_locomo, sample_path
from synapse_pt.data.upstream import ENV_VAR

SAMPLE = load_locomo(sample_path()).conversations[0]
QUESTIONS = len(SAMPLE.questions)  # 14
EVENT_A = "Nora went to a pottery class with her friends on 7 March 2024."
EVENT_B = "Tomas painted a sunset over the lake in March 2024."
ANSWER = "In March 2024."
ANSWER_END = "Answer:"  # every answer template of ours and Membox's end so
pytestmark = needs_upstream  # the answer steps read GAAMA's and Membox's files (issue 44)


def event_text(line: str) -> str:
    """A trace event line as Membox's code writes it, ``<box start>: <event>``, the start the
    session's date string as the data holds it: the event, its date checked."""
    starts = [s.date_time_raw for s in SAMPLE.sessions if line.startswith(s.date_time_raw + ": ")]
    assert starts, line
    return line[len(starts[0]) + 2:]


def is_answer(prompt: str) -> bool:
    """An answer request: a template ending in "Answer:" (but Membox's Topic Loom prompt, which
    ends so too), or GAAMA's answer_from_memory.md."""
    return ((prompt.rstrip().endswith(ANSWER_END) and not prompt.startswith(template_head(LOOM)))
            or prompt.startswith(gaama_answer_md().split("{{query}}")[0]))


def user_messages(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "user"]


def is_repair(body: dict[str, Any]) -> bool:
    """The repair round re-asks with the garbled reply and an instruction appended."""
    return len(user_messages(body)) > 1


#: Membox's build prompts (memory.prompts=upstream, the default), read from membox.py here
LOOM, BOX, VERIFY, CHAINS = (membox_template(n) for n in (
    "PROMPT_MSG_CONTINUATION", "PROMPT_DIALOG_EXTRACT", "PROMPT_TRACE_EVENT_FILTER",
    "PROMPT_TRACE_INIT"))


def membox_reply(prompt: str, garble_chains: bool) -> str:
    """A chat model's reply to Membox's prompts (the code's, from membox.py): Loom "Yes"; the
    same two events for every box; a verification that relates each new event whose text the
    trace already holds; a grouping of all unmatched events into one chain (or,
    ``garble_chains``, prose)."""
    if prompt.startswith(template_head(LOOM)):
        return "Yes."
    if prompt.startswith(template_head(BOX)):
        return json.dumps({"keywords": ["pottery", "painting", "family"], "topic": "hobbies",
                           "explicit_mentions": [EVENT_A, EVENT_B]})
    if prompt.startswith(template_head(VERIFY)):
        shown = unformat(VERIFY, prompt)
        events = shown["content_b"].splitlines()
        return json.dumps({"related_events": [e for e in events if e in shown["content_a"]],
                           "unrelated_events": [e for e in events
                                                if e not in shown["content_a"]]})
    if prompt.startswith(template_head(CHAINS)):
        if garble_chains:
            return "These events are all about hobbies."
        return json.dumps({"primary_chain": unformat(CHAINS, prompt)["events"].splitlines(),
                           "secondary_chains": [], "isolated_events": []})
    raise AssertionError(f"unexpected prompt: {prompt[:120]}")


def run_against(tmp_path: Path, monkeypatch, reply, *overrides: str
                ) -> tuple[dict[str, Any], list[dict[str, Any]], pd.DataFrame]:
    """One run on the sample against a loopback server answering extraction prompts with
    ``reply`` and every answer prompt with :data:`ANSWER`."""
    def behaviour(body: dict[str, Any], n: int) -> tuple[int, str, float]:
        prompt = user_messages(body)[0]  # route on the original prompt (repairs append)
        text = ANSWER if is_answer(prompt) else reply(prompt)
        return 200, completion_body(text, {"prompt_tokens": 50, "completion_tokens": 5}), 0.0

    monkeypatch.setenv(ENV_VAR, str(ROOT))

    _, metrics, bodies = run_sample_on_loopback(tmp_path, monkeypatch, behaviour, "eval=qa",
                                                *overrides)
    preds = pd.read_parquet(tmp_path / "run" / "predictions.parquet")
    return metrics, bodies, preds


def of_kind(bodies: list[dict[str, Any]], marker: str, repairs: bool = False
            ) -> list[dict[str, Any]]:
    return [b for b in bodies if marker in user_messages(b)[0] and is_repair(b) == repairs]


def loom_decisions() -> int:
    """By hand: a session's first two turns are never asked about."""
    return sum(max(0, len(s.turns) - 2) for s in SAMPLE.sessions)


def answers(bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [b for b in bodies if is_answer(user_messages(b)[0])]


def test_membox_llm_build_end_to_end(tmp_path: Path, monkeypatch) -> None:
    metrics, bodies, preds = run_against(tmp_path, monkeypatch,
                                         lambda p: membox_reply(p, garble_chains=False),
                                         "memory=membox")  # its own answer step by default
    assert loom_decisions() == 34 and len(SAMPLE.sessions) == 3
    assert len(of_kind(bodies, template_head(LOOM))) == 34
    boxes = of_kind(bodies, template_head(BOX))
    assert len(boxes) == 3  # one box per session
    assert len(of_kind(bodies, template_head(CHAINS))) == 1  # box 0's A and B
    verify = of_kind(bodies, template_head(VERIFY))
    assert len(verify) == 2  # boxes 1 and 2: the one trace holding A and B, verified once each
    for body in verify:  # all of the box's events shown, one per line (the code's)
        assert unformat(VERIFY, user_messages(body)[0])["content_b"].splitlines() == [
            EVENT_A, EVENT_B]
    assert not [b for b in bodies if is_repair(b)]
    build = [b for b in bodies if not is_answer(user_messages(b)[0])]
    # the code's requests: one user message, no budget (the model's own limit), temperature 0,
    # no seed; the box extraction in JSON mode (LLMWorker.chat_completion, process_new_box)
    assert all([m["role"] for m in b["messages"]] == ["user"] and b["temperature"] == 0.0
               and not {"max_tokens", "max_completion_tokens", "seed"} & set(b) for b in build)
    assert all(b.get("response_format") == {"type": "json_object"} for b in boxes)
    assert not [b for b in build if "response_format" in b and b not in boxes]
    assert metrics["extraction"] == {"failures": 0, "attempts": 34 + 3 + 1 + 2,
                                     "failure_share": 0.0}
    assert set(preds["build"]) == {"membox-llm"}
    asked = answers(bodies)
    assert len(asked) == QUESTIONS  # no gate configured: every question answered
    # the run names the file its prompts came from, with the sha256 it was checked against
    assert metrics["identity"]["upstream_prompts"] == {"membox/membox.py":
                                                       provenance("membox/membox.py")}
    assert metrics["identity"]["answer_style"] == "membox"
    head, tail = membox_qa_template().split("{memories}")
    ends = {tail.format(question=q.question) for q in SAMPLE.questions}
    for body in asked:
        # Membox's PROMPT_QA_ANSWER, read from membox.py, as the only message (issue 44)
        assert [m["role"] for m in body["messages"]] == ["user"]
        prompt = user_messages(body)[0]
        assert prompt.startswith(head) and any(prompt.endswith(end) for end in ends)
        assert body["max_tokens"] == 16384 and not body.get("stop")
        # one trace (A, B of all three boxes) follows the top box; the other two boxes' first
        # trace is the one shown, so they are left out
        assert prompt.count("Events:\n") == 1
        events = [event_text(e)
                  for e in prompt.split("Events:\n")[1].split("\n\n")[0].splitlines()]
        # box 0's entry in the chain reply's order; boxes 1 and 2 add the verified texts in the
        # order of a Python set of them (membox.py 938), the same both times
        assert events[:2] == [EVENT_A, EVENT_B] and events[2:4] == events[4:]
        assert sorted(events[2:4]) == sorted([EVENT_A, EVENT_B])
    assert (preds["prediction"] == ANSWER).all()


def test_membox_garbled_chain_reply_is_counted_end_to_end_ours(tmp_path: Path,
                                                               monkeypatch) -> None:
    """Ours (``memory.chain_parse=fenced``): the grouping call of box 0 fails (prose, then the
    repair too): counted, and A and B start a trace each. Box 1: A's most similar event is in
    trace 0, B's in trace 1, so two candidate traces, two verifications (each relates only the
    event it holds); box 2 the same. The top box is followed by trace 0 (A three times); the
    other boxes' first trace is trace 0 too, so they are left out."""
    metrics, bodies, preds = run_against(tmp_path, monkeypatch,
                                         lambda p: membox_reply(p, garble_chains=True),
                                         "memory=membox", "eval.answer_style=membox",
                                         "memory.chain_parse=fenced")
    assert len(of_kind(bodies, template_head(CHAINS))) == 1
    assert len(of_kind(bodies, template_head(CHAINS), repairs=True)) == 1
    assert len(of_kind(bodies, template_head(VERIFY))) == 4
    assert metrics["extraction"] == {"failures": 1, "attempts": 34 + 3 + 1 + 4,
                                     "failure_share": 1 / 42}
    for body in answers(bodies):
        prompt = user_messages(body)[0]
        assert prompt.count("Events:\n") == 1
        events = prompt.split("Events:\n")[1].split("\n\n")[0].splitlines()
        assert [event_text(e) for e in events] == [EVENT_A] * 3
    assert len(preds) == QUESTIONS


def test_gaama_llm_build_end_to_end(tmp_path: Path, monkeypatch) -> None:
    """Facts (one per message, as scripted) and reflections parsed into the graph, asked with
    GAAMA's own fact_generation.md and reflection_generation.md (one user message each, the
    code's 8,000 / 4,000 tokens), a reflection request after each chunk's facts; every
    extraction request counted; answers under GAAMA's answer step (the default for memory=gaama):
    its answer_from_memory.md, the memory in sections by type and the code's budget of 512
    completion tokens with no stop sequence. Every file used is on record with its sha256."""
    metrics, bodies, preds = run_against(tmp_path, monkeypatch, gaama_upstream_reply,
                                         "memory=gaama")  # its own answer step by default
    build = [b for b in bodies if not is_answer(user_messages(b)[0])]
    kinds = ["facts" if is_fact_prompt(user_messages(b)[0]) else "reflections" for b in build]
    assert kinds[:2] == ["facts", "reflections"] and kinds == ["facts", "reflections"] * (
        len(kinds) // 2)  # the code's order: each chunk's reflections after its facts
    assert not [b for b in bodies if is_repair(b)]
    assert all([m["role"] for m in b["messages"]] == ["user"] for b in build)
    # the code's sampling (adapters/openai_llm.py 51-57): no temperature, no seed, the budget
    # as max_completion_tokens
    assert [b["max_completion_tokens"] for b in build] == [8000, 4000] * (len(kinds) // 2)
    assert not [b for b in build if {"temperature", "seed", "max_tokens"} & set(b)]
    memory = metrics["identity"]["memory"]
    assert (memory["temperature"], memory["seed"], memory["budget_param"]) == (
        None, None, "max_completion_tokens")
    assert metrics["extraction"] == {"failures": 0, "attempts": len(build),
                                     "failure_share": 0.0}
    assert set(preds["build"]) == {"gaama-llm"}
    asked = answers(bodies)
    assert len(asked) == QUESTIONS
    assert metrics["identity"]["upstream_prompts"] == {
        rel: provenance(rel) for rel in ("gaama/evals/locomo/locomo_eval.py",
                                         "gaama/prompts/answer_from_memory.md",
                                         "gaama/prompts/fact_generation.md",
                                         "gaama/prompts/reflection_generation.md")}
    assert metrics["identity"]["answer_style"] == "gaama"
    head, tail = gaama_answer_md().split("{{memory_text}}")
    heads = {head.replace("{{query}}", q.question) for q in SAMPLE.questions}
    for body in asked:
        # GAAMA's answer_from_memory.md, read from the file, as the only message (issue 44)
        assert [m["role"] for m in body["messages"]] == ["user"]
        prompt = user_messages(body)[0]
        assert any(prompt.startswith(h) for h in heads) and prompt.endswith(tail)
        assert "## Facts\n" in prompt and "## Episodes (in temporal order)\n" in prompt
        assert body["max_tokens"] == 512 and not body.get("stop")
        facts_shown = prompt.split("## Facts\n")[1].split("\n\n")[0].splitlines()
        assert facts_shown and all(" said: " in f for f in facts_shown)  # the scripted facts
