"""Categories outside the run's category names or its scorer are refused at load (issue 31,
defect 2), naming the file, the question and the field, for LoCoMo, REALTALK and BEAM."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from benchmark_fixtures import beam_fixture, realtalk_fixture
from test_configs import make_cfg  # tests/ is on sys.path (rootdir conftest)

from synapse_pt.commands.run import run
from synapse_pt.data import DataFormatError, sample_path
from synapse_pt.data.resolve import build_dataset


@pytest.fixture
def with_category_7(tmp_path: Path) -> Path:
    """The shipped sample with its question 2 relabelled category 7."""
    samples = json.loads(sample_path().read_text())
    samples = copy.deepcopy(samples)
    samples[0]["qa"][2]["category"] = 7
    path = tmp_path / "cat7.json"
    path.write_text(json.dumps(samples))
    return path


def sample_question(i: int) -> tuple[str, str]:
    sample = json.loads(sample_path().read_text())[0]
    return sample["sample_id"], sample["qa"][i]["question"]


def test_an_unknown_category_names_file_question_and_field(with_category_7: Path) -> None:
    sid, question = sample_question(2)
    with pytest.raises(DataFormatError) as err:
        build_dataset({"name": "locomo10", "path": str(with_category_7), "categories": "official"})
    text = question if len(question) <= 60 else question[:57] + "..."
    assert str(err.value) == (
        f"{with_category_7}: conversation {sid}, question 2 ({text!r}): qa[2].category: "
        "category 7 is not in dataset.categories {1: 'multi-hop', 2: 'temporal', "
        "3: 'open-domain', 4: 'single-hop', 5: 'adversarial'}")


def test_a_mapping_naming_the_category_does_not_make_it_scorable(with_category_7: Path) -> None:
    names = {1: "a", 2: "b", 3: "c", 4: "d", 5: "e", 7: "seven"}
    with pytest.raises(DataFormatError, match=r"qa\[2\]\.category: category 7 is not one the "
                                              r"locomo10 scorer handles \(\[1, 2, 3, 4, 5\]\)"):
        build_dataset({"name": "locomo10", "path": str(with_category_7), "categories": names})


def test_a_mapping_missing_a_category_of_the_data_is_refused() -> None:
    cats = {q["category"] for q in json.loads(sample_path().read_text())[0]["qa"]}
    assert 4 in cats  # the sample asks single-hop questions
    with pytest.raises(DataFormatError, match=r"category 4 is not in dataset.categories"):
        build_dataset({"name": "sample", "path": "sample",
                       "categories": {1: "a", 2: "b", 3: "c", 5: "e"}})


def test_a_run_stops_at_load_before_any_work(tmp_path: Path, with_category_7: Path) -> None:
    cfg = make_cfg("dataset=locomo10", f"dataset.path={with_category_7}", "dataset.sha256=null",
                   "embedder=hashing",
                   "logger=none", "device=cpu", "memory=bm25",
                   f"paths.cache_dir={tmp_path / 'cache'}", output_dir=str(tmp_path / "run"))
    with pytest.raises(DataFormatError, match=r"qa\[2\]\.category: category 7"):
        run(cfg)
    assert not (tmp_path / "run" / "metrics.json").exists()
    assert not (tmp_path / "cache" / "embeddings.sqlite").exists()  # nothing was embedded


def test_realtalk_with_a_mapping_that_lacks_its_category_3(tmp_path: Path) -> None:
    realtalk_fixture(tmp_path)  # writes the conversation file into tmp_path
    cfg = {"name": "realtalk", "format": "realtalk", "path": str(tmp_path)}
    assert build_dataset(cfg).num_questions == 3  # its own preset: accepted
    with pytest.raises(DataFormatError, match=r"qa\[2\]\.category: category 3 is not in "
                                              r"dataset.categories \{1: 'a', 2: 'b'\}"):
        build_dataset({**cfg, "categories": {1: "a", 2: "b"}})


def test_beam_under_locomo_category_names_is_refused(tmp_path: Path) -> None:
    folder = beam_fixture(tmp_path)
    cfg = {"name": "beam_100k", "format": "beam", "path": str(folder)}
    built = build_dataset({**cfg, "categories": "beam"})
    assert max(q.category for q in built.questions()) > 5  # abilities past LoCoMo's 1-5
    with pytest.raises(DataFormatError, match=r"\.category: category (6|7|8|9|10) is not in "
                                              r"dataset.categories \{1: 'multi-hop'"):
        build_dataset({**cfg, "categories": "official"})
