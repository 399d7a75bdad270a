"""open_wal: the caches' SQLite set-up waits out another process's lock instead of failing."""

from __future__ import annotations

import sqlite3
import threading
import time

import pytest

from synapse_pt.cache.sqlite import open_wal

SCHEMA = "CREATE TABLE IF NOT EXISTS kv (k TEXT PRIMARY KEY, v TEXT)"


def hold_exclusive_lock(path, seconds: float) -> threading.Thread:
    """Another connection takes an exclusive lock on ``path`` and releases it after ``seconds``."""
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("CREATE TABLE IF NOT EXISTS other (x)")
    holder.execute("BEGIN EXCLUSIVE")

    def release() -> None:
        time.sleep(seconds)
        holder.execute("COMMIT")
        holder.close()

    thread = threading.Thread(target=release)
    thread.start()
    return thread


def test_waits_for_a_lock_longer_than_one_attempt(tmp_path):
    path = tmp_path / "c.sqlite"
    thread = hold_exclusive_lock(path, 0.8)
    start = time.monotonic()
    conn = open_wal(path, SCHEMA, timeout_s=10.0, attempt_timeout_s=0.2)  # needs several attempts
    waited = time.monotonic() - start
    thread.join()
    assert waited >= 0.7
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.execute("INSERT INTO kv VALUES ('a', 'b')")
    conn.commit()
    assert conn.execute("SELECT v FROM kv").fetchall() == [("b",)]


def test_gives_up_with_the_file_name_when_the_time_is_spent(tmp_path):
    path = tmp_path / "c.sqlite"
    thread = hold_exclusive_lock(path, 1.5)
    with pytest.raises(sqlite3.OperationalError, match=r"c\.sqlite: database is locked"):
        open_wal(path, SCHEMA, timeout_s=0.4, attempt_timeout_s=0.1)
    thread.join()


def test_other_errors_are_not_retried(tmp_path):
    start = time.monotonic()
    with pytest.raises(sqlite3.OperationalError, match="syntax error"):
        open_wal(tmp_path / "c.sqlite", "CREATE TABLE (", timeout_s=10.0)
    assert time.monotonic() - start < 2.0
