"""The one cache mechanism: a content-addressed key -> value store in one SQLite table.

A key is the sha256 of what the value was computed from (:func:`content_key`, or the canonical
request of an LLM response); each table holds ``key TEXT PRIMARY KEY`` and a few value columns
(:class:`Table`). :class:`KeyValueStore` reads and writes them for every cache alike: a file in
WAL mode opened safely by several processes at once and reopened in a forked child
(:func:`~synapse_pt.cache.sqlite.open_wal`), :meth:`~KeyValueStore.get_many` in chunks of
``SELECT ... IN (...)``, :meth:`~KeyValueStore.put_many` in one transaction, a corrupt file named
with its remedy and what deleting it loses. A cache is a subclass that says how its values are
written to the row and read back (:meth:`~KeyValueStore.encode`, :meth:`~KeyValueStore.decode`):
vectors (:mod:`~synapse_pt.cache.vectors`), values of texts (:mod:`~synapse_pt.cache.texts`),
LLM responses (:mod:`synapse_pt.models.llm.cache`).
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

from .sqlite import REBUILT, open_wal

V = TypeVar("V")

#: keys per ``SELECT ... WHERE key IN (...)``: well under SQLite's variable limit
CHUNK = 500


def content_key(identity: str, text: str) -> str:
    """sha256 of ``identity`` (a model's or function's) and the text, separated by a NUL byte
    (neither contains one in practice; the separator keeps ``("ab", "c")`` and ``("a", "bc")``
    apart)."""
    return hashlib.sha256(f"{identity}\x00{text}".encode()).hexdigest()


@dataclass(frozen=True)
class Table:
    """One cache table: ``key TEXT PRIMARY KEY`` and its value columns.

    Attributes:
        name: the table's name.
        schema: its ``CREATE TABLE IF NOT EXISTS`` statement (a file made by an earlier version
            keeps its table as it is).
        written: the value columns a row is written with, in order (after ``key``).
        read: the value columns :meth:`KeyValueStore.get_many` reads back (default: ``written``).
        keep_first: an existing key keeps its row (``INSERT OR IGNORE``); else it is replaced.
    """

    name: str
    schema: str
    written: tuple[str, ...]
    read: tuple[str, ...] = ()
    keep_first: bool = False

    @property
    def read_columns(self) -> tuple[str, ...]:
        return self.read or self.written

    def insert(self, verb: str) -> str:
        """``INSERT [OR ...] INTO name (key, written...) VALUES (?, ...)``."""
        columns = ("key", *self.written)
        return (f"{verb} INTO {self.name} ({', '.join(columns)}) "
                f"VALUES ({', '.join('?' * len(columns))})")


class KeyValueStore(Generic[V]):
    """Values by key in one :class:`Table` of a SQLite file, shared by threads and processes.

    A subclass names its :attr:`table`, what a corrupt file loses (:attr:`lost`), and its codec:
    :meth:`encode` (a value -> the row's ``written`` columns) and :meth:`decode` (the ``read``
    columns -> a value; it raises for a row that cannot be one, naming the file and key).

    Args:
        path: the SQLite file (its folder is created).

    Attributes:
        hits, misses: distinct keys found and not found by :meth:`get_many` in this process.
        seen: ``None``, or a set that collects every key looked up or stored (set it to ``set()``
            to record what a run uses, then :meth:`export` those rows).
    """

    table: ClassVar[Table]
    lost: ClassVar[str] = REBUILT

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.hits = 0
        self.misses = 0
        self.seen: set[str] | None = None
        self._lock = threading.Lock()
        self._pid = -1
        self._conn: sqlite3.Connection | None = None
        self._connect()  # a corrupt or locked file is named at once

    def encode(self, key: str, value: V) -> tuple[Any, ...]:
        """The row's ``written`` columns for ``value`` (raises for a value it cannot store)."""
        raise NotImplementedError(f"{type(self).__name__} stores no values by put_many")

    def decode(self, key: str, row: tuple[Any, ...]) -> V:
        """The value of ``key`` from its row's ``read`` columns (raises for a row that cannot be
        one, naming the file and the key)."""
        raise NotImplementedError(f"{type(self).__name__} reads no values")

    def _connect(self) -> sqlite3.Connection:
        # a connection must not cross a fork: a child process opens its own
        if self._conn is None or self._pid != os.getpid():
            self._conn = open_wal(self.path, self.table.schema, lost=self.lost)
            self._pid = os.getpid()
        return self._conn

    def _select(self, columns: Sequence[str], keys: list[str]) -> list[tuple[Any, ...]]:
        """``(key, *columns)`` of the rows among ``keys`` (distinct), in chunks; under the lock."""
        conn = self._connect()
        rows: list[tuple[Any, ...]] = []
        for start in range(0, len(keys), CHUNK):
            chunk = keys[start:start + CHUNK]
            rows += conn.execute(
                f"SELECT key, {', '.join(columns)} FROM {self.table.name} "
                f"WHERE key IN ({','.join('?' * len(chunk))})", chunk).fetchall()
        return rows

    def get_many(self, keys: Sequence[str]) -> dict[str, V]:
        """The stored values among ``keys``, decoded; absent keys are left out."""
        wanted = list(dict.fromkeys(keys))
        if self.seen is not None:
            self.seen.update(wanted)
        with self._lock:
            found = {row[0]: self.decode(row[0], tuple(row[1:]))
                     for row in self._select(self.table.read_columns, wanted)}
            self.hits += len(found)
            self.misses += len(wanted) - len(found)
        return found

    def put_many(self, items: Iterable[tuple[str, V]]) -> None:
        """Store ``(key, value)`` pairs in one transaction (every value is encoded first, so a
        value that cannot be stored writes nothing)."""
        self.put_rows([(key, *self.encode(key, value)) for key, value in items])

    def put_rows(self, rows: Sequence[tuple[Any, ...]]) -> None:
        """Store encoded rows ``(key, *written)`` in one transaction: an existing key is replaced,
        or keeps its row where the table says ``keep_first``."""
        if self.seen is not None:
            self.seen.update(row[0] for row in rows)
        verb = "INSERT OR IGNORE" if self.table.keep_first else "INSERT OR REPLACE"
        with self._lock:
            conn = self._connect()
            conn.executemany(self.table.insert(verb), rows)
            conn.commit()

    def export(self, keys: Iterable[str], path: str | Path) -> int:
        """Copy the rows of ``keys`` into a new file of this cache at ``path`` (which must not
        exist); returns the rows written. A key this cache does not hold is an error."""
        path = Path(path)
        if path.exists():
            raise FileExistsError(f"{path}: exists; export writes a new cache file")
        keys = sorted(set(keys))
        with self._lock:
            rows = self._select(self.table.written, keys)
        if len(rows) != len(keys):
            missing = sorted(set(keys) - {r[0] for r in rows})
            raise KeyError(f"{self.path}: {len(missing)} of {len(keys)} keys to export are not "
                           f"cached (first: {missing[:3]})")
        target = type(self)(path)
        with target._lock:
            conn = target._connect()
            conn.executemany(self.table.insert("INSERT"), rows)
            conn.commit()
        target.close()
        return len(rows)

    def __len__(self) -> int:
        with self._lock:
            conn = self._connect()
            return int(conn.execute(f"SELECT COUNT(*) FROM {self.table.name}").fetchone()[0])

    def close(self) -> None:
        """Close this process's connection (one inherited across a fork is left alone)."""
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None
