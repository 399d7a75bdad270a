"""Parsing LoCoMo evidence ids.

Evidence entries in the release are mostly ``"D<session>:<turn>"``, but the real file has quirks
(SPEC §3): several ids in one string (``"D8:6; D9:17"``, ``"D9:1 D4:4 D4:6"``), zero-padded turn
numbers (``"D30:05"`` means ``D30:5``), and unparseable or dangling ids (``"D"``, ``"D:11:26"``, ids
of turns that do not exist). Parsing never drops anything silently: every raw piece either becomes a
canonical id or is returned as unresolved.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_SPLIT = re.compile(r"[;,\s]+")
_DIA_ID = re.compile(r"D(\d+):(\d+)")


def canonical_dia_id(piece: str) -> str | None:
    """``"D30:05"`` -> ``"D30:5"``; ``None`` if ``piece`` is not of the form ``D<int>:<int>``."""
    m = _DIA_ID.fullmatch(piece.strip())
    if m is None:
        return None
    return f"D{int(m.group(1))}:{int(m.group(2))}"


def parse_evidence(raw: Iterable[str], known_ids: set[str]) -> tuple[list[str], list[str]]:
    """Split and canonicalise raw evidence strings.

    Returns ``(resolved, unresolved)``: ``resolved`` holds canonical ids of turns that exist in the
    conversation (order kept, duplicates removed); ``unresolved`` holds every raw piece that is not
    an id or names a turn that does not exist.
    """
    resolved: list[str] = []
    unresolved: list[str] = []
    for entry in raw:
        pieces = [p for p in _SPLIT.split(str(entry)) if p]
        if not pieces:
            unresolved.append(str(entry))
            continue
        for piece in pieces:
            dia_id = canonical_dia_id(piece)
            if dia_id is None or dia_id not in known_ids:
                unresolved.append(piece)
            elif dia_id not in resolved:
                resolved.append(dia_id)
    return resolved, unresolved
