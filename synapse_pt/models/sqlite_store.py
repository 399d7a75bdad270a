"""Opening the on-disk caches (SQLite in WAL mode) safely when several processes start at once."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path


def open_wal(path: str | Path, schema: str, *, timeout_s: float = 60.0,
             attempt_timeout_s: float = 1.0) -> sqlite3.Connection:
    """A connection to ``path`` in WAL mode with ``schema`` applied.

    Switching a database file to WAL takes an exclusive lock, and SQLite can answer "database is
    locked" at once (without its busy handler) when processes open and write the same file
    together. So the set-up runs in attempts of ``attempt_timeout_s`` each, reconnecting between
    them, until ``timeout_s`` is spent; any other error is raised at once, and the last "locked"
    error (with the file's name) when the time is up. The returned connection waits up to
    ``timeout_s`` for locks.
    """
    deadline = time.monotonic() + timeout_s
    delay = 0.01
    while True:
        remaining = max(0.0, deadline - time.monotonic())
        conn = sqlite3.connect(path, timeout=min(attempt_timeout_s, remaining),
                               check_same_thread=False)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(schema)
            conn.commit()
            conn.execute(f"PRAGMA busy_timeout={int(timeout_s * 1000)}")
            return conn
        except sqlite3.OperationalError as err:
            conn.close()
            if "locked" not in str(err) or time.monotonic() + delay >= deadline:
                raise sqlite3.OperationalError(f"{path}: {err}") from err
            time.sleep(delay)
            delay = min(delay * 2, 0.5)
