"""The LLM builds of GAAMA and Membox with a scripted chat model: prompts sent, replies parsed
into the graph, a garbled reply repaired once and then counted as a failure (never an empty
success)."""

from __future__ import annotations

import pytest
from scripted_memory import ScriptedLLM

from synapse_pt.data import load_locomo, sample_path
from synapse_pt.eval.qa.pipeline import blind
from synapse_pt.graph.extraction import LLMConceptExtractor
from synapse_pt.memory.gaama.memory import FACT, REFLECTION, GAAMAMemory
from synapse_pt.memory.membox.memory import MemboxMemory
from synapse_pt.models.hashing import HashingEncoder

ENC = HashingEncoder(64)
#: GAAMA's LLM build in our wording (our prompts): what the scripted model answers
OURS_GAAMA = {"prompts": "ours"}
# our wordings and readers (before #44); the code's prompts: tests/memory/test_membox_prompts.py
OURS_MEMBOX = {"prompts": "ours", "verify_parse": "fenced"}


@pytest.fixture(scope="module")
def conv():
    return load_locomo(sample_path()).conversations[0]


def test_gaama_llm_build_parses_facts_and_reflections(conv) -> None:
    llm = ScriptedLLM()
    # context_cosine -1: the concepts and older messages among each message's nearest nodes go
    # into the context; chunks of 100 tokens hold 4-5 messages, so each reflection cites 2 facts
    memory = GAAMAMemory(ENC, LLMConceptExtractor(llm), chunk_tokens=100, context_cosine=-1.0,
                         **OURS_GAAMA)
    memory.ingest([conv])
    block = memory.blocks[conv.sample_id]
    turns = {t.dia_id for t in conv.turns()}
    facts = [i for i, k in enumerate(block.kind) if k == FACT]
    assert len(facts) == len(turns)  # one fact per message, as scripted
    assert {block.covers[i] for i in facts} == {(t,) for t in turns}
    # every chunk's reply holds the same reflection, citing its first two facts: one node, as
    # the code keys a reflection by its text (canonical_id_entity, services/ltm_creator.py 493),
    # with two edges (both directions) to each cited fact of every chunk
    chunks = sum("Write the atomic facts" in r.messages[1][1] for r in llm.requests)
    (reflection,) = [i for i, k in enumerate(block.kind) if k == REFLECTION]
    assert len(block.covers[reflection]) == 2 * chunks
    assert memory.edge_counts(conv.sample_id)["DERIVED_FROM_FACT"] == 4 * chunks
    d = memory.describe()
    assert d["build"] == "gaama-llm" and not d["llm_free"] and d["extraction_failures"] == 0
    prompts = [r.messages[1][1] for r in llm.requests]
    assert sum("Write the atomic facts" in p for p in prompts) > 1  # several chunks
    assert any("Earlier messages, for reference only" in p for p in prompts)
    result = memory.retrieve([blind(q) for q in conv.questions[:3]])
    assert all(it.covers for row in result.items for it in row)


def test_gaama_garbled_chunk_is_repaired_once_then_counted(conv, caplog) -> None:
    first = next(conv.turns()).dia_id
    # the chunk's own messages follow the prompt's first line (older ones: "reference only:")
    llm = ScriptedLLM(garble=f"date:\n[{first}]")
    memory = GAAMAMemory(ENC, LLMConceptExtractor(llm), chunk_tokens=120, **OURS_GAAMA)
    memory.ingest([conv])
    assert memory.describe()["extraction_failures"] == 1
    (failure,) = memory.failures
    assert failure.stage == "facts" and failure.where.startswith(first)
    assert "repair reply" in failure.error
    repairs = [r for r in llm.requests if r.messages[-2][0] == "assistant"]
    assert len(repairs) == 1  # exactly one repair round for the garbled chunk
    assert "extraction_failures" in caplog.text
    block = memory.blocks[conv.sample_id]
    covered = {c for i, k in enumerate(block.kind) if k == FACT for c in block.covers[i]}
    assert first not in covered  # the failed chunk added no facts (and no fake ones)


def test_membox_llm_build_loom_boxes_and_traces(conv) -> None:
    llm = ScriptedLLM()
    memory = MemboxMemory(ENC, LLMConceptExtractor(llm), trace_threshold=-1.0, **OURS_MEMBOX)
    memory.ingest([conv])
    for box in memory.boxes:  # a turn with "?" opens a box unless it is a box's second turn
        for j, t in enumerate(box.turns[2:], start=2):
            assert "?" not in t.content, (box.turns[0].dia_id, j)
        assert box.keywords == ["talk", "news", "plans"] and box.topic == "catching up"
        assert len(box.events) == len(box.turns)
        assert all(covers == tuple(t.dia_id for t in box.turns) for _, covers, _ in box.events)
    assert any(len(t) > 1 for t in memory.traces)  # the model linked events across boxes
    d = memory.describe()
    assert d["build"] == "membox-llm" and d["extraction_failures"] == 0
    assert memory.retrieve([blind(q) for q in conv.questions[:2]]).items[0]


def test_membox_garbled_decision_closes_the_box_and_is_counted(conv) -> None:
    clean = ScriptedLLM()
    MemboxMemory(ENC, LLMConceptExtractor(clean), **OURS_MEMBOX).ingest([conv])
    asked = [r.messages[1][1].split("New message:\n")[1].split("\n\nDoes")[0]
             for r in clean.requests if "Does the new message continue" in r.messages[1][1]]
    target = next(t for t in conv.turns()
                  if f"{t.speaker}: {t.content}" in asked and "?" not in t.content)
    llm = ScriptedLLM(garble=f"New message:\n{target.speaker}: {target.content}\n")
    memory = MemboxMemory(ENC, LLMConceptExtractor(llm), **OURS_MEMBOX)
    memory.ingest([conv])
    (failure,) = [f for f in memory.failures if f.stage == "loom"]
    assert failure.where == target.dia_id and "repair reply" in failure.error
    # the scripted model would have said Yes; the failed decision closed the box instead
    assert any(box.turns[0].dia_id == target.dia_id for box in memory.boxes)
    assert memory.describe()["extraction_failures"] == 1


def test_box_replies_of_placeholders_are_unreadable() -> None:
    from synapse_pt.memory.membox.llm_build import BoxReply, parse_box
    from synapse_pt.models.structured import StructuredOutputError

    assert parse_box('{"keywords": ["dog", "..."], "topic": "pets", "events": ["...", "a walk"]}'
                     ) == BoxReply(["dog"], "pets", ["a walk"])
    with pytest.raises(StructuredOutputError, match="placeholders"):
        parse_box('{"keywords": ["..."], "topic": "...", "events": ["..."]}')
    with pytest.raises(StructuredOutputError, match="'keywords'"):
        parse_box('{"keywords": [], "topic": "pets"}')


def test_gaama_context_on_the_code_scale_with_older_facts(conv) -> None:
    """The code's context threshold 0.75 reads (1 + cos) / 2, i.e. cos >= 0.5, and the facts
    already derived from the older messages join the context (its ``existing_facts``). With
    context_cosine=0 on the code scale every older message with cos >= -1 qualifies (all): the
    prompts show earlier messages and their facts."""
    llm = ScriptedLLM()
    memory = GAAMAMemory(ENC, LLMConceptExtractor(llm), chunk_tokens=120, context_cosine=0.0,
                         **OURS_GAAMA)
    memory.ingest([conv])
    prompts = [r.messages[1][1] for r in llm.requests
               if "Write the atomic facts" in r.messages[1][1]]
    assert any("Facts already known from those messages" in p for p in prompts)
    assert memory._similarity(0.5) == 0.75 and memory._similarity(-1.0) == 0.0


def test_chunk_token_rule_counts_words_of_speaker_and_text(conv) -> None:
    """The code counts len((speaker + " " + text).split()) tokens per message. By hand on three
    messages of 3, 5 and 2 words from "Ann" (4, 6, 3 tokens): chunks of at most 10 tokens are
    [m1, m2], [m3]."""
    from datetime import datetime

    from synapse_pt.data.schema import Turn
    from synapse_pt.memory.gaama.llm_build import chunk_turns

    turns = [Turn("s", f"D1:{i}", "Ann", text, 1, i, datetime(2023, 5, 8))
             for i, text in enumerate(["one two three", "a b c d e", "x y"], start=1)]
    assert [[t.dia_id for t in c] for c in chunk_turns(turns, 10)] == [["D1:1", "D1:2"],
                                                                       ["D1:3"]]


def test_membox_code_weave_verifies_each_candidate_trace_and_chains_the_rest(conv) -> None:
    """The code's weave with a scripted model: one verification call per candidate trace with all
    the box's events (the script relates event 0 only), one grouping call per box with two or
    more unmatched events (the script chains events 0 and 1, the rest isolated)."""
    llm = ScriptedLLM()
    memory = MemboxMemory(ENC, LLMConceptExtractor(llm), trace_threshold=-1.0, **OURS_MEMBOX)
    memory.ingest([conv])
    prompts = [r.messages[1][1] for r in llm.requests]
    verify = [p for p in prompts if "Which new events continue this storyline" in p]
    chains = [p for p in prompts if "Group them into storylines" in p]
    assert verify and chains and memory.describe()["extraction_failures"] == 0
    first = memory.boxes[0]
    if len(first.events) >= 2:  # the first box has no trace to join: its events are grouped
        assert memory.traces[0][:2] == [(0, 0), (0, 1)]
    # every verification shows all of its box's events, numbered
    for p in verify:
        listed = p.split("New events, numbered:\n")[1].split("\n\n")[0].splitlines()
        assert [line.split(". ", 1)[0] for line in listed] == [str(i) for i in range(len(listed))]
    # with every trace a candidate (threshold -1) and event 0 related to each, event 0 of a later
    # box joins several traces when there are several
    assert any(len(ts) > 1 for ts in memory.event_traces.values())


def test_membox_garbled_verification_joins_all_events_and_is_counted(conv) -> None:
    clean = ScriptedLLM()
    MemboxMemory(ENC, LLMConceptExtractor(clean), trace_threshold=-1.0,
                 **OURS_MEMBOX).ingest([conv])
    asked = next(r.messages[1][1] for r in clean.requests
                 if "Which new events continue this storyline" in r.messages[1][1])
    marker = asked.split("New events, numbered:\n")[1].split("\n")[0]
    llm = ScriptedLLM(garble=marker)
    memory = MemboxMemory(ENC, LLMConceptExtractor(llm), trace_threshold=-1.0, **OURS_MEMBOX)
    memory.ingest([conv])
    failed = [f for f in memory.failures if f.stage == "verify"]
    assert failed and all("repair reply" in f.error for f in failed)
    assert memory.describe()["extraction_failures"] == len(memory.failures)
    # a failed verification joins every event of its box to that trace (the code's rule)
    b = next(i for i, box in enumerate(memory.boxes)
             if any(marker.split(". ", 1)[1] == e for e, _, _ in box.events))
    trace = int(failed[0].where.rsplit(" ", 1)[1])
    assert all((b, ei) in memory.traces[trace] for ei in range(len(memory.boxes[b].events)))


def test_membox_verify_and_chain_replies_parsed_by_hand() -> None:
    from synapse_pt.memory.membox.llm_build import parse_chains, parse_verify
    from synapse_pt.models.structured import StructuredOutputError

    assert parse_verify('{"related": [2, 0], "unrelated": [1]}', 3) == [2, 0]
    assert parse_verify('{"related": [], "unrelated": []}', 3) == [0, 1, 2]  # the code: all
    assert parse_verify('{"related": [], "unrelated": [0, 1, 2]}', 3) == []
    with pytest.raises(StructuredOutputError, match="names events"):
        parse_verify('{"related": [5]}', 3)
    with pytest.raises(StructuredOutputError):
        parse_verify("no json", 3)
    # chains first, then isolated events no chain used, then events the reply left out
    assert parse_chains('{"chains": [[0, 2], []], "isolated": [1, 2]}', 4) == [[0, 2], [1], [3]]
    assert parse_chains('{"chains": [], "isolated": [1, 0]}', 2) == [[1, 0]]
    with pytest.raises(StructuredOutputError, match="groups no event"):
        parse_chains('{"chains": [], "isolated": []}', 2)
