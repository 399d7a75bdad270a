"""The cache of values derived from texts: token counts, analyser tokens, sentence splits.

JSON values keyed by :func:`~synapse_pt.cache.store.content_key` (function identity, text), in
the table ``derived (key, value)``. A function's identity names it and the library versions
behind it (``"sentences/punkt/nltk=3.9.1"``), so a changed tokenizer or stemmer gets new keys and
a stale value is never served. A warm run then needs neither the libraries (nltk, scikit-learn,
transformers take seconds to import) nor the work.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from importlib.metadata import version
from typing import Any

from .store import KeyValueStore, Table, content_key

__all__ = ["DERIVED", "TextValueCache", "cached_map", "library_versions"]

DERIVED = Table("derived", "CREATE TABLE IF NOT EXISTS derived (key TEXT PRIMARY KEY, value TEXT)",
                written=("value",))


def library_versions(*packages: str) -> str:
    """``"nltk=3.9.1,scikit-learn=1.5.2"``: the installed versions, for a function's identity."""
    return ",".join(f"{p}={version(p)}" for p in packages)


class TextValueCache(KeyValueStore[Any]):
    """JSON-serialisable values of deterministic functions of a text, shared by processes (a row
    is ``(key, value)``, ``value`` the JSON text; an existing key is replaced). ``hits`` and
    ``misses`` count the distinct texts looked up by :meth:`map` in this process."""

    table = DERIVED

    def encode(self, key: str, value: Any) -> tuple[Any, ...]:
        return (json.dumps(value),)

    def decode(self, key: str, row: tuple[Any, ...]) -> Any:
        return json.loads(row[0])

    def map(self, identity: str, texts: Sequence[str],
            compute: Callable[[list[str]], Sequence[Any]]) -> list[Any]:
        """``compute(texts)`` through the cache: each distinct text is looked up once, the misses
        are computed in one call of ``compute`` (which returns one value per text, in order) and
        stored, and the values come back in the order of ``texts``."""
        unique = list(dict.fromkeys(texts))
        keys = {t: content_key(identity, t) for t in unique}
        found = self.get_many(list(keys.values()))
        missing = [t for t in unique if keys[t] not in found]
        if missing:
            values = list(compute(missing))
            if len(values) != len(missing):
                raise ValueError(f"{identity}: compute returned {len(values)} values for "
                                 f"{len(missing)} texts")
            computed = {keys[t]: v for t, v in zip(missing, values, strict=True)}
            self.put_many(computed.items())
            found.update(computed)
        return [found[keys[t]] for t in texts]


def cached_map(cache: TextValueCache | None, identity: str, texts: Sequence[str],
               compute: Callable[[list[str]], Sequence[Any]]) -> list[Any]:
    """:meth:`TextValueCache.map`, or ``compute`` on the distinct texts when ``cache`` is None."""
    if cache is not None:
        return cache.map(identity, texts, compute)
    unique = list(dict.fromkeys(texts))
    values = dict(zip(unique, compute(unique), strict=True))
    return [values[t] for t in texts]
