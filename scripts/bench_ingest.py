"""Ingestion time and peak memory of memory systems on a real dataset, each run in its own process.

    .venv/bin/python scripts/bench_ingest.py --out multirun/bench_beam_500k \
        --variant bm25=memory=bm25 --variant fused=memory=fused -- dataset=beam_500k
    # before and after a change, in one run: every variant in each checkout, one after the other
    .venv/bin/python scripts/bench_ingest.py --out multirun/bench_before_after \
        --checkout before=/path/to/old/worktree --checkout after=. \
        --variant gaama=memory=gaama -- dataset=beam_500k dataset.max_conversations=1

Every variant is one ``python -m synapse_pt.run`` (``eval=retrieval`` unless the overrides say
otherwise) in a child process, one after the other, so that the child's peak resident memory
(``ru_maxrss`` of that child alone, from ``os.wait4``) is the variant's own: the embedder, the
dataset, the memory's graph and indexes and the batched retrieval over every question. The
run's ``timing.json`` gives the ingestion seconds (``ingest_seconds``: building the memory from
the conversations, embeddings included unless cached: the cache hits are printed beside) and its
``metrics.json`` the recall@10 over the answerable questions. Writes ``OUT/bench_ingest.json``
and prints a table; the last line is the largest peak resident memory of the variants, or, with
two or more ``--checkout`` folders, the first checkout's total ingestion seconds over the last's.
With ``--checkout NAME=DIR`` each variant runs once per checkout (label ``variant@NAME``), with
that folder as working directory and first on ``PYTHONPATH``, the checkouts alternating variant
by variant so that both see the same machine load.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from synapse_pt.eval.qa.aggregate import run_summary_names

REPO_ROOT = Path(__file__).resolve().parents[1]


def run_variant(label: str, overrides: Sequence[str], out: Path, root: Path = REPO_ROOT) -> dict:
    """One run in a child process (in checkout ``root``): wall seconds, the child's peak RSS, the
    run's timings."""
    folder = (out / label).resolve()
    cmd = [sys.executable, "-m", "synapse_pt.run", "eval=retrieval", *overrides,
           f"hydra.run.dir={folder}"]
    log = (out / f"{label}.log").open("w")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(root), os.environ.get("PYTHONPATH", "")) if p)}
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    log.close()
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise SystemExit(f"variant {label!r} failed with exit code {code}: see {log.name}")
    timing = json.loads((folder / "timing.json").read_text())
    metrics = json.loads((folder / "metrics.json").read_text())
    identity = metrics["identity"]
    return {"variant": label, "overrides": list(overrides), "checkout": str(root),
            "git_commit": identity.get("git_commit"), "wall_s": wall,
            "peak_rss_mib": usage.ru_maxrss / 1024,  # Linux: KiB
            "ingest_s": timing["ingest_seconds"], "retrieve_s": timing["retrieve_seconds"],
            "embedding_cache_hits": timing.get("embedding_cache_hits"),
            "embedding_cache_misses": timing.get("embedding_cache_misses"),
            "conversations": identity["dataset"]["conversations"],
            "questions": identity["dataset"]["questions"],
            # recall@10 over the answerable questions (mean over questions: mean_q_1_4 on
            # LoCoMo, mean_q_2_10 on BEAM)
            "recall@10": metrics["metrics"]["recall@10"][run_summary_names(identity)[1]]}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--variant", action="append", required=True,
                        help="LABEL=override[,override...] (repeatable)")
    parser.add_argument("--checkout", action="append", default=[],
                        help="NAME=DIR: run every variant in this checkout too (repeatable)")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides added to every variant")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    checkouts: dict[str, Path] = {}
    for spec in args.checkout:
        name, _, folder = spec.partition("=")
        if not name or not folder or not (Path(folder) / "synapse_pt").is_dir():
            parser.error(f"--checkout {spec!r}: expected NAME=DIR with DIR a checkout of the "
                         "project (holding synapse_pt/)")
        checkouts[name] = Path(folder).resolve()
    rows = []
    for spec in args.variant:
        label, _, own = spec.partition("=")
        if not label or not own:
            parser.error(f"--variant {spec!r}: expected LABEL=override[,override...]")
        overrides = [*args.overrides, *own.split(",")]
        for name, root in (checkouts or {"": REPO_ROOT}).items():
            rows.append(run_variant(f"{label}@{name}" if name else label, overrides, args.out,
                                    root))
            print(json.dumps(rows[-1]), flush=True)
    meta = {"python": platform.python_version(), "machine": platform.machine(),
            "cpus": os.cpu_count(), "rows": rows}
    (args.out / "bench_ingest.json").write_text(json.dumps(meta, indent=2) + "\n")
    header = ("variant", "conversations", "questions", "ingest_s", "retrieve_s", "wall_s",
              "peak_rss_mib", "recall@10")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for r in rows:
        print("| " + " | ".join(f"{r[h]:.3f}" if isinstance(r[h], float) else str(r[h])
                                for h in header) + " |")
    if len(checkouts) >= 2:
        first, last = list(checkouts)[0], list(checkouts)[-1]
        total = {name: sum(r["ingest_s"] for r in rows if r["variant"].endswith("@" + name))
                 for name in (first, last)}
        for spec in args.variant:
            label = spec.partition("=")[0]
            old, new = (next(r["ingest_s"] for r in rows if r["variant"] == f"{label}@{n}")
                        for n in (first, last))
            print(f"{label}: ingest {old:.1f} s ({first}) -> {new:.1f} s ({last}), "
                  f"{old / new:.2f}x")
        print(f"ingest_ratio_{first}_over_{last}: {total[first] / total[last]:.2f} x")
        return 0
    peak = max(rows, key=lambda r: r["peak_rss_mib"])
    print(f"ingest_peak_rss: {peak['peak_rss_mib']:.0f} MiB ({peak['variant']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
