"""The text a dataset file's JSON holds: every string must be text that UTF-8 can encode.

JSON's ``\\ud800`` escape (half of a UTF-16 surrogate pair, without its other half) parses into a
Python string that no encoder, hash or tokenizer can take: the run fails later with a
``UnicodeEncodeError`` that names neither the file nor the record. :func:`require_text` finds such
a string right after the file is parsed and names the file, the record and the field
(:class:`~synapse_pt.data.errors.DataFormatError`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from .errors import DataFormatError

#: a JSON escape of a surrogate code point (a lone one only parses from such an escape: the file's
#: bytes are checked as UTF-8 when it is decoded)
SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")

#: the record of a JSON path's first part (``[3]`` -> ``sample 3 (conv-44)``) and the field
#: left (``conversation.session_2[5].text``)
RecordOf = Callable[[list[str | int]], tuple[str, list[str | int]]]


def lone_surrogate(value: Any, where: list[str | int] | None = None
                   ) -> tuple[list[str | int], int, str] | None:
    """``(JSON path, character index, the character)`` of the first string of ``value`` (a
    parsed JSON value; keys included) that UTF-8 cannot encode; ``None`` when every one can."""
    where = where or []
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as err:
            return where, err.start, value[err.start]
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            found = lone_surrogate(key, [*where, "<key>"]) or lone_surrogate(item, [*where, key])
            if found:
                return found
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found = lone_surrogate(item, [*where, i])
            if found:
                return found
    return None


def dotted(parts: list[str | int]) -> str:
    """``["conversation", "session_1", 2, "text"]`` -> ``conversation.session_1[2].text``."""
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "<top level>"


def require_text(path: str, text: str, value: Any, record_of: RecordOf | None = None) -> None:
    """A :class:`~synapse_pt.data.errors.DataFormatError` naming ``path``, the record
    (``record_of`` of the string's JSON path; else ``file``) and the field when a string of
    ``value`` (parsed from ``text``) holds a lone surrogate. Only a file whose text holds a
    surrogate escape is walked."""
    if not SURROGATE_ESCAPE.search(text):
        return
    found = lone_surrogate(value)
    if found is None:
        return
    where, index, char = found
    record, field = record_of(where) if record_of is not None else ("file", where)
    raise DataFormatError(path, record, dotted(field),
                          f"a lone surrogate {char.encode('unicode_escape').decode()} at "
                          f"character {index}: half of a UTF-16 pair escaped without its other "
                          "half, not text; fix or remove the escape")
