"""Each memory declares what the commands need from it (synapse_pt/memory/declare.py): its cost
model for the estimate, its search space for held-out search. A memory that declares neither is
refused with an error naming it; every memory of the comparison runs through held-out search."""

from __future__ import annotations

import json
import sys

import pandas as pd
import pytest
from hydra.utils import get_class
from omegaconf import OmegaConf
from scripts_loader import load_script  # tests/ is on sys.path (rootdir conftest)
from test_configs import make_cfg  # tests/ is on sys.path (rootdir conftest)
from two_conversations import COPY_ID, write_two_conversations

from synapse_pt.commands.estimate import estimate
from synapse_pt.commands.run import run
from synapse_pt.eval.tuning.heldout import candidates, expand, retrieval_settings_of
from synapse_pt.memory.base import MemorySystem
from synapse_pt.memory.declare import CostModel, SearchSpace, TurnContext

#: the memories of the comparison (configs/memory/), each with its own declarations
MEMORIES = ("synapse", "fused", "gaama", "membox", "bm25", "vector_rag", "hybrid",
            "full_context")
FAST = ("dataset=sample", "embedder=hashing", "device=cpu", "logger=none")

UNDECLARED = '''
from synapse_pt.memory.baselines import TurnMemory


class UndeclaredMemory(TurnMemory):
    """A turn memory that declares neither a cost model nor a search space."""

    name = "undeclared"

    def score(self, questions, mask, query_graph):
        return self._dense(questions)
'''


def tune_heldout():
    return load_script("tune_heldout")


@pytest.fixture
def undeclared(tmp_path, monkeypatch) -> str:
    """The import path of a memory class that declares nothing."""
    (tmp_path / "undeclared_memory.py").write_text(UNDECLARED)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("undeclared_memory", None)
    return "undeclared_memory.UndeclaredMemory"


@pytest.mark.parametrize("memory", MEMORIES)
def test_every_memory_declares_a_cost_model_and_a_search_space_its_checks_accept(memory):
    cfg = make_cfg(f"memory={memory}")
    cls = get_class(cfg.memory._target_)
    assert isinstance(cls.declared_cost_model(), CostModel)
    space = cls.declared_search_space()
    assert space.fields() <= set(cls.retrieval_fields)
    # every candidate value, and the reference, passes the memory's own checks
    for key, values in space.discrete.items():
        for value in (*values, space.reference[key]):
            if key in cls.int_minimums:
                assert value >= cls.int_minimums[key], (key, value)
            if key in cls.choices:
                assert value in cls.choices[key], (key, value)
    for key, (lo, hi) in space.continuous.items():
        assert lo <= space.reference[key] <= hi, key
    # every key lands in the config node configure_retrieval takes
    settings = retrieval_settings_of(OmegaConf.to_container(cfg.memory, resolve=True),
                                     space.reference, space)
    assert set(settings) == space.fields()


def test_the_estimate_refuses_a_memory_without_a_cost_model(undeclared):
    # before the declarations, an unknown class silently got Membox's "k boxes" estimate
    cfg = make_cfg(*FAST, "memory=bm25", f"memory._target_={undeclared}", "llm=openai",
                   "eval=qa")
    with pytest.raises(NotImplementedError,
                       match=r"undeclared_memory\.UndeclaredMemory declares no cost model"):
        estimate(cfg)


def test_held_out_search_refuses_a_memory_without_a_search_space(undeclared, tmp_path):
    with pytest.raises(NotImplementedError,
                       match=r"undeclared_memory\.UndeclaredMemory declares no search space"):
        tune_heldout().main(["--out", str(tmp_path / "out"), "--", *FAST, "memory=bm25",
                             f"memory._target_={undeclared}"])
    assert not (tmp_path / "out").exists()  # refused before anything was built


def test_a_search_key_outside_the_retrieval_fields_is_refused():
    class Wrong(MemorySystem):
        retrieval_fields = ("k",)
        search_space = SearchSpace(discrete={"window": (1, 2)}, reference={"window": 1})

        def ingest_dialogues(self, dialogues):  # pragma: no cover - never built
            raise AssertionError

        def retrieve(self, questions):  # pragma: no cover - never built
            raise AssertionError

    with pytest.raises(ValueError, match=r"Wrong.search_space varies \['window'\], which are "
                                         r"not retrieval fields"):
        Wrong.declared_search_space()


def test_the_estimate_follows_the_declared_rule_not_the_class(undeclared, monkeypatch):
    """A class declaring the turn rule is estimated as BM25 with the same k is (same rule, same
    context bound), whatever its name."""
    from undeclared_memory import UndeclaredMemory

    monkeypatch.setattr(UndeclaredMemory, "cost_model", CostModel(TurnContext("k")),
                        raising=False)
    common = (*FAST, "llm=openai", "eval=qa", "memory.k=7")
    mine, _ = estimate(make_cfg(*common, "memory=vector_rag", f"memory._target_={undeclared}"))
    bm25, _ = estimate(make_cfg(*common, "memory=bm25"))
    assert mine.loc["answers", "prompt_tokens"] == bm25.loc["answers", "prompt_tokens"]
    assert "k=7 longest turns" in mine.loc["answers", "basis"]


def test_candidates_start_with_the_run_values_and_cover_the_space():
    space = SearchSpace(discrete={"a": (1, 2, 3), "b": ("x", "y")}, continuous={"r": (0.0, 0.5)},
                        reference={"a": 2, "b": "y", "r": 0.25})
    cands = candidates(space, 4, 3, seed=0)
    assert cands[0][0] == {"a": 2, "b": "y"} and float(cands[0][1]["r"][0]) == 0.25
    assert len({tuple(d.values()) for d, _ in cands}) == 4  # distinct combinations
    flat = expand(cands)
    assert len(flat) == 12 and all(0.0 <= c["r"] <= 0.5 for c in flat)
    assert candidates(space, 4, 3, seed=0)[2][0] == cands[2][0]
    # no continuous settings: one configuration per combination; an empty space: the run's own
    one = SearchSpace(discrete={"a": (1, 2)}, reference={"a": 1})
    assert len(expand(candidates(one, 5, 9, 0))) == 2
    assert expand(candidates(SearchSpace(), 5, 9, 0)) == [{}]
    with pytest.raises(ValueError, match=r"reference must give every key a value; missing \['a'\]"):
        SearchSpace(discrete={"a": (1, 2)})


@pytest.mark.parametrize("memory", MEMORIES)
def test_held_out_search_runs_for_every_memory(memory, tmp_path):
    """Chosen on one conversation, read on the other, the reference configuration leading the
    candidates; a run of the configuration fold 0 chose, on fold 0's conversation, scores each
    question as the search did (the search's recall is the run's)."""
    data = write_two_conversations(tmp_path)
    out = tmp_path / "out"
    assert tune_heldout().main([
        "--out", str(out), "--folds", "kfold2", "--combinations", "3", "--per-combination", "2",
        "--chunk", "8", "--", *FAST, f"dataset.path={data}", f"memory={memory}",
        f"paths.cache_dir={tmp_path / 'cache'}"]) == 0
    meta = json.loads((out / "folds.json").read_text())
    cfg = make_cfg(f"memory={memory}")
    space = get_class(cfg.memory._target_).declared_search_space()
    (scheme,) = meta["schemes"]
    assert [r["test"] for r in scheme["records"]] == [["sample-1"], [COPY_ID]]
    for record in scheme["records"]:
        assert set(record["config"]) == set(space.keys)
    per_q = pd.read_parquet(out / "per_question_kfold2.parquet")
    assert len(per_q) == 28 and per_q["c_ret"].notna().all()
    chosen = scheme["records"][0]["config"]
    overrides = [f"memory.{k}={str(v).lower() if isinstance(v, bool) else v}"
                 for k, v in chosen.items()]
    run(make_cfg(*FAST, f"dataset.path={data}", "dataset.sample_ids=[sample-1]",
                 f"memory={memory}", *overrides, f"paths.cache_dir={tmp_path / 'cache'}",
                 output_dir=str(tmp_path / "check")))
    ran = pd.read_parquet(tmp_path / "check" / "predictions.parquet")["recall@10"]
    held = per_q[per_q["sample_id"] == "sample-1"]["recall@10"]
    pd.testing.assert_series_equal(held.reset_index(drop=True).astype(float),
                                   ran.reset_index(drop=True).astype(float), check_names=False)
    cand = pd.read_parquet(out / "candidates.parquet")
    first = cand.iloc[0]
    assert all(first[k] == pytest.approx(v) if isinstance(v, float) else first[k] == v
               for k, v in space.reference.items())
    assert (out / "heldout.md").read_text().startswith("# held-out ")
