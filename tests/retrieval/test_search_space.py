"""SYNAPSE's search space, declared once (synapse_pt/retrieval/search_space.py, issue 60): the
batched sweep, the held-out search and Optuna search it, and a wrong entry is one line naming its
key.

The expected sweep ranges and held-out space are the literals main 492016d wrote out by hand in
eval/tuning/sweep.py and memory/synapse.py: one declaration must not move a sweep's or a held-out
search's draws."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from synapse_pt.common.errors import ConfigError
from synapse_pt.eval.tuning.grid import RANGES, draw_configs
from synapse_pt.eval.tuning.heldout import candidates, expand
from synapse_pt.memory.declare import SearchSpace
from synapse_pt.memory.synapse import PAPER_REFERENCE, SynapseMemory
from synapse_pt.retrieval.search_space import SPACE, Choice, Range, declare

OPTUNA_YAML = (Path(__file__).resolve().parents[2] / "configs" / "hparams_search"
               / "synapse_optuna.yaml")

#: eval/tuning/sweep.py's RANGES at 492016d, in its order (the order of the draws)
SWEEP_RANGES_492016D = [("S", (0.2, 1.0)), ("delta", (0.0, 1.0)), ("beta", (0.0, 0.5)),
                        ("gamma", (1.0, 10.0)), ("theta", (0.1, 0.9)), ("lambda1", (0.0, 1.0)),
                        ("lambda2", (0.0, 1.0)), ("lambda3", (0.0, 0.5)),
                        ("tau_gate", (0.0, 0.3))]
#: SynapseMemory.search_space at 492016d (memory/synapse.py), in its order
HELDOUT_DISCRETE_492016D = [
    ("readings.rank_episodic_only", (False, True)),
    ("readings.energy", ("cosine", "max", "constant")),
    ("readings.inhibition", ("every_step", "last_step")),
    ("readings.inhibition_scope", ("all", "neighbourhood")),
    ("readings.pagerank_scale", ("minmax", "max", "none")),
    ("readings.fire_zero", (False, True)), ("params.fan", (True, False)),
    ("readings.k_anchor", (5, 10, 20)), ("params.T", (1, 2, 3))]
HELDOUT_CONTINUOUS_492016D = [
    ("params.S", (0.2, 1.0)), ("params.delta", (0.0, 1.0)), ("params.beta", (0.0, 0.5)),
    ("params.gamma", (1.0, 10.0)), ("params.theta", (0.1, 0.9)), ("params.lambda1", (0.0, 1.0)),
    ("params.lambda2", (0.0, 1.0)), ("params.lambda3", (0.0, 0.5))]


def test_the_batched_sweep_draws_the_ranges_of_492016d_in_their_order():
    assert list(RANGES.items()) == SWEEP_RANGES_492016D
    # the same draws as the hand-written loop over those ranges (seed 3, 8 configurations)
    gen = torch.Generator().manual_seed(3)
    grid = draw_configs(8, 3)
    for name, (lo, hi) in SWEEP_RANGES_492016D:
        expected = lo + (hi - lo) * torch.rand(8, generator=gen)
        assert torch.equal(grid[name][1:], expected[1:]), name


def test_the_held_out_search_keeps_the_space_and_candidates_of_492016d():
    space = SynapseMemory.declared_search_space()
    assert list(space.discrete.items()) == HELDOUT_DISCRETE_492016D
    assert list(space.continuous.items()) == HELDOUT_CONTINUOUS_492016D
    old = SearchSpace(discrete=dict(HELDOUT_DISCRETE_492016D),
                      continuous=dict(HELDOUT_CONTINUOUS_492016D),
                      reference=dict(PAPER_REFERENCE), batched=True)
    now, then = expand(candidates(space, 24, 4, 0)), expand(candidates(old, 24, 4, 0))
    assert len(now) == 24 * 4 and now == then


def _optuna_distributions(params: dict[str, str]) -> dict[str, object]:
    """Each ``key: override`` as the Optuna sweeper itself reads it."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra_plugins.hydra_optuna_sweeper._impl import create_optuna_distribution_from_override

    parser = OverridesParser.create()
    return {key: create_optuna_distribution_from_override(
        parser.parse_overrides([f"{key}={value}"])[0]) for key, value in params.items()}


def test_the_optuna_search_space_is_the_declared_one():
    optuna = pytest.importorskip("optuna")
    params = yaml.safe_load(OPTUNA_YAML.read_text())["hydra"]["sweeper"]["params"]
    expected = {f"memory.{key}": (
        optuna.distributions.UniformDistribution(entry.low, entry.high)
        if isinstance(entry, Range) else optuna.distributions.CategoricalDistribution(
            entry.values)) for key, entry in SPACE.items()}
    assert _optuna_distributions(params) == expected


def test_the_declared_space_holds_every_value_the_three_searches_read():
    """Hand-counted: 9 discrete entries (the held-out grid, 2*3*2*2*3*2*2*3*3 = 2592
    combinations) and 9 continuous ones (the sweep's; the held-out search all but tau_gate)."""
    discrete = [k for k, e in SPACE.items() if isinstance(e, Choice)]
    continuous = [k for k, e in SPACE.items() if isinstance(e, Range)]
    assert len(discrete) == 9 and len(continuous) == 9
    combos = 1
    for key in discrete:
        combos *= len(SPACE[key].values)
    assert combos == 2592
    assert all(e.meaning for e in SPACE.values())


@pytest.mark.parametrize("space, message", [
    ({"params.S": Range(0.9, 0.1, "spreading factor")},
     "SYNAPSE search space: params.S: low 0.9 is above high 0.1"),
    ({"params.sigma": Range(0.0, 1.0, "no such setting")},
     "SYNAPSE search space: params.sigma: not a SYNAPSE setting"),
    ({"memory.params.S": Range(0.0, 1.0, "the node twice")},
     "SYNAPSE search space: memory.params.S: not a SYNAPSE setting"),
    ({"readings.k_anchor": Choice((), "anchors")},
     "SYNAPSE search space: readings.k_anchor: a choice of no values"),
    ({"params.T": (1, 2, 3)}, "SYNAPSE search space: params.T: a Range or a Choice, got tuple"),
    ({"params.beta": Range(0.0, 0.5, " ")}, "SYNAPSE search space: params.beta: no meaning"),
])
def test_a_wrong_declaration_is_one_line_naming_its_key(space, message):
    with pytest.raises(ConfigError) as err:
        declare(space)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)
