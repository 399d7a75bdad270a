"""Progress a log shows (issue 50, item 4): off a terminal a long step writes a line at its start,
at each tenth of its total or after 30 s (whichever comes first) and at its end, with the counts,
the rate and the time left; on a terminal it draws tqdm's bar. The clock is a fake one, so every
number below is computed by hand from the updates' times."""

from __future__ import annotations

import io
import logging

import pytest

from synapse_pt.common.progress import Progress, progress

LOGGER = logging.getLogger("synapse_pt.test_progress")


class FakeClock:
    """Seconds that pass only when a test says so."""

    def __init__(self) -> None:
        self.now = 100.0  # any start: only differences count

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER.name]


@pytest.fixture
def caplog_info(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger=LOGGER.name)
    return caplog


def test_a_line_at_each_tenth(caplog_info: pytest.LogCaptureFixture) -> None:
    """100 texts, 5 a second: a tenth every 2 s. At 10 done after 2 s the rate is 10/2 = 5 texts/s
    and the 90 left take 90/5 = 18 s; at 50 after 10 s, 50 left take 10 s; the end: 20 s in all."""
    clock = FakeClock()
    stream = io.StringIO()  # not a terminal
    with Progress(100, "embed texts", "texts", logger=LOGGER, stream=stream,
                  clock=clock) as bar:
        for _ in range(20):
            clock.now += 1.0
            bar.update(5)
    got = lines(caplog_info)
    assert got[0] == "embed texts: 0/100 texts (0%)"
    assert got[1] == "embed texts: 10/100 texts (10%), 5 texts/s, ~00:18 left"
    assert got[5] == "embed texts: 50/100 texts (50%), 5 texts/s, ~00:10 left"
    assert got[9] == "embed texts: 90/100 texts (90%), 5 texts/s, ~00:02 left"
    assert got[10] == "embed texts: 100/100 texts (100%), 5 texts/s, 00:20 in all"
    assert len(got) == 11  # start, 10 % ... 90 %, the end
    assert stream.getvalue() == ""  # no bar drawn off a terminal


def test_a_line_after_30_s_when_tenths_come_slowly(caplog_info: pytest.LogCaptureFixture
                                                    ) -> None:
    """1000 windows, one every 7 s: a tenth would take 700 s, so the 30 s rule speaks first. The
    updates at 7, 14, 21, 28 s stay quiet; at 35 s (35 >= 30 since the start line) 5 done, rate
    5/35 = 0.142857 windows/s, 995 left take 995 * 7 = 6965 s = 1:56:05. The next line is 30 s
    after that one: at 70 s (63 s is only 28 s after it), 10 done, 990 * 7 = 6930 s = 1:55:30."""
    clock = FakeClock()
    bar = Progress(1000, "consolidate windows", "windows", logger=LOGGER, stream=io.StringIO(),
                   clock=clock)
    for _ in range(10):
        clock.now += 7.0
        bar.update(1)
    assert lines(caplog_info) == [
        "consolidate windows: 0/1000 windows (0%)",
        "consolidate windows: 5/1000 windows (0%), 0.143 windows/s, ~1:56:05 left",
        "consolidate windows: 10/1000 windows (1%), 0.143 windows/s, ~1:55:30 left"]


def test_manual_updates_of_many_items(caplog_info: pytest.LogCaptureFixture) -> None:
    """The embedder's use: ``update(n)`` per chunk of texts. 250 of 1000 after 10 s passes two
    tenths at once (one line): 25 texts/s, 750 left take 30 s; then 750 more after 20 s: the
    end line only (30 s in all, 1000/30 = 33.3 texts/s). ``close()`` twice writes one end."""
    clock = FakeClock()
    bar = Progress(1000, "embed texts", "texts", logger=LOGGER, stream=io.StringIO(),
                   clock=clock)
    clock.now += 10.0
    bar.update(250)
    clock.now += 20.0
    bar.update(750)
    bar.close()
    bar.close()
    assert lines(caplog_info) == [
        "embed texts: 0/1000 texts (0%)",
        "embed texts: 250/1000 texts (25%), 25 texts/s, ~00:30 left",
        "embed texts: 1000/1000 texts (100%), 33.3 texts/s, 00:30 in all"]


def test_an_iterable_is_counted_item_by_item(caplog_info: pytest.LogCaptureFixture) -> None:
    """:func:`progress` over a list of 4 (its length is the total): each item counts once the
    loop asks for the next, so each is a quarter (a line each, 2 s apart: 0.5 it/s)."""
    clock = FakeClock()
    seen = []
    for item in progress(["a", "b", "c", "d"], desc="retrieve", unit="batches", logger=LOGGER,
                         stream=io.StringIO(), clock=clock):
        seen.append(item)
        clock.now += 2.0
    assert seen == ["a", "b", "c", "d"]
    assert lines(caplog_info) == [
        "retrieve: 0/4 batches (0%)",
        "retrieve: 1/4 batches (25%), 0.5 batches/s, ~00:06 left",
        "retrieve: 2/4 batches (50%), 0.5 batches/s, ~00:04 left",
        "retrieve: 3/4 batches (75%), 0.5 batches/s, ~00:02 left",
        "retrieve: 4/4 batches (100%), 0.5 batches/s, 00:08 in all"]


def test_a_terminal_keeps_its_bar(caplog_info: pytest.LogCaptureFixture,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """On a terminal tqdm draws the bar into the stream, and no line goes to the log."""
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    stream = Terminal()
    with Progress(40, "answer", "questions", logger=LOGGER, stream=stream) as bar:
        assert bar.bar is not None
        bar.update(30)
        bar.update(10)
    drawn = stream.getvalue()
    assert "answer: 100%" in drawn and "40/40" in drawn and "questions/s" in drawn
    assert lines(caplog_info) == []


def test_a_negative_total_is_refused() -> None:
    with pytest.raises(ValueError, match=r"Progress\('x'\): total must be >= 0, got -1"):
        Progress(-1, "x", stream=io.StringIO())
