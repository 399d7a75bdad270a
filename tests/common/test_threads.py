"""The ``threads`` setting (issue 50): ``auto`` divides the usable cores among the framework's live
jobs, registered as pid files; checked with a jobs folder of this test's own."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from synapse_pt.common import threads


@pytest.fixture
def jobs(tmp_path, monkeypatch):
    monkeypatch.setenv("SYNAPSE_JOBS_DIR", str(tmp_path))
    monkeypatch.delenv("SLURM_CPUS_PER_TASK", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(threads, "usable_cores", lambda: 8)
    threads.unregister_job()  # registered elsewhere by an earlier test of this process
    before = torch.get_num_threads()
    yield tmp_path
    threads.unregister_job()
    monkeypatch.setattr(threads.THIS_PROCESS, "setting", threads.AUTO)
    torch.set_num_threads(before)


def test_auto_divides_the_cores_among_live_jobs(jobs):
    assert threads.configure("auto") == 8  # this process alone: 8 cores
    assert (jobs / f"{os.getpid()}.job").is_file()
    sleepers = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
                for _ in range(2)]
    try:
        for p in sleepers:
            (jobs / f"{p.pid}.job").touch()
        assert threads.threads_now() == 8 // 3
        assert threads.apply() == 2 and torch.get_num_threads() == 2
    finally:
        for p in sleepers:
            p.kill()
            p.wait()
    # the ended jobs' files are removed when counted: this process alone again
    assert threads.threads_now() == 8
    assert sorted(f.name for f in jobs.iterdir()) == [f"{os.getpid()}.job"]


def test_a_fixed_count_and_bad_values(jobs):
    assert threads.configure(3) == 3 and torch.get_num_threads() == 3
    assert not (jobs / f"{os.getpid()}.job").exists()  # a fixed count registers nothing
    assert threads.parse_threads("AUTO") == "auto" and threads.parse_threads("4") == 4
    for bad in (0, -1, "many", 1.5, True):
        with pytest.raises(ValueError, match="threads must be 'auto' or a positive integer"):
            threads.parse_threads(bad)


def test_usable_cores_honour_affinity_slurm_and_omp(monkeypatch):
    monkeypatch.delenv("SLURM_CPUS_PER_TASK", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    affinity = len(os.sched_getaffinity(0))
    assert threads.usable_cores() == affinity
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "1")
    assert threads.usable_cores() == 1
    monkeypatch.delenv("SLURM_CPUS_PER_TASK")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert threads.usable_cores() == 1
