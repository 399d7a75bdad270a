"""Shared fixtures: the real LoCoMo file, the shipped sample, devices to parametrise over, the
bundled MiniLM with one embedding cache for the whole session; and the order the tests run in.

Scheduling (``make test``: ``-n auto``, and ``--maxschedchunk 1`` from pyproject's addopts): the
long tests start first (:func:`pytest_collection_modifyitems`) and each worker takes the next test
when it finishes one, so that the many short ones fill in behind the long ones and no worker is
left alone with a minute-long test at the end. (``xdist_group`` marks are not used: with pytest
9.2 and pytest-xdist 3.8 ``--dist loadgroup`` silently stops grouping, pytest-xdist issue 1386.)
Work that several workers would repeat is shared through files keyed by content instead: the
session's embedding cache below, the real-server tests' model copy behind a file lock."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

REPO_ROOT = Path(__file__).resolve().parents[1]
LOCOMO_CANDIDATES = [
    os.environ.get("SYNAPSE_DATA", ""),
    str(REPO_ROOT.parent / "shared" / "data" / "locomo10.json"),
]

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])

# pytest-xdist runs one worker per core (`make test`: -n auto). Each worker's torch, and each
# process a test starts, takes its share of the cores instead of all of them: two workers of two
# OpenMP threads each on two cores spin against each other.
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    _SHARE = max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))
    os.environ.setdefault("OMP_NUM_THREADS", str(_SHARE))
    torch.set_num_threads(_SHARE)


def locomo_path_or_none() -> Path | None:
    for cand in LOCOMO_CANDIDATES:
        if cand and Path(cand).is_file():
            return Path(cand)
    return None


@pytest.fixture(scope="session")
def locomo_path() -> Path:
    path = locomo_path_or_none()
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("CI must see the real LoCoMo file (../shared/data/locomo10.json or "
                        "SYNAPSE_DATA)")
        pytest.skip("LoCoMo file not available (set SYNAPSE_DATA)")
    return path


@pytest.fixture(scope="session")
def locomo(locomo_path):
    from synapse_pt.data import load_locomo

    return load_locomo(locomo_path)


@pytest.fixture(scope="session")
def sample_dataset():
    from synapse_pt.data import load_locomo, sample_path

    return load_locomo(sample_path(), name="sample")


@pytest.fixture(params=DEVICES)
def device(request) -> str:
    return request.param


@pytest.fixture(scope="session")
def session_cache_dir(tmp_path_factory) -> Path:
    """A folder for this test session's caches keyed by content, shared by every pytest-xdist
    worker (the parent of the workers' base temporary folders is the session's own): what one
    worker embedded, another reads instead of embedding it again. Fresh each session, so a
    changed embedder is never answered from an earlier session's vectors."""
    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "session_cache"
    folder.mkdir(exist_ok=True)
    return folder


@pytest.fixture(scope="session")
def minilm(session_cache_dir):
    """The bundled all-MiniLM-L6-v2 (the paper's embedder), with the session's disk cache (an
    SQLite file the workers share, keyed by sha256 of model identity and text)."""
    from synapse_pt.models.embedder import HFEmbedder

    return HFEmbedder(cache_dir=str(session_cache_dir / "minilm"))


def _start_order(item: pytest.Item) -> tuple[int, int]:
    """Sort key, long tests first: ``slow``-marked tests; then the end-to-end modules at the top
    of tests/ (each runs the CLI, a notebook or a server in a subprocess, seconds each); then
    the unit tests in tests/<package>/ (milliseconds each)."""
    in_subpackage = Path(str(item.path)).parent != Path(__file__).parent
    return item.get_closest_marker("slow") is None, in_subpackage


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Long tests first (a stable sort: otherwise the order of collection), the longest-first
    rule that keeps the workers' finishing times close; every worker sorts the same way."""
    items.sort(key=_start_order)
