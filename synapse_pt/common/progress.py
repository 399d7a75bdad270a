"""Progress of a long step (embedding, consolidation, retrieval, answering, judging) that a log
shows.

On a terminal a step draws tqdm's bar. Off a terminal (a log file, a batch job, a pipe) tqdm
draws nothing, so :class:`Progress` writes lines to the run log instead (python ``logging``, the
``synapse_pt.common.progress`` logger unless the caller names another)::

    embed texts: 0/19999 texts (0%)
    embed texts: 2000/19999 texts (10%), 95.2 texts/s, ~03:09 left
    ...
    embed texts: 19999/19999 texts (100%), 96.1 texts/s, 03:28 in all

A line is written when the step starts, whenever another tenth of the total is done or 30 s
have passed since the last line (whichever comes first; checked at each update, so a single
update that takes longer is reported when it ends), and at the end. The rate is the items done
since the start over the seconds since the start; the time left is the items still to do at that
rate.

Use it around an iterable (:func:`progress`) or update it by hand, ``n`` items at a time::

    with Progress(total=len(texts), desc="embed texts", unit="texts") as bar:
        for chunk in chunks:
            ...
            bar.update(len(chunk))

This module sits at the bottom of the layering (it imports nothing from the package), so every
layer may report its progress through it.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from types import TracebackType
from typing import IO, TypeVar

from tqdm import tqdm

T = TypeVar("T")

LOG = logging.getLogger("synapse_pt.common.progress")
#: seconds between two log lines at most (while updates come)
INTERVAL_S = 30.0
#: a log line each time another this many tenths of the total are done
STEP_TENTHS = 1


def _interval(seconds: float) -> str:
    """``"03:09"`` / ``"1:02:03"`` (tqdm's format)."""
    return tqdm.format_interval(max(0.0, seconds))


class Progress:
    """Counts the items of a step done and shows it: tqdm's bar on a terminal, else log lines.

    Args:
        total: items the step does (``None``: unknown; lines then give no share or time left).
        desc: what the step is (``"embed texts"``), the start of each line.
        unit: what an item is (``"texts"``, ``"windows"``, ``"questions"``).
        logger: where the lines go (default ``synapse_pt.common.progress``); logged at INFO.
        stream: the stream whose being a terminal decides bar or lines, and where the bar is
            drawn (default ``sys.stderr``).
        clock: seconds, monotonic (default :func:`time.monotonic`; tests inject a fake one).
        interval_s: at most this many seconds between two lines while updates come.
    """

    def __init__(self, total: int | None, desc: str, unit: str = "it", *,
                 logger: logging.Logger | None = None, stream: IO[str] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 interval_s: float = INTERVAL_S) -> None:
        if total is not None and total < 0:
            raise ValueError(f"Progress({desc!r}): total must be >= 0, got {total}")
        self.total = total
        self.desc = desc
        self.unit = unit
        self.done = 0
        self.logger = logger or LOG
        self.clock = clock
        self.interval_s = interval_s
        self.stream = stream if stream is not None else sys.stderr
        self.closed = False
        is_tty = bool(getattr(self.stream, "isatty", lambda: False)())
        # on a terminal tqdm draws the bar (and honours TQDM_DISABLE); off one it stays off
        self.bar: tqdm | None = (tqdm(total=total, desc=desc, unit=unit, file=self.stream,
                                      disable=None) if is_tty else None)
        self.start = self.clock()
        self.last_line = self.start
        self.last_tenth = 0
        if self.bar is None:
            self._log(self.start)

    # -- counting -----------------------------------------------------------------------------

    def update(self, n: int = 1) -> None:
        """``n`` more items are done."""
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
            return
        now = self.clock()
        due = (self._tenth() >= self.last_tenth + STEP_TENTHS
               or now - self.last_line >= self.interval_s)
        if due and self.done != self.total:  # the last line is close()'s
            self._log(now)

    def close(self) -> None:
        """End the step: the bar is closed, or the last line (the total time) is written."""
        if self.closed:
            return
        self.closed = True
        if self.bar is not None:
            self.bar.close()
            return
        self._log(self.clock(), last=True)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # -- the lines ----------------------------------------------------------------------------

    def _tenth(self) -> int:
        """How many whole tenths of the total are done (0 with no total)."""
        if not self.total:
            return 0
        return min(10, 10 * self.done // self.total)

    def line(self, now: float, last: bool = False) -> str:
        """The log line at clock time ``now``: ``desc: done/total unit (pct%), rate unit/s,
        ~time left`` (at the end, the time the step took instead of the time left)."""
        count = f"{self.done}/{self.total}" if self.total is not None else f"{self.done}"
        text = f"{self.desc}: {count} {self.unit}"
        if self.total:
            text += f" ({100 * self.done // self.total}%)"
        elapsed = now - self.start
        if self.done and elapsed > 0:
            rate = self.done / elapsed
            text += f", {rate:.3g} {self.unit}/s"
            if last:
                text += f", {_interval(elapsed)} in all"
            elif self.total is not None:
                text += f", ~{_interval((self.total - self.done) / rate)} left"
        elif last:
            text += f", {_interval(elapsed)} in all"
        return text

    def _log(self, now: float, last: bool = False) -> None:
        self.logger.info("%s", self.line(now, last))
        self.last_line = now
        self.last_tenth = self._tenth()


def progress(iterable: Iterable[T], *, total: int | None = None, desc: str, unit: str = "it",
             logger: logging.Logger | None = None, stream: IO[str] | None = None,
             clock: Callable[[], float] = time.monotonic) -> Iterator[T]:
    """Yield the items of ``iterable``, counting each one done as the next is asked for (or the
    loop ends), with :class:`Progress` showing it. ``total``: ``len(iterable)`` where it has one.
    """
    if total is None and hasattr(iterable, "__len__"):
        total = len(iterable)  # type: ignore[arg-type]
    with Progress(total, desc, unit, logger=logger, stream=stream, clock=clock) as bar:
        for item in iterable:
            yield item
            bar.update(1)
