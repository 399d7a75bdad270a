"""The spend ledger: every reply a server bills, written down before it is used (issue 58).

One ledger is shared by everything one command runs: the variants of a study, the jobs of a
multirun, the runs that resume a folder. It is a SQLite file (WAL: several processes may share
it) beside what the command writes (:data:`LEDGER_FILE` in the run folder, the multirun's sweep
folder or the study's ``--out``), so a resumed command finds what it spent before.

Two tables:

* ``bills``: one row per HTTP reply a server may have billed (an answer used, a reply rejected
  as empty or unreadable and re-asked, a request that timed out after it was sent), priced at
  the model's price from the usage the server reported (``usage='reported'``), from the estimate
  where it reported none (``'estimated'``), or at the request's worst case where nothing came
  back or the usage was refused (``'worst case'``).
* ``holds``: the worst case of each request in flight, reserved before it is sent. A request is
  sent only when ``spent + held + its worst case <= cap`` (:meth:`SpendLedger.hold`), so as long
  as a server bills no more than a request can cost the cap is never passed; a server that
  bills more pushes the spending past it by at most what the requests in flight at once were
  billed, and nothing is sent after.

Money read from a config is a finite number >= 0 or refused in one line
(:func:`~synapse_pt.models.llm.accounting.usd_setting`); token counts a server reports are integers
>= 0 or refused (:func:`token_count`).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from synapse_pt.cache.sqlite import open_wal

#: the ledger's file name in the folder of the command it belongs to
LEDGER_FILE = "spend_ledger.sqlite"

#: what is lost with a corrupt ledger (:class:`~synapse_pt.cache.sqlite.CorruptCacheError`)
LEDGER_LOST = ("the record of what this command spent: a cap counts from $0 again for it, while "
               "the money is gone; keep the file to read what is left of it")

_BILLS = """CREATE TABLE IF NOT EXISTS bills (
    id INTEGER PRIMARY KEY AUTOINCREMENT, created REAL NOT NULL, pid INTEGER NOT NULL,
    model TEXT NOT NULL, prompt_tokens INTEGER NOT NULL, completion_tokens INTEGER NOT NULL,
    usd REAL NOT NULL, outcome TEXT NOT NULL, usage TEXT NOT NULL, note TEXT NOT NULL)"""
_HOLDS = """CREATE TABLE IF NOT EXISTS holds (
    id INTEGER PRIMARY KEY AUTOINCREMENT, pid INTEGER NOT NULL, usd REAL NOT NULL)"""

#: the hold of a request under no cap (:meth:`SpendLedger.hold`): nothing is written for it
NOTHING_HELD = 0

#: outcomes of a billed reply
ACCEPTED, REJECTED, UNANSWERED = "accepted", "rejected", "unanswered"
#: where a bill's token counts come from
REPORTED, ESTIMATED, WORST_CASE = "reported", "estimated", "worst case"


def token_count(value: Any) -> int | None:
    """A token count a server reported: an int >= 0, else None (refused)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


@dataclass(frozen=True)
class Bill:
    """One billed reply: its tokens, what it cost, what became of it and where the counts came
    from (:data:`ACCEPTED` / :data:`REJECTED` / :data:`UNANSWERED`; :data:`REPORTED` /
    :data:`ESTIMATED` / :data:`WORST_CASE`)."""

    model: str
    prompt_tokens: int
    completion_tokens: int
    usd: float
    outcome: str
    usage: str
    note: str = ""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class SpendLedger:
    """The ledger file at ``path`` (``None``: in memory, this process only).

    Attributes:
        path: the file, or None.
    """

    def __init__(self, path: str | Path | None) -> None:
        self.path = None if path is None else Path(path)
        self._lock = threading.Lock()
        self._pid = -1
        self._conn: sqlite3.Connection | None = None
        if self.path is None or self.path.exists():
            self._connect()  # an existing file is checked at once (a corrupt one is named)

    def _written(self) -> bool:
        """Whether there is anything to read: the file exists (it is made by the first bill, or
        the first hold under a cap), or the ledger is in memory."""
        return self.path is None or self.path.exists()

    def _connect(self) -> sqlite3.Connection:
        if self._conn is None or self._pid != os.getpid():  # a connection must not cross a fork
            if self.path is None:
                conn = sqlite3.connect(":memory:", check_same_thread=False)
                conn.execute(_BILLS)
            else:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                conn = open_wal(self.path, _BILLS, lost=LEDGER_LOST)
            conn.execute(_HOLDS)
            conn.commit()
            self._conn, self._pid = conn, os.getpid()
        return self._conn

    def __str__(self) -> str:
        return str(self.path) if self.path is not None else "(in memory)"

    # -- reading ---------------------------------------------------------------------------

    def spent(self) -> float:
        """Dollars billed so far (every row of ``bills``)."""
        if not self._written():
            return 0.0
        with self._lock:
            row = self._connect().execute("SELECT COALESCE(SUM(usd), 0.0) FROM bills").fetchone()
        return float(row[0])

    def totals(self) -> dict[str, Any]:
        """``{billed, accepted, rejected, unanswered, usage_estimated, worst_case,
        prompt_tokens, completion_tokens, usd}`` over every bill."""
        rows = []
        if self._written():
            with self._lock:
                rows = self._connect().execute(
                    "SELECT outcome, usage, COUNT(*), SUM(prompt_tokens), "
                    "SUM(completion_tokens), SUM(usd) FROM bills GROUP BY outcome, usage"
                ).fetchall()
        out: dict[str, Any] = {"billed": 0, ACCEPTED: 0, REJECTED: 0, UNANSWERED: 0,
                               "usage_estimated": 0, "worst_case": 0, "prompt_tokens": 0,
                               "completion_tokens": 0, "usd": 0.0}
        for outcome, usage, n, prompt, completion, usd in rows:
            out["billed"] += n
            out[outcome] = out.get(outcome, 0) + n
            out["usage_estimated"] += n if usage == ESTIMATED else 0
            out["worst_case"] += n if usage == WORST_CASE else 0
            out["prompt_tokens"] += int(prompt or 0)
            out["completion_tokens"] += int(completion or 0)
            out["usd"] += float(usd or 0.0)
        return out

    # -- writing -----------------------------------------------------------------------------

    def hold(self, usd: float, cap: float | None) -> int | None:
        """Reserve ``usd`` (a request's worst case) if the bills, the holds of live processes
        and ``usd`` stay within ``cap`` (``None``: no cap); the hold's id, or None when it does
        not fit. Holds of processes that died are dropped first. Without a cap nothing is held
        (:data:`NOTHING_HELD`): nothing has to fit, and a command billed nothing leaves no file."""
        if cap is None:
            return NOTHING_HELD
        with self._lock:
            conn = self._connect()
            conn.execute("BEGIN IMMEDIATE")
            try:
                pids = [p for (p,) in conn.execute("SELECT DISTINCT pid FROM holds")]
                dead = [p for p in pids if p != os.getpid() and not _alive(p)]
                for p in dead:
                    conn.execute("DELETE FROM holds WHERE pid = ?", (p,))
                if cap is not None:
                    spent = conn.execute("SELECT COALESCE(SUM(usd), 0.0) FROM bills").fetchone()
                    held = conn.execute("SELECT COALESCE(SUM(usd), 0.0) FROM holds").fetchone()
                    if float(spent[0]) + float(held[0]) + usd > cap:
                        conn.commit()
                        return None
                cur = conn.execute("INSERT INTO holds (pid, usd) VALUES (?, ?)",
                                   (os.getpid(), usd))
                conn.commit()
                return int(cur.lastrowid or 0)
            except BaseException:
                conn.rollback()
                raise

    def settle(self, hold: int | None, bill: Bill | None) -> None:
        """Replace the hold ``hold`` by ``bill`` (either may be None: a bill without a hold, a
        hold released unbilled), in one transaction."""
        hold = None if hold == NOTHING_HELD else hold
        if hold is None and bill is None:
            return
        with self._lock:
            conn = self._connect()
            conn.execute("BEGIN IMMEDIATE")
            try:
                if hold is not None:
                    conn.execute("DELETE FROM holds WHERE id = ?", (hold,))
                if bill is not None:
                    conn.execute(
                        "INSERT INTO bills (created, pid, model, prompt_tokens, "
                        "completion_tokens, usd, outcome, usage, note) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (time.time(), os.getpid(), bill.model, bill.prompt_tokens,
                         bill.completion_tokens, bill.usd, bill.outcome, bill.usage, bill.note))
                conn.commit()
            except BaseException:
                conn.rollback()
                raise

    def close(self) -> None:
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None


def holds_spending(folder: str | Path) -> bool:
    """Whether ``folder`` holds a ledger with at least one bill (a folder a command spent money
    in is kept, so the same command resumes with what it spent counted)."""
    path = Path(folder) / LEDGER_FILE
    if not path.is_file():
        return False
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
            return bool(conn.execute("SELECT COUNT(*) FROM bills").fetchone()[0])
    except sqlite3.Error:
        return True  # unreadable: keep it, the next start names it
