"""Ingestion time and peak memory of memory systems on a real dataset, each run in its own process.

    .venv/bin/python scripts/bench_ingest.py --out multirun/bench_beam_500k \
        --variant bm25=memory=bm25 --variant fused=memory=fused -- dataset=beam_500k

Every variant is one ``python -m synapse_pt.run`` (``eval=retrieval`` unless the overrides say
otherwise) in a child process, one after the other, so that the child's peak resident memory
(``ru_maxrss`` of that child alone, from ``os.wait4``) is the variant's own: the embedder, the
dataset, the memory's graph and indexes and the batched retrieval over every question. The
run's ``timing.json`` gives the ingestion seconds (``ingest_seconds``: building the memory from
the conversations, embeddings included unless cached: the cache hits are printed beside) and its
``metrics.json`` the recall@10 over the answerable questions. Writes ``OUT/bench_ingest.json``
and prints a table; the last line is the largest peak resident memory of the variants.
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

from synapse_pt.eval.aggregate import run_summary_names

REPO_ROOT = Path(__file__).resolve().parents[1]


def run_variant(label: str, overrides: Sequence[str], out: Path) -> dict:
    """One run in a child process: wall seconds, the child's peak RSS, the run's timings."""
    folder = out / label
    cmd = [sys.executable, "-m", "synapse_pt.run", "eval=retrieval", *overrides,
           f"hydra.run.dir={folder}"]
    log = (out / f"{label}.log").open("w")
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    log.close()
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise SystemExit(f"variant {label!r} failed with exit code {code}: see {log.name}")
    timing = json.loads((folder / "timing.json").read_text())
    metrics = json.loads((folder / "metrics.json").read_text())
    identity = metrics["identity"]
    return {"variant": label, "overrides": list(overrides), "wall_s": wall,
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
    parser.add_argument("overrides", nargs="*", help="Hydra overrides added to every variant")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for spec in args.variant:
        label, _, own = spec.partition("=")
        if not label or not own:
            parser.error(f"--variant {spec!r}: expected LABEL=override[,override...]")
        rows.append(run_variant(label, [*args.overrides, *own.split(",")], args.out))
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
    peak = max(rows, key=lambda r: r["peak_rss_mib"])
    print(f"ingest_peak_rss: {peak['peak_rss_mib']:.0f} MiB ({peak['variant']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
