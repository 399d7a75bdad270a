"""Frozen settings groups from a constructor's flat keys (issue 60).

A system whose config lists its settings flat (``memory.k``, ``memory.graph.window``) takes them
in frozen groups (GAAMA's and Membox's ``Retrieval`` and ``Build``, the graph builder's
``Consolidation`` and ``Maintenance``): :func:`split_settings` sorts the flat keys into the groups,
each over the group an caller passed whole, and refuses a key of no group by name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import fields, replace
from typing import Any


def split_settings(owner: str, groups: Sequence[tuple[type, Any]],
                   flat: Mapping[str, Any]) -> list[Any]:
    """``[group(...), ...]``: for each ``(group class, given instance or None)`` of ``groups``,
    the flat keys of ``flat`` that are its fields, over ``given`` when there is one (a frozen
    dataclass: its checks run again); a key of no group is a :class:`TypeError` naming ``owner``,
    the key and the known ones."""
    names = [{f.name for f in fields(group)} for group, _ in groups]
    known = set().union(*names)
    unknown = sorted(set(flat) - known)
    if unknown:
        raise TypeError(f"{owner}: unknown settings {unknown} (known: {sorted(known)})")
    out = []
    for (group, given), own in zip(groups, names, strict=True):
        new = {k: v for k, v in flat.items() if k in own}
        out.append(group(**new) if given is None else replace(given, **new))
    return out
