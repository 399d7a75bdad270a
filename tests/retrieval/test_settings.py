"""SYNAPSE's settings, each declared once (synapse_pt/retrieval/settings.py, issue 60): the YAML
defaults and docs/settings.md are what the declaration writes, and a wrong value is one line
naming its key, from one generic check.

The expected fields, their order and nodes are those main 008cd2c wrote by hand
(``PAPER_FIELDS`` and ``READING_FIELDS`` in retrieval/spreading.py); the expected messages are
written out here."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from scripts_loader import load_script  # tests/ is on sys.path (rootdir conftest)
from test_configs import make_cfg

from synapse_pt.commands.run import run
from synapse_pt.common.errors import ConfigError
from synapse_pt.retrieval.search_space import ORDER, Range, declare, searched
from synapse_pt.retrieval.settings import (
    PAPER_FIELDS,
    READING_FIELDS,
    SETTINGS,
    STORAGE,
    SynapseParams,
)

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "memory" / "synapse.yaml"
#: retrieval/spreading.py at 008cd2c
PAPER_FIELDS_008CD2C = ("S", "delta", "beta", "M", "gamma", "theta", "T", "fan", "lambda1",
                        "lambda2", "lambda3", "tau_gate", "k", "bm25_trigger")
READING_FIELDS_008CD2C = ("k_anchor", "fire_zero", "energy", "c_ret_source", "inhibition",
                          "inhibition_scope", "pagerank_scale", "rank_episodic_only",
                          "k_concepts")


def test_every_field_of_synapse_params_is_declared_in_its_node():
    assert (PAPER_FIELDS, READING_FIELDS) == (PAPER_FIELDS_008CD2C, READING_FIELDS_008CD2C)
    assert list(SynapseParams.__dataclass_fields__) == [*PAPER_FIELDS, *READING_FIELDS]
    assert all(s.meaning.strip() and s.kind for s in SETTINGS.values())


def test_the_yaml_defaults_are_the_declared_ones_value_for_value():
    """Every key of the two nodes, in order, each the declared default of the same type (5.0
    stays a float, 7 an int, true a bool)."""
    config = yaml.safe_load(CONFIG.read_text())
    for node in ("params", "readings"):
        declared = [(n, s.default, type(s.default)) for n, s in SETTINGS.items() if s.node == node]
        assert [(k, v, type(v)) for k, v in config[node].items()] == declared, node
    assert {k: config["engine"][k] for k in STORAGE} == STORAGE


def test_the_yaml_block_and_the_settings_table_are_current():
    """``scripts/settings_doc.py`` writes them from the declaration; rerun it after an edit."""
    doc = load_script("settings_doc")
    assert doc.stale() == []
    # a default edited by hand in the YAML is stale, and the script writes it back
    current = CONFIG.read_text()
    edited = current.replace("\n  S: 0.8 ", "\n  S: 0.9 ")
    assert edited != current and doc.config_text(edited) == current
    # every setting has its row, its meaning with the table's pipes escaped
    table = doc.doc_text()
    for s in SETTINGS.values():
        assert f"| `memory.{s.key}` |" in table and s.meaning.replace("|", "\\|") in table


@pytest.mark.parametrize("field, value, message", [
    ("beta", -1, "memory.params.beta must be >= 0, got -1"),
    ("delta", 1.2, "memory.params.delta must be [0, 1], got 1.2"),
    ("beta", "abc", "memory.params.beta must be a number, got 'abc'"),
    ("theta", float("nan"), "memory.params.theta must be finite, got nan"),
    ("beta", torch.tensor([0.1, -0.2]),
     "memory.params.beta must be >= 0, got values in [-0.2, 0.1]"),
    ("k", 2.5, "memory.params.k must be an integer >= 1, got 2.5"),
    ("k", True, "memory.params.k must be an integer >= 1, got True"),
    ("k_concepts", -1, "memory.readings.k_concepts must be an integer >= 0, got -1"),
    ("energy", "sum",
     "memory.readings.energy must be one of ['cosine', 'max', 'constant'], got 'sum'"),
    ("pagerank_scale", None,
     "memory.readings.pagerank_scale must be one of ['minmax', 'max', 'none'], got None"),
    ("fan", "yes", "memory.params.fan must be true or false, got 'yes'"),
    ("rank_episodic_only", 1, "memory.readings.rank_episodic_only must be true or false, got 1"),
])
def test_a_wrong_value_is_one_line_naming_its_key(field, value, message):
    with pytest.raises(ConfigError) as err:
        SynapseParams(**{field: value})
    assert str(err.value) == message


def test_the_rules_between_settings():
    with pytest.raises(ConfigError, match=r"^memory\.params\.tau_gate must be \[0, 1\], got 1.5$"):
        SynapseParams(tau_gate=1.5)
    assert SynapseParams(c_ret_source="potential", tau_gate=1.5).tau_gate == 1.5
    # a wrong reading is named before the bound it would set
    with pytest.raises(ConfigError, match=r"^memory\.readings\.c_ret_source must be one of"):
        SynapseParams(c_ret_source="potentials", tau_gate=1.5)
    with pytest.raises(ConfigError, match="needs memory.readings.rank_episodic_only=true"):
        SynapseParams(k_concepts=2)


def test_a_search_entry_outside_what_the_setting_allows_is_refused():
    with pytest.raises(ConfigError) as err:
        declare({"params.delta": Range(0.0, 1.5, "decay")})
    assert str(err.value) == ("SYNAPSE search space: params.delta: memory.params.delta must be "
                              "[0, 1], got 1.5")
    with pytest.raises(ConfigError, match=r"^SYNAPSE search space: the order .* must name each "
                                          r"searched setting once"):
        searched(ORDER[:-1])


def test_a_wrong_flag_stops_the_run_before_it_writes(tmp_path: Path):
    """``memory.params.fan=maybe``: before, any string was taken as true (no check); now the run
    stops with one line naming the key and its run folder holds no outputs."""
    folder = tmp_path / "run"
    cfg = make_cfg("dataset=sample", "embedder=hashing", "smoke=true", "logger=none",
                   "device=cpu", "memory.params.fan=maybe", f"paths.cache_dir={tmp_path / 'c'}",
                   output_dir=str(folder))
    with pytest.raises(ConfigError) as err:
        run(cfg)
    assert str(err.value) == "memory.params.fan must be true or false, got 'maybe'"
    assert not any(folder.glob("*.parquet")) and not (folder / "metrics.json").exists()
