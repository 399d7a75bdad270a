"""An empty retrieved pack under GAAMA's answer step (issue 44): its code asks no model
(``services/answer_from_memory.py``: an empty memory text returns "") and its LoCoMo evaluation
records a fallback hypothesis (``evals/locomo/locomo_eval.py``), which is then judged. The
fallback is read here from the file with a regular expression, not through the loader."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import torch
from upstream_files import ROOT, needs_upstream, template_entry

from synapse_pt.data import load_locomo, sample_path, upstream
from synapse_pt.data.schema import Dataset, Dialogue, Question
from synapse_pt.eval.qa.pipeline import EvalSettings, evaluate
from synapse_pt.memory.base import MemorySystem, RetrievalResult
from synapse_pt.models.llm.base import LLM, ChatRequest, ChatResponse
from synapse_pt.retrieval.items import EPISODIC, RetrievedItem

pytestmark = needs_upstream


def fallback() -> str:
    """The reply GAAMA's ``answer_and_judge`` records for an empty pack, as templates.json holds
    it (read with json, not the loader)."""
    return template_entry("gaama/evals/locomo/locomo_eval.py", "hypothesis",
                          "answer_and_judge")["text"]


class Packs(MemorySystem):
    """Every question gets one item, except those in ``empty``, which get none."""

    name = "packs"

    def __init__(self, empty: set[str], own_steps: tuple[str, str]) -> None:
        self.empty = empty
        self.own_steps = own_steps

    def ingest_dialogues(self, conversations: Sequence[Dialogue]) -> None:
        pass

    def retrieve(self, questions: Sequence[Question]) -> RetrievalResult:
        item = RetrievedItem("D1:1", "Nora: hello", EPISODIC, 1.0)
        rows = [[] if q.question in self.empty else [item] for q in questions]
        return RetrievalResult(rows, torch.ones(len(rows)), torch.zeros(len(rows), dtype=bool))


class Model(LLM):
    backend, model = "scripted", "scripted-answers"

    def __init__(self) -> None:
        self.requests: list[ChatRequest] = []

    def generate(self, requests: Sequence[ChatRequest]) -> list[ChatResponse]:
        self.requests.extend(requests)
        return [ChatResponse("an answer", prompt_tokens=10, completion_tokens=2, latency_s=0.0,
                             model=self.model) for _ in requests]

    def count_tokens(self, text: str) -> int:
        return len(text.split())


class Words:
    name = "words"

    def count_many(self, texts: Sequence[str]) -> list[int]:
        return [len(t.split()) for t in texts]


@pytest.fixture(autouse=True)
def _upstream_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(upstream.ENV_VAR, str(ROOT))


@pytest.fixture(scope="module")
def ds() -> Dataset:
    return load_locomo(sample_path(), name="sample")


def run(ds: Dataset, own_steps: tuple[str, str], **settings: object):
    questions = [q.question for q in ds.questions()]
    empty = {questions[0], questions[3]}
    model = Model()
    df, _ = evaluate(Packs(empty, own_steps), ds, settings=EvalSettings(mode="qa", **settings),
                     token_counter=Words(), llm=model)
    return df.set_index("question"), model, empty, len(questions)


def test_gaama_asks_nothing_about_an_empty_pack_and_records_its_fallback(ds) -> None:
    rows, model, empty, n = run(ds, ("gaama", "gaama"))
    assert len(model.requests) == n - len(empty)
    for q in empty:
        assert rows.loc[q, "prediction"] == fallback() == "(No answer generated)"
        assert rows.loc[q, "prompt_tokens"] == 0
    assert (rows.drop(index=list(empty))["prediction"] == "an answer").all()


@pytest.mark.parametrize(("own_steps", "settings"), [
    (("gaama", "gaama"), {"prompts": "ours"}),  # our wording of GAAMA's step asks
    (("shared", "mem0"), {}),  # the shared answer step asks
])
def test_every_other_answer_step_asks_the_model(ds, own_steps, settings) -> None:
    rows, model, _, n = run(ds, own_steps, **settings)
    assert len(model.requests) == n and (rows["prediction"] == "an answer").all()
