"""Shared fixtures: the real LoCoMo file, the shipped sample, devices to parametrise over."""

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
def minilm(tmp_path_factory):
    """The bundled all-MiniLM-L6-v2 (the paper's embedder), with a session-scoped disk cache."""
    from synapse_pt.models.embedder import HFEmbedder

    return HFEmbedder(cache_dir=str(tmp_path_factory.mktemp("minilm_cache")))
