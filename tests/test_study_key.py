"""Study names come from what a trial computes (issue 10, item 1): the loaded data's content hash,
the subset and the embedder change the name; a swept key, a cache folder or the device do not."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

import synapse_pt.commands.run  # noqa: F401  (registers ${study_key:})
from synapse_pt.commands.study_key import study_content, study_key
from synapse_pt.data import DatasetNotFoundError
from synapse_pt.data.source import sample_path

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"


def key(*overrides: str) -> str:
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("run", overrides=["hparams_search=synapse_optuna", "dataset=sample",
                                        *overrides], return_hydra_config=True)
        return study_key(_root_=cfg)


def test_study_key_hashes_the_loaded_file_not_the_dataset_name() -> None:
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("run", overrides=["hparams_search=synapse_optuna", "dataset=sample"],
                      return_hydra_config=True)
        content = study_content(cfg)
    # the parsed data as canonical JSON (sorted keys, no spaces, UTF-8), as a run's identity has it
    canonical = json.dumps(json.loads(sample_path().read_text()), sort_keys=True,
                           ensure_ascii=False, separators=(",", ":"))
    assert content["data_sha256"] == hashlib.sha256(canonical.encode()).hexdigest()
    # the swept keys are left out of what is hashed
    # (Optuna sweeps T as well since its space is SYNAPSE's one declared space; M it does not)
    params = content["memory"]["params"]
    assert "S" not in params and "T" not in params and "M" in params


def test_study_key_changes_with_subset_embedder_and_unswept_settings() -> None:
    base = key()
    assert key("dataset.max_questions=5") != base
    assert key("embedder=hashing") != base
    assert key("memory.params.M=5") != base  # not swept: another study
    assert key("memory.params.T=2") == base  # swept
    assert key("extractor=yake") != base


def test_study_key_ignores_swept_keys_caches_and_device(tmp_path: Path) -> None:
    base = key()
    assert key("memory.params.S=0.1") == base  # swept: the same study
    assert key(f"paths.cache_dir={tmp_path}") == base
    assert key("device=cuda") == base
    # the encoder's runtime changes the vectors (within 1e-6): another study
    assert key("embedder.runtime=onnx") != base


def test_study_key_of_a_missing_data_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(DatasetNotFoundError):
        key(f"dataset.path={tmp_path / 'absent.json'}")


def test_study_name_resolves_with_the_key() -> None:
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("run", overrides=["hparams_search=synapse_optuna", "dataset=sample"],
                      return_hydra_config=True)
        name = cfg.hydra.sweeper.study_name
        assert name == f"synapse_optuna_sample_recall@10.mean_q_1_4_{study_key(_root_=cfg)}"


def test_the_same_data_written_out_again_names_the_same_study(tmp_path: Path) -> None:
    """Issue 58: the key hashed the file's bytes, so the same data re-serialised (indented, keys
    in another order) started a new study instead of resuming; an edit still names another."""
    samples = json.loads(sample_path().read_text())
    compact, indented, edited = (tmp_path / f"{n}.json" for n in ("compact", "indented", "edited"))
    compact.write_text(json.dumps(samples))
    indented.write_text(json.dumps([dict(reversed(s.items())) for s in samples], indent=4))
    samples[0]["qa"] = samples[0]["qa"][:-1]
    edited.write_text(json.dumps(samples))
    assert compact.read_bytes() != indented.read_bytes()
    keys = {p.stem: key(f"dataset.path={p}", "dataset.sha256=null")
            for p in (compact, indented, edited)}
    assert keys["compact"] == keys["indented"] != keys["edited"]


def test_a_model_in_the_cache_is_the_same_study_under_another_cache(tmp_path: Path) -> None:
    """``embedder=mpnet`` reads its weights from ``${paths.cache_dir}/models/...``: another
    ``paths.cache_dir`` (``SYNAPSE_CACHE``) is the same study; another model folder is not."""
    base = key("embedder=mpnet", f"paths.cache_dir={tmp_path / 'a'}")
    assert key("embedder=mpnet", f"paths.cache_dir={tmp_path / 'b'}") == base
    assert key("embedder=mpnet", f"embedder.model={tmp_path / 'other'}") != base
