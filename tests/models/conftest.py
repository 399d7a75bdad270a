"""Fixtures for the models tests: the loopback OpenAI-compatible server (tests/loopback.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from loopback import FakeServer, completion_body, echo, serve  # noqa: F401 (re-exported)


@pytest.fixture
def fake_server() -> Iterator[FakeServer]:
    """A threaded OpenAI-compatible server; set ``.behaviour`` to script its answers."""
    with serve() as state:
        yield state
