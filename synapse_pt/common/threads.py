"""How many CPU threads this process computes with: the ``threads`` setting, and what ``auto``
resolves to when several jobs of the framework share one machine.

Two jobs that each run PyTorch's default intra-op pool (one thread a core) on the same cores
oversubscribe them: OpenMP's threads spin at every barrier while the other job holds the core, and
two jobs together did 2.7x less work than one alone on 2 cores (issue 50). ``threads: auto``
divides the cores this process may use among the framework's jobs running now:

.. math:: n = \\max\\left(1, \\left\\lfloor \\frac{C}{J} \\right\\rfloor\\right)

where :math:`C` is the number of usable cores (the process's CPU affinity, which ``taskset``,
cpusets and SLURM honour, capped by ``SLURM_CPUS_PER_TASK`` and ``OMP_NUM_THREADS`` where set)
and :math:`J` the number of live jobs registered in :func:`jobs_dir` (one file a process, named by
its pid; files of dead processes are removed when counted). Jobs started together see each
other as soon as both registered; the count is read again at every long step (the encoder reads
it before each chunk of texts), so a job started later, or one that ended, changes the others'
threads from their next step on. An integer ``threads`` fixes the count.

The encoder's vectors do not depend on this number (each of its fixed-shape calls runs on one
thread, :mod:`synapse_pt.models.embedder`), so neither does any result.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

AUTO = "auto"


@dataclass
class ThisProcess:
    """This process's ``threads`` setting and its job file while it is registered."""

    setting: int | str = AUTO
    registered: Path | None = None


#: the one process this module speaks for
THIS_PROCESS = ThisProcess()


def jobs_dir() -> Path:
    """Where live jobs register: ``$SYNAPSE_JOBS_DIR``, else ``synapse_pt-jobs-<uid>`` in the
    system's temporary folder (one machine's jobs, one user's)."""
    env = os.environ.get("SYNAPSE_JOBS_DIR")
    if env:
        return Path(env)
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return Path(tempfile.gettempdir()) / f"synapse_pt-jobs-{uid}"


def usable_cores() -> int:
    """Cores this process may run on: its CPU affinity, capped by ``SLURM_CPUS_PER_TASK`` and an
    explicit ``OMP_NUM_THREADS`` (either names a share of the machine given to this job)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    for var in ("SLURM_CPUS_PER_TASK", "OMP_NUM_THREADS"):
        value = os.environ.get(var, "").strip()
        if value.isdigit() and int(value) > 0:
            cores = min(cores, int(value))
    return max(1, cores)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def live_jobs() -> int:
    """The framework's jobs running now on this machine (this one included once registered);
    the files of jobs whose process ended are removed."""
    folder = jobs_dir()
    count = 0
    for entry in folder.glob("*.job") if folder.is_dir() else ():
        stem = entry.stem
        if not stem.isdigit():
            continue
        if _alive(int(stem)):
            count += 1
        else:
            with contextlib.suppress(FileNotFoundError):
                entry.unlink()
    return max(1, count)


def register_job() -> None:
    """Count this process among the live jobs until it exits (idempotent)."""
    if THIS_PROCESS.registered is not None:
        return
    folder = jobs_dir()
    folder.mkdir(parents=True, exist_ok=True)
    THIS_PROCESS.registered = folder / f"{os.getpid()}.job"
    THIS_PROCESS.registered.touch()
    atexit.register(unregister_job)


def unregister_job() -> None:
    """Stop counting this process (called at exit)."""
    if THIS_PROCESS.registered is not None:
        with contextlib.suppress(FileNotFoundError):
            THIS_PROCESS.registered.unlink()
        THIS_PROCESS.registered = None


def parse_threads(value: int | str) -> int | str:
    """``"auto"`` or a positive integer; anything else is one clear error naming ``threads``."""
    if isinstance(value, str) and value.strip().lower() == AUTO:
        return AUTO
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"threads must be 'auto' or a positive integer, got {value!r}")
    try:
        number = int(value)
    except ValueError:
        raise ValueError(f"threads must be 'auto' or a positive integer, got {value!r}") from None
    if number < 1:
        raise ValueError(f"threads must be 'auto' or a positive integer, got {value!r}")
    return number


def configure(value: int | str = AUTO) -> int:
    """Set this process's ``threads`` setting, register it as a job under ``auto``, and apply
    the count to PyTorch's intra-op pool; returns the count."""
    THIS_PROCESS.setting = parse_threads(value)
    if THIS_PROCESS.setting == AUTO:
        register_job()
    return apply()


def threads_now() -> int:
    """The thread count the setting gives now (``auto``: :math:`\\max(1, C // J)`)."""
    if THIS_PROCESS.setting == AUTO:
        return max(1, usable_cores() // live_jobs())
    return int(THIS_PROCESS.setting)


def apply() -> int:
    """Set PyTorch's intra-op threads to :func:`threads_now` (when it changed); the count."""
    n = threads_now()
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    return n
