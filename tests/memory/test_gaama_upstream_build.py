"""GAAMA's LLM build with its own prompt files (issue 44), on a hand-made conversation.

Every expected prompt is GAAMA's file text with its ``{{key}}`` placeholders replaced by
``str.replace`` here, the values worked out by hand below; node ids are recomputed here with
``hashlib`` (``ep-``: sha256 of ``"<sample>|<dia_id>"``; ``entity-``: the code's
``canonical_id_entity``, sha256 of ``"entity|<text lower-cased>"``), never read from the build.

The conversation (chunks of at most 50 tokens, the code's count of speaker + episode text):

* chunk 1 (19 + 20 tokens): E1 Ann on pottery, E2 Bob on his dog;
* chunk 2 (14 + 12 + 11 + 12 tokens): E3, E4, E5 on pottery, E6 on the dog.

The encoder puts a text on one axis per topic it names (pottery / dog / other), so similarities
are exact: 1 between texts of the same topic, 0 across topics; on the code's (1 + cos) / 2
scale that is 1.0 and 0.5, against the 0.75 threshold.

The scripted model writes for chunk 1 the facts F1 (Ann, pottery, from E1) and F2 (Bob's dog,
citing E2 and an unknown id), for chunk 2 F3 (pottery, from E3); one reflection R1 on pottery
citing F1 when F1 is among the new facts. The vector store holds nodes in the order the code
embeds them (ties: the earlier entry): E1 E2 | pottery_class dog_walks F1 F2 | R1 | E3 E4 E5 E6 |
F3.

Worked by hand, the code's context for chunk 2: E3's nearest 10 nodes
hold E1 (similarity 1), E6's hold E2; the chunk's own episodes are left out, so the related
episodes are E1, E2; their facts F1, F2; E3's nearest 5 (E1, pottery_class, F1, R1, E3: the
ties at 1.0 in store order) give pottery_class, E6's nearest 5 (E2, dog_walks, F2, E6, then E1
at 0.5) dog_walks. The reflection request after chunk 2: F3's nearest 5
(E1, pottery_class, F1, R1, E3) hold the older fact F1, and R1 is drawn from it: the related
facts are F1, the existing reflections R1. After chunk 1: F1's and F2's nearest 5 hold no older
fact: both sections "(none)".
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

import pytest
import torch
from upstream_files import ROOT, needs_upstream

from synapse_pt.data import load_locomo, upstream
from synapse_pt.graph.extraction import LLMConceptExtractor
from synapse_pt.memory.gaama.llm_build import chunk_turns
from synapse_pt.memory.gaama.memory import EDGE_TYPES, FACT, REFLECTION, GAAMAMemory
from synapse_pt.models.llm.base import LLM, ChatRequest, ChatResponse

pytestmark = needs_upstream
REPO = Path(__file__).resolve().parents[2]
S1, S2 = "1:56 pm on 8 May, 2023", "10:00 am on 9 June, 2023"
TURNS = [("D1:1", "Ann", "I started a pottery class yesterday with two friends from work."),
         ("D1:2", "Bob", "My dog loves the long walks in the big park near our home."),
         ("D2:1", "Ann", "The pottery class made a bowl."),
         ("D2:2", "Bob", "A pottery bowl, nice."),
         ("D2:3", "Ann", "Pottery takes patience."),
         ("D2:4", "Bob", "Took the dog out.")]
F1 = "Ann started a pottery class on 7 May 2023."
F2 = "Bob's dog loves long walks in the park."
F3 = "Ann made a pottery bowl."
R1 = "Ann enjoys pottery."


def ep(dia_id: str) -> str:
    return "ep-" + hashlib.sha256(f"t1|{dia_id}".encode()).hexdigest()[:16]


def ent(text: str) -> str:
    return "entity-" + hashlib.sha256(f"entity|{text.lower()}".encode()).hexdigest()[:16]


def line(dia_id: str) -> str:
    """An episode as the code lists it: [id] [session date] <content>, the content itself
    "[session date] speaker: text" (run_create_ltm.py)."""
    date = S1 if dia_id.startswith("D1") else S2
    _, who, text = next(t for t in TURNS if t[0] == dia_id)
    return f"[{ep(dia_id)}] [{date}] [{date}] {who}: {text}"


def fact_md() -> str:
    return (ROOT / "gaama" / "prompts" / "fact_generation.md").read_text()


def reflection_md() -> str:
    return (ROOT / "gaama" / "prompts" / "reflection_generation.md").read_text()


def by_hand(template: str, **values: str) -> str:
    for key, value in values.items():  # as the code's prompt_loader: {{key}} -> value
        template = template.replace("{{" + key + "}}", value)
    return template


class TopicEncoder:
    """One axis per topic a text names: pottery (pottery, bowl), dog (dog, walks), else other."""

    name, dim = "topics", 3

    def encode(self, texts: Sequence[str]) -> torch.Tensor:
        rows = []
        for text in texts:
            low = text.lower()
            row = [float(low.count("pottery") + low.count("bowl")),
                   float(low.count("dog") + low.count("walks")), 0.0]
            row[2] = 0.0 if any(row) else 1.0
            rows.append(row)
        x = torch.tensor(rows)
        return x / x.norm(dim=1, keepdim=True)


def fact_reply(prompt: str) -> str:
    tail = prompt.rstrip()
    if tail.endswith(TURNS[1][2]):  # chunk 1
        return json.dumps({
            "facts": [{"fact_text": F1, "belief": 1.0, "source_episode_ids": [ep("D1:1")],
                       "concepts": ["pottery_class"]},
                      {"fact_text": F2, "belief": 0.9,
                       "source_episode_ids": [ep("D1:2"), "ep-0000000000000000"],
                       "concepts": ["dog_walks", "not_listed"]}],
            "concepts": [{"concept_label": "pottery_class", "episode_ids": [ep("D1:1")]},
                         {"concept_label": "dog_walks", "episode_ids": [ep("D1:2")]}]})
    assert tail.endswith(TURNS[5][2]), tail[-200:]
    return json.dumps({
        "facts": [{"fact_text": F3, "belief": 1.0, "source_episode_ids": [ep("D2:1")],
                   "concepts": ["pottery_class"]}],
        "concepts": [{"concept_label": "pottery_class", "episode_ids": [ep("D2:1")]}]})


def reflection_reply(prompt: str) -> str:
    new_facts = prompt.rstrip().rsplit("\n\n", 1)[1]  # the file's last section
    if F1 in new_facts:
        return json.dumps({"reflections": [{"reflection_text": R1, "belief": 0.8,
                                            "source_fact_ids": [ent(F1)]}]})
    return json.dumps({"reflections": []})


class UpstreamModel(LLM):
    """Answers GAAMA's own fact and reflection prompts (recognised by their files' first
    line); records every request."""

    backend, model = "scripted", "scripted-gaama"

    def __init__(self) -> None:
        self.requests: list[ChatRequest] = []

    def generate(self, requests: Sequence[ChatRequest]) -> list[ChatResponse]:
        self.requests.extend(requests)
        out = []
        for r in requests:
            prompt = r.messages[0][1]  # the original prompt (a repair appends)
            if prompt.startswith(fact_md().splitlines()[0]):
                text = fact_reply(prompt)
            else:
                assert prompt.startswith(reflection_md().splitlines()[0]), prompt[:80]
                text = reflection_reply(prompt)
            out.append(ChatResponse(text, prompt_tokens=10, completion_tokens=5, latency_s=0.0,
                                    model=self.model))
        return out

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def kinds(self) -> list[str]:
        return ["facts" if r.messages[0][1].startswith(fact_md().splitlines()[0])
                else "reflections" for r in self.requests]


@pytest.fixture(autouse=True)
def _upstream_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(upstream.ENV_VAR, str(ROOT))


@pytest.fixture(scope="module")
def conv(tmp_path_factory):
    session = {"speaker_a": "Ann", "speaker_b": "Bob",
               "session_1_date_time": S1, "session_2_date_time": S2,
               "session_1": [], "session_2": []}
    for dia_id, who, text in TURNS:
        session[f"session_{dia_id[1]}"].append({"speaker": who, "dia_id": dia_id, "text": text})
    path = tmp_path_factory.mktemp("conv") / "t1.json"
    path.write_text(json.dumps([{"sample_id": "t1", "conversation": session, "qa": [
        {"question": "What did Ann make?", "answer": "a bowl", "evidence": ["D2:1"],
         "category": 4}]}]))
    return load_locomo(path).conversations[0]


def build(conv, **settings) -> tuple[GAAMAMemory, UpstreamModel]:
    llm = UpstreamModel()
    memory = GAAMAMemory(TopicEncoder(), LLMConceptExtractor(llm), chunk_tokens=50, **settings)
    memory.ingest([conv])
    return memory, llm


def nodes(memory: GAAMAMemory, kind: str) -> dict[str, int]:
    block = memory.blocks["t1"]
    return {text: i for i, (k, text) in enumerate(zip(block.kind, block.text, strict=True))
            if k == kind}


def edges(memory: GAAMAMemory, node: int, edge: str) -> set[int]:
    block = memory.blocks["t1"]
    t = EDGE_TYPES.index(edge)
    src, dst = block.edge_index.tolist()
    return {b for a, b, e in zip(src, dst, block.edge_type.tolist(), strict=True)
            if a == node and e == t}


def test_the_chunks_are_the_ones_worked_by_hand(conv) -> None:
    memory = GAAMAMemory(TopicEncoder(), LLMConceptExtractor(UpstreamModel()))
    texts = memory.episode_texts(conv)
    turns = list(conv.turns())
    chunks = chunk_turns(turns, 50, texts=[texts[t.dia_id] for t in turns])
    assert [[t.dia_id for t in c] for c in chunks] == [["D1:1", "D1:2"],
                                                      ["D2:1", "D2:2", "D2:3", "D2:4"]]


def test_fact_and_reflection_prompts_are_the_files_filled_by_hand(conv) -> None:
    """The code's defaults (prompts=upstream): facts of chunk 1, its reflection, facts of chunk
    2, its reflection; each the file filled by hand; one user message; the code's budgets."""
    memory, llm = build(conv)
    assert llm.kinds() == ["facts", "reflections", "facts", "reflections"]
    assert all([role for role, _ in r.messages] == ["user"] for r in llm.requests)
    assert [r.max_tokens for r in llm.requests] == [8000, 4000, 8000, 4000]
    # the code's sampling (adapters/openai_llm.py 51-57): none sent, max_completion_tokens
    assert {(r.temperature, r.seed, r.budget_param) for r in llm.requests} == {
        (None, None, "max_completion_tokens")}
    sent = [r.messages[0][1] for r in llm.requests]
    assert sent[0] == by_hand(fact_md(), new_episodes=f"{line('D1:1')}\n{line('D1:2')}",
                              related_episodes="(none)", existing_facts="(none)",
                              existing_concepts="(none)")
    assert sent[1] == by_hand(reflection_md(), new_facts=f"[{ent(F1)}] {F1}\n[{ent(F2)}] {F2}",
                              related_facts="(none)", existing_reflections="(none)")
    assert sent[2] == by_hand(
        fact_md(), new_episodes="\n".join(line(f"D2:{i}") for i in range(1, 5)),
        related_episodes=f"{line('D1:1')}\n{line('D1:2')}",
        existing_facts=f"[{ent(F1)}] {F1}\n[{ent(F2)}] {F2}",
        existing_concepts="pottery_class\ndog_walks")
    assert sent[3] == by_hand(reflection_md(), new_facts=f"[{ent(F3)}] {F3}",
                              related_facts=f"[{ent(F1)}] {F1}",
                              existing_reflections=f"[{ent(R1)}] {R1}")
    # the facts' rule 5 (our wording had dropped it) is sent, as the file words it
    part1 = fact_md().split("## Part 2")[0]
    (rule5,) = [x for x in part1.splitlines() if x.startswith("5. ")]
    assert all(rule5 in p for p in sent[::2])
    d = memory.describe()
    assert d["extraction_failures"] == 0 and d["extraction_attempts"] == 4
    assert d["upstream_prompts"] == ["gaama/prompts/fact_generation.md",
                                     "gaama/prompts/reflection_generation.md"]
    assert d["prompts"] == "upstream"
    # the reply read in the file's form: R1 derived from F1; F1's and F3's concept edges
    facts, reflections = nodes(memory, FACT), nodes(memory, REFLECTION)
    assert set(facts) == {F1, F2, F3} and set(reflections) == {R1}
    assert edges(memory, reflections[R1], "DERIVED_FROM_FACT") == {facts[F1]}
    concepts = nodes(memory, "concept")
    # each concept's text is its label, as the code embeds it (infra/serialization.py 28-31);
    # "not_listed" was in no list
    assert set(concepts) == {"pottery_class", "dog_walks"}
    assert edges(memory, facts[F3], "ABOUT_CONCEPT") == {concepts["pottery_class"]}


def test_a_bad_source_drops_only_that_edge(conv) -> None:
    """F2 cites E2 and an id of no episode of its chunk."""
    edge, _ = build(conv)
    facts = nodes(edge, FACT)
    block = edge.blocks["t1"]
    assert block.covers[facts[F2]] == ("D1:2",)
    assert edges(edge, facts[F2], "DERIVED_FROM") == {1}  # E2 only; the fact is kept
    assert edge.describe()["extraction_failures"] == 0


def test_a_context_section_is_cut_to_its_share_of_2000_words() -> None:
    """The code's _budget_truncate by hand: shares 0.35 / 0.25 / 0.25 / 0.15 of 2,000 words are
    700 / 500 / 500 / 300. New episodes: 8 lines of 100 words take 7 (700) in the first pass;
    related: 1 line of 100 (of 500); facts: 3 of 200 take 2 (400 of 500); concepts none. Left:
    2000 - 700 - 100 - 400 = 800, handed out in section order: the 8th episode line (100, 700
    left), then the related section has no more lines, the facts' 3rd line (200, 500 left)."""
    from synapse_pt.memory.gaama.llm_build import budget_truncate

    eps = [" ".join(["e"] * 100)] * 8
    rel = [" ".join(["r"] * 100)]
    facts = [" ".join(["f"] * 200)] * 3
    cut = budget_truncate([(eps, 0.35), (rel, 0.25), (facts, 0.25), ([], 0.15)], 2000)
    assert [len(c) for c in cut] == [8, 1, 3, 0]
    long_facts = [" ".join(["f"] * 450)] * 3  # 1 fits 500, then 2000-700-100-450 = 750 left
    cut = budget_truncate([(eps, 0.35), (rel, 0.25), (long_facts, 0.25), ([], 0.15)], 2000)
    assert [len(c) for c in cut] == [8, 1, 2, 0]  # 8th episode (650 left), a 2nd fact (200)


def test_our_wording_stays_an_option(conv) -> None:
    """prompts=ours sends our prompt with its system message and reads our reply form."""
    from scripted_memory import ScriptedLLM

    llm = ScriptedLLM()
    memory = GAAMAMemory(TopicEncoder(), LLMConceptExtractor(llm), chunk_tokens=50,
                         prompts="ours")
    memory.ingest([conv])
    assert all(r.messages[0][0] == "system" for r in llm.requests)
    assert all(r.max_tokens == 768 for r in llm.requests)
    assert memory.describe()["upstream_prompts"] == []
    assert len(nodes(memory, FACT)) == len(TURNS)  # one per message, as scripted


def test_a_missing_prompt_file_stops_the_build_before_it_starts(conv, tmp_path) -> None:
    with pytest.raises(upstream.UpstreamNotFoundError, match="fact_generation.md"):
        GAAMAMemory(TopicEncoder(), LLMConceptExtractor(UpstreamModel()),
                    upstream_path=str(tmp_path))


def test_no_build_prompt_text_is_pasted_into_the_project() -> None:
    """No line of 40+ characters of the two build prompt files appears in synapse_pt/ or
    configs/."""
    lines = [s.strip(" -#*\n") for s in fact_md().splitlines() + reflection_md().splitlines()]
    lines = [s for s in lines if len(s) >= 40]
    assert len(lines) > 20
    texts = {p: p.read_text(errors="replace") for folder in ("synapse_pt", "configs")
             for p in (REPO / folder).rglob("*") if p.is_file()
             and p.suffix in (".py", ".yaml", ".md", ".txt", ".json")}
    assert [(s, str(p)) for s in lines for p, t in texts.items() if s in t] == []
