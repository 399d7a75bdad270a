from __future__ import annotations

import pytest
from graph_helpers import make_turn

from synapse_pt.graph.extraction import (
    ConceptExtractionError,
    KeywordConceptExtractor,
    LLMConceptExtractor,
    clean_concepts,
    keyword_candidates,
)
from synapse_pt.models.hashing import HashingEncoder
from synapse_pt.models.llm.base import LLM, ChatResponse


class ScriptedLLM(LLM):
    """Answers by window marker: ``replies[marker]`` is the first reply, then the repair reply."""

    backend = "scripted"
    model = "scripted-llm"

    def __init__(self, replies: dict[str, list[str]]) -> None:
        self.replies = replies
        self.batches: list[int] = []
        self.requests = []

    def generate(self, requests):
        self.batches.append(len(requests))
        out = []
        for req in requests:
            self.requests.append(req)
            prompt = req.messages[1][1]
            marker = next(m for m in self.replies if m in prompt)
            attempt = 0 if len(req.messages) == 2 else 1  # a repair request carries 4 messages
            out.append(ChatResponse(self.replies[marker][attempt], 10, 5, 0.0, self.model))
        return out

    def count_tokens(self, text: str) -> int:
        return len(text.split())


def _windows():
    return [[make_turn(0, speaker="Caroline", text="WIN0 I went to the LGBTQ support group."),
             make_turn(1, speaker="Melanie", text="That's great!", hours=1)],
            [make_turn(2, speaker="Melanie", text="WIN1 Painting a lake sunrise.", hours=2)]]


def test_llm_extractor_one_batch_prompt_and_cleaning():
    llm = ScriptedLLM({"WIN0": ['["Caroline", " support group ", "caroline", ""]'],
                       "WIN1": ['```json\n["painting", "lake sunrise"]\n```']})
    ext = LLMConceptExtractor(llm, max_concepts=8, include_speakers=True)
    assert ext.extract(_windows()) == [["Caroline", "support group"],
                                       ["painting", "lake sunrise"]]
    assert llm.batches == [2] and not ext.llm_free
    prompt = llm.requests[0].messages[1][1]
    assert "Caroline: WIN0 I went to the LGBTQ support group." in prompt
    assert "Melanie: That's great!" in prompt and "JSON list" in prompt
    assert "08 May 2023" in prompt


def test_llm_extractor_drops_the_speakers_by_default():
    # SPEC §1.1: the two speakers are in every window; as concepts they would be hubs
    llm = ScriptedLLM({"WIN0": ['["Caroline", "Melanie\'s", "support group", "Mark"]'],
                       "WIN1": ['["melanie", "painting"]']})
    assert LLMConceptExtractor(llm).extract(_windows()) == [["support group", "Mark"],
                                                            ["painting"]]


def test_llm_extractor_caps_concepts():
    llm = ScriptedLLM({"WIN0": ['["a1", "b2", "c3"]'], "WIN1": ["[]"]})
    assert LLMConceptExtractor(llm, max_concepts=2).extract(_windows()) == [["a1", "b2"], []]


def test_llm_extractor_repair_path():
    llm = ScriptedLLM({"WIN0": ["Sure! Concepts: {oops", '["Caroline"]'],
                       "WIN1": ['["painting"]']})
    ext = LLMConceptExtractor(llm, include_speakers=True)
    assert ext.extract(_windows()) == [["Caroline"], ["painting"]]
    assert llm.batches == [2, 1]  # the one broken reply got one repair request
    repair = llm.requests[-1]
    assert repair.messages[2] == ("assistant", "Sure! Concepts: {oops")
    assert ext.num_failed_windows == 0


def test_llm_extractor_failure_raises_naming_the_window():
    llm = ScriptedLLM({"WIN0": ['["ok"]'], "WIN1": ["{not json", "still {not json"]})
    with pytest.raises(ConceptExtractionError, match=r"window 1 \(s1 D1:2\.\.D1:2\)"):
        LLMConceptExtractor(llm).extract(_windows())


def test_llm_extractor_skip_window_is_recorded(caplog):
    llm = ScriptedLLM({"WIN0": ['["ok"]'], "WIN1": ["{not json", "still {not json"]})
    ext = LLMConceptExtractor(llm, on_failure="skip_window")
    with caplog.at_level("WARNING"):
        assert ext.extract(_windows()) == [["ok"], []]
    assert ext.num_failed_windows == 1
    assert ext.failures[0].window_index == 1 and ext.failures[0].window == "s1 D1:2..D1:2"
    assert "skipped 1 of 2 windows" in caplog.text
    with pytest.raises(ValueError, match="on_failure"):
        LLMConceptExtractor(llm, on_failure="ignore")


def test_clean_concepts():
    assert clean_concepts([' "Ski  Trip". ', "ski trip", "", "x" * 100, "Mark"]) == \
        ["Ski Trip", "Mark"]


SAMPLE = [
    make_turn(0, speaker="Caroline", text="Hey Melanie! I joined a pottery class last week "
                                          "with my friend Jamie."),
    make_turn(1, speaker="Melanie", text="Wow, a pottery class sounds fun! We went camping "
                                         "near Mount Rainier."),
    make_turn(2, speaker="Caroline", text="Camping is lovely. Jamie loves pottery too."),
]


def test_keyword_candidates_find_names_and_topics():
    cands = {c.text: c for c in keyword_candidates(SAMPLE)}
    assert cands["Jamie"].kind == "entity" and cands["Jamie"].count == 2
    assert cands["Mount Rainier"].kind == "entity"
    assert cands["pottery class"].kind == "bigram" and cands["pottery class"].count == 2
    assert cands["Melanie"].kind == "entity" and "Caroline" in cands
    assert "camping" in cands  # sentence-initial "Camping" read as a word, not a name
    assert not {"Hey", "Wow", "I", "We", "last week"} & set(cands)
    bravo = {c.text: c.kind for c in keyword_candidates([make_turn(0, text="Bravo Jamie!")])}
    assert bravo.get("Jamie") == "entity" and "Bravo Jamie" not in bravo


@pytest.mark.parametrize("encoder", [None, HashingEncoder(64)])
def test_keyword_extractor_selects_named_entities_and_topics(encoder):
    ext = KeywordConceptExtractor(encoder, max_concepts=6)
    (concepts,) = ext.extract([SAMPLE])
    assert ext.name == "llm-free-keyword" and ext.llm_free
    assert len(concepts) == 6
    assert {"Jamie", "pottery class", "Mount Rainier"} <= set(concepts)
    assert "pottery" not in concepts and "class" not in concepts  # inside the kept phrase
    assert len({c.casefold() for c in concepts}) == len(concepts)
    assert ext.extract([[]]) == [[]]
