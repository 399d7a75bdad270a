"""synapse_pt.common.groups.split_settings: flat keys into frozen settings groups (issue 60)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from synapse_pt.common.groups import split_settings


@dataclass(frozen=True)
class Near:
    k: int = 10
    mode: str = "a"

    def __post_init__(self) -> None:
        if self.k < 1:
            raise ValueError(f"k must be >= 1, got {self.k}")


@dataclass(frozen=True)
class Far:
    window: int = 4


def test_flat_keys_land_in_their_groups_over_what_was_given() -> None:
    near, far = split_settings("Owner", ((Near, Near(k=3, mode="b")), (Far, None)),
                               {"k": 5, "window": 8})
    assert near == Near(k=5, mode="b") and far == Far(window=8)  # given mode kept, k replaced
    assert split_settings("Owner", ((Near, None), (Far, None)), {}) == [Near(), Far()]


def test_a_key_of_no_group_is_named_and_a_group_checks_again() -> None:
    with pytest.raises(TypeError, match=r"^Owner: unknown settings \['windw'\] \(known: "
                                        r"\['k', 'mode', 'window'\]\)$"):
        split_settings("Owner", ((Near, None), (Far, None)), {"windw": 3})
    with pytest.raises(ValueError, match="k must be >= 1, got 0"):
        split_settings("Owner", ((Near, Near()), (Far, None)), {"k": 0})
