"""Opening the on-disk caches (SQLite in WAL mode) safely when several processes start at once,
and naming a corrupt cache file with the remedy and what deleting it loses (the embedding and text
caches: only the time to rebuild them; the LLM response cache and the spend ledger: money)."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


#: what a rebuilt cache costs by default: its values are recomputed locally
REBUILT = "only the time to recompute it is lost"


class CorruptCacheError(sqlite3.DatabaseError):
    """A cache file SQLite cannot read (truncated, overwritten, not a database)."""

    def __init__(self, path: str | Path, err: sqlite3.DatabaseError, lost: str = REBUILT) -> None:
        self.path = str(path)
        super().__init__(
            f"{path}: this cache file is corrupt ({err}); delete it or move it aside "
            f"(mv {path} {path}.corrupt) and rerun: the cache is rebuilt from scratch ({lost})")


def _named(path: str, call: Callable[[], T], lost: str = REBUILT) -> T:
    """``call()``, a SQLite corruption error (a ``DatabaseError`` that is no ``OperationalError``:
    "database disk image is malformed", "file is not a database") raised as
    :class:`CorruptCacheError` naming ``path``; an ``OperationalError`` (a full disk's "disk I/O
    error", a read-only file, a lock held too long) raised again with ``path`` in front."""
    try:
        return call()
    except CorruptCacheError:
        raise
    except sqlite3.DatabaseError as err:
        if isinstance(err, sqlite3.OperationalError):
            if str(err).startswith(f"{path}: "):
                raise
            raise sqlite3.OperationalError(f"{path}: {err}") from err
        raise CorruptCacheError(path, err, lost) from err


class _NamedCursor(sqlite3.Cursor):
    """A cursor whose reads and writes name the cache file on corruption."""

    path = ""
    lost = REBUILT

    def execute(self, *args: Any) -> _NamedCursor:
        return _named(self.path, lambda: super(_NamedCursor, self).execute(*args), self.lost)

    def executemany(self, *args: Any) -> _NamedCursor:
        return _named(self.path, lambda: super(_NamedCursor, self).executemany(*args), self.lost)

    def fetchone(self) -> Any:
        return _named(self.path, super().fetchone, self.lost)

    def fetchmany(self, *args: Any) -> list[Any]:
        return _named(self.path, lambda: super(_NamedCursor, self).fetchmany(*args), self.lost)

    def fetchall(self) -> list[Any]:
        return _named(self.path, super().fetchall, self.lost)

    def __next__(self) -> Any:
        return _named(self.path, super().__next__, self.lost)


class NamedConnection(sqlite3.Connection):
    """A connection to a cache file whose statements and commits name the file when SQLite finds
    it corrupt (:class:`CorruptCacheError`), instead of a bare "database disk image is
    malformed"."""

    path = ""
    lost = REBUILT

    def _cursor(self) -> _NamedCursor:
        cur = self.cursor(_NamedCursor)
        cur.path, cur.lost = self.path, self.lost
        return cur

    def execute(self, *args: Any) -> _NamedCursor:  # type: ignore[override]
        return self._cursor().execute(*args)

    def executemany(self, *args: Any) -> _NamedCursor:  # type: ignore[override]
        return self._cursor().executemany(*args)

    def commit(self) -> None:
        _named(self.path, super().commit, self.lost)


def open_wal(path: str | Path, schema: str, *, timeout_s: float = 60.0,
             attempt_timeout_s: float = 1.0, lost: str = REBUILT) -> NamedConnection:
    """A connection to ``path`` in WAL mode with ``schema`` applied.

    Switching a database file to WAL takes an exclusive lock, and SQLite can answer "database is
    locked" at once (without its busy handler) when processes open and write the same file
    together. So the set-up runs in attempts of ``attempt_timeout_s`` each, reconnecting between
    them, until ``timeout_s`` is spent; any other error is raised at once, and the last "locked"
    error (with the file's name) when the time is up. The returned connection waits up to
    ``timeout_s`` for locks, and names the file with the remedy when SQLite finds it corrupt
    (:class:`CorruptCacheError`), saying what a rebuilt file loses (``lost``).
    """
    deadline = time.monotonic() + timeout_s
    delay = 0.01
    while True:
        remaining = max(0.0, deadline - time.monotonic())
        conn = sqlite3.connect(path, timeout=min(attempt_timeout_s, remaining),
                               check_same_thread=False, factory=NamedConnection)
        conn.path, conn.lost = str(path), lost
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(schema)
            conn.commit()
            conn.execute(f"PRAGMA busy_timeout={int(timeout_s * 1000)}")
            return conn
        except CorruptCacheError:
            conn.close()
            raise
        except sqlite3.OperationalError as err:
            conn.close()
            if "locked" not in str(err) or time.monotonic() + delay >= deadline:
                raise  # named by NamedConnection
            time.sleep(delay)
            delay = min(delay * 2, 0.5)
