"""The settings groups declared with synapse_pt/common/declared.py (issue 60): the graph builder's
Consolidation and Maintenance, GAAMA's and Membox's Retrieval and Build. Each YAML default equals
its declaration value for value; a wrong value is one line naming its key, from the one generic
check; docs/settings.md has a row per setting.

The expected defaults are the dataclass defaults of main 55e8894 (before the declaration), written
out here; the expected messages are written out here too."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf
from scripts_loader import load_script  # tests/ is on sys.path (rootdir conftest)
from test_configs import make_cfg

from synapse_pt.common.declared import check_fields, setting, settings_of
from synapse_pt.common.errors import ConfigError
from synapse_pt.graph.consolidation import Consolidation, Maintenance
from synapse_pt.memory.gaama import settings as gaama
from synapse_pt.memory.membox import settings as membox

CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "memory"

#: the defaults of main 55e8894, group by group (``None``: null)
DEFAULTS_55E8894 = {
    Consolidation: {"window": 5, "tau_dup": 0.92, "rho": 0.01, "time_unit": "hours",
                    "association_weighting": "similarity"},
    Maintenance: {"max_in_edges": 15, "dormancy_eps": 0.01, "dormancy_windows": 10,
                  "max_nodes": 10_000, "collect_to": 0.95, "pagerank_damping": 0.85},
    gaama.Retrieval: {"seeds": 40, "depth": 2, "alpha": 0.6, "max_iter": 100, "tol": 1e-6,
                      "edge_weight": 0.8, "reflection_edge_weight": 0.5, "hub_dampening": "code",
                      "hub_degree": 50, "cosine_weight": 1.0, "ppr_weight": 0.1,
                      "graph_only_cosine": "zero", "knn": None, "nearest": "store",
                      "max_facts": 60, "max_reflections": 20, "max_skills": 5,
                      "max_episodes": 80, "max_words": 1000},
    gaama.Build: {"concepts_per_episode": 3, "chunk_tokens": 500, "context_cosine": 0.75,
                  "reflections_per_group": 3, "prompts": "upstream", "upstream_path": None,
                  "max_tokens": None, "replies": None, "temperature": None, "seed": None,
                  "budget_param": "max_completion_tokens"},
    membox.Retrieval: {"mode": "trace", "k": 5},
    membox.Build: {"boundary_threshold": 0.4, "trace_threshold": 0.5, "min_keywords": 3,
                   "max_keywords": 8, "min_event_words": 4, "max_tokens": None,
                   "loom_max_tokens": None, "prompts": "upstream", "upstream_path": None,
                   "verify_parse": "strict", "box_parse": None, "chain_parse": None,
                   "temperature": 0.0, "seed": None, "budget_param": None},
}

#: the YAML keys beside the declared settings, and why they are none: Hydra's own (``defaults``,
#: ``_target_``), the memory's constructor arguments shared by every memory (``device``,
#: ``turn_template``, ``tau_gate``, the ``gate`` the defaults list composes) and its optional
#: fused ranking (a mapping of FusedMemory arguments, null by default)
NOT_SETTINGS = {
    "gaama.yaml": {"defaults", "_target_", "device", "turn_template", "tau_gate", "gate",
                   "fused_seeds"},
    "membox.yaml": {"defaults", "_target_", "device", "turn_template", "tau_gate", "gate",
                    "fused_ranking"},
}
#: where each group's defaults are set: (config file, node; None: the file's top level)
WHERE = {Consolidation: ("synapse", "graph"), Maintenance: ("synapse", "graph"),
         gaama.Retrieval: ("gaama", None), gaama.Build: ("gaama", None),
         membox.Retrieval: ("membox", None), membox.Build: ("membox", None)}


def _same(a: object, b: object) -> bool:
    """Equal and of the same type (5.0 stays a float, 7 an int)."""
    return type(a) is type(b) and (a == b or (isinstance(a, float) and math.isclose(a, b)))


@pytest.mark.parametrize("group", list(DEFAULTS_55E8894), ids=lambda g: g.__module__ + g.__name__)
def test_the_declared_defaults_are_those_before_the_declaration(group):
    declared = {name: s.default for name, s in settings_of(group).items()}
    assert declared == DEFAULTS_55E8894[group]
    assert all(s.meaning.strip() for s in settings_of(group).values())
    instance = group()
    assert {n: getattr(instance, n) for n in declared} == DEFAULTS_55E8894[group]


@pytest.mark.parametrize("memory", ["synapse", "gaama", "membox"])
def test_each_yaml_default_is_the_declared_one_value_for_value(memory):
    """The composed config (interpolations resolved: ``prompts: ${eval.prompts}`` and
    ``upstream_path: ${eval.upstream_path}`` take eval's defaults) sets every declared setting
    to its declared default, of the same type; the YAML's other keys are exactly
    :data:`NOT_SETTINGS`."""
    cfg = OmegaConf.to_container(make_cfg(f"memory={memory}").memory, resolve=True)
    groups = [g for g, (file, _) in WHERE.items() if file == memory]
    node = WHERE[groups[0]][1]
    values = cfg[node] if node else cfg
    names = [n for g in groups for n in settings_of(g)]
    for g in groups:
        for name, s in settings_of(g).items():
            assert name in values and _same(values[name], s.default), (memory, name)
    # the raw file too: the same keys, each a plain value or an interpolation of eval's
    raw = yaml.safe_load((CONFIGS / f"{memory}.yaml").read_text())
    raw = raw[node] if node else raw
    if node is None:  # composing takes ``defaults`` away and puts ``gate`` in
        assert set(values) - set(names) == NOT_SETTINGS[f"{memory}.yaml"] - {"defaults"}
        assert set(raw) - set(names) == NOT_SETTINGS[f"{memory}.yaml"] - {"gate"}
    else:
        assert set(values) == set(raw) == set(names)
    for name in names:
        assert _same(raw[name], values[name]) or raw[name] in (
            "${eval.prompts}", "${eval.upstream_path}"), name


@pytest.mark.parametrize("group, values, message", [
    (Consolidation, {"window": 0}, "memory.graph.window must be an integer >= 1, got 0"),
    (Consolidation, {"tau_dup": 1.5}, "memory.graph.tau_dup must be [-1, 1], got 1.5"),
    (Consolidation, {"time_unit": "fortnights"},
     "memory.graph.time_unit must be one of ['seconds', 'minutes', 'hours', 'days', 'weeks'], "
     "got 'fortnights'"),
    (Maintenance, {"collect_to": 0.0}, "memory.graph.collect_to must be (0, 1], got 0.0"),
    (Maintenance, {"pagerank_damping": 1.0},
     "memory.graph.pagerank_damping must be (0, 1), got 1.0"),
    (Maintenance, {"max_nodes": 0}, "memory.graph.max_nodes must be an integer >= 1, got 0"),
    (Maintenance, {"dormancy_eps": "small"},
     "memory.graph.dormancy_eps must be a number, got 'small'"),
    (gaama.Retrieval, {"knn": 0}, "memory.knn must be an integer >= 1, got 0"),
    (gaama.Retrieval, {"alpha": float("nan")}, "memory.alpha must be finite, got nan"),
    (gaama.Build, {"replies": "lenient"},
     "memory.replies must be one of ['code', 'repair'], got 'lenient'"),
    (gaama.Build, {"temperature": "hot"}, "memory.temperature must be a number or null, got 'hot'"),
    (gaama.Build, {"upstream_path": 3}, "memory.upstream_path must be a text, got 3"),
    (membox.Retrieval, {"mode": "traces"},
     "memory.mode must be one of ['compact', 'trace'], got 'traces'"),
    (membox.Build, {"seed": -1}, "memory.seed must be an integer >= 0, got -1"),
    (membox.Build, {"temperature": True}, "memory.temperature must be a number or null, got True"),
])
def test_a_wrong_value_is_one_line_naming_its_key(group, values, message):
    with pytest.raises(ConfigError) as err:
        group(**values)
    assert str(err.value) == message


def test_null_where_declared_and_numbers_made_floats():
    assert Maintenance(max_nodes=None, max_in_edges=None).max_nodes is None
    assert gaama.Build(temperature=1).temperature == 1.0
    assert type(gaama.Build(temperature=1).temperature) is float
    assert type(Consolidation(rho=0).rho) is float
    with pytest.raises(ConfigError, match=r"^memory\.graph\.window must be an integer >= 1, "
                                          r"got None$"):
        Consolidation(window=None)
    # the rules between settings stay the groups' own
    with pytest.raises(ValueError, match=r"need 1 <= min <= max, got 5, 4"):
        membox.Build(min_keywords=5, max_keywords=4)


def test_a_declaration_that_breaks_its_own_rules_is_refused():
    @dataclass(frozen=True)
    class Bad:
        x: int = setting("", 0, "a count", low=1)

        def __post_init__(self) -> None:
            check_fields(self)

    with pytest.raises(ConfigError, match=r"^memory\.x must be an integer >= 1, got 0$"):
        settings_of(Bad)


def test_the_settings_table_has_a_row_per_setting_of_every_group():
    doc = load_script("settings_doc")
    assert doc.stale() == []
    table = doc.doc_text()
    for group in DEFAULTS_55E8894:
        for s in settings_of(group).values():
            assert f"| `{s.config_key}` | " in table and s.meaning.replace("|", "\\|") in table
