"""What each system's ingestion asks of the encoder: texts, tokens and FLOPs, against its time.

    python experiments/ingest_flops.py --out /work/runs/perf/ingest_flops \\
        [--system NAME=override,...] -- dataset.sample_ids=[conv-26]

Each system runs ``python -m synapse_pt.run eval=retrieval`` in a child process with an empty
embedding cache of its own (every text embedded), with ``HFEmbedder``'s fixed-shape calls counted:
sequences, real tokens, the positions the calls compute, the FLOPs of both (all-MiniLM-L6-v2's
products: per sequence of :math:`n` positions :math:`6 (n (8 d^2 + 4 d f) + 4 n^2 d)`) and the
seconds spent in them (wall, and the process's CPU time). Printed per system beside the run's
``ingest_seconds``: the encoder's share of ingestion and the useful GFLOP/s while it ran, which
experiments/limits.md sets against the matrix-product ceiling of ``scripts/bench_limits.py``.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import runpy
import subprocess
import sys
import time
from pathlib import Path

D, FF, LAYERS = 384, 1536, 6
SYSTEMS = {"paper_main": "experiment=paper_main", "vector_rag": "memory=vector_rag",
           "hybrid": "memory=hybrid", "fused": "memory=fused",
           "synapse_tuned": "experiment=synapse_tuned", "synapse_fused": "experiment=synapse_fused",
           "gaama": "memory=gaama", "membox": "memory=membox",
           "membox_compact": "memory=membox,memory.mode=compact"}


def sequence_flops(n: int) -> int:
    return LAYERS * (n * (8 * D * D + 4 * D * FF) + 4 * n * n * D)


def child(out: Path, overrides: list[str]) -> None:
    """Run ``python -m synapse_pt.run`` here with the encoder's calls counted into ``out``."""
    from synapse_pt.models.embedder import HFEmbedder

    counts = {"sequences": 0, "tokens": 0, "positions": 0, "useful_flops": 0,
              "computed_flops": 0, "encoder_wall_s": 0.0, "encoder_cpu_s": 0.0}
    token_sums = HFEmbedder._token_sums

    def counted(self, sequences):
        sizes = [len(s["input_ids"]) for s in sequences]
        plan = self.shapes.plan(sizes)
        counts["sequences"] += len(sizes)
        counts["tokens"] += sum(sizes)
        counts["positions"] += self.shapes.padded_tokens(sizes)
        counts["useful_flops"] += sum(sequence_flops(n) for n in sizes)
        counts["computed_flops"] += sum(self.shapes.rows(length) * sequence_flops(length)
                                        for length, _ in plan)
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            return token_sums(self, sequences)
        finally:
            counts["encoder_wall_s"] += time.perf_counter() - wall
            counts["encoder_cpu_s"] += time.process_time() - cpu

    HFEmbedder._token_sums = counted
    atexit.register(lambda: out.write_text(json.dumps(counts) + "\n"))
    sys.argv = ["synapse_pt.run", *overrides]
    runpy.run_module("synapse_pt.run", run_name="__main__", alter_sys=True)


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "child":
        child(Path(sys.argv[2]), sys.argv[3:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--system", action="append", default=[],
                        help="NAME=override[,override...] (default: the nine that embed)")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for every system")
    args = parser.parse_args()
    systems = dict(s.split("=", 1) for s in args.system) if args.system else SYSTEMS
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name, spec in systems.items():
        folder = (args.out / name).resolve()
        counts_file = args.out / f"{name}.counts.json"
        cmd = [sys.executable, __file__, "child", str(counts_file), "eval=retrieval",
               *spec.split(","), *args.overrides, "logger=none",
               f"paths.cache_dir={folder}-cache", f"hydra.run.dir={folder}"]
        load = os.getloadavg()[0]
        with (args.out / f"{name}.log").open("w") as log:
            subprocess.run(cmd, check=True, stdout=log, stderr=subprocess.STDOUT)
        counts = json.loads(counts_file.read_text())
        timing = json.loads((folder / "timing.json").read_text())
        row = {"system": name, "load_before": load, **counts,
               "ingest_s": timing["ingest_seconds"]}
        rows.append(row)
        share = counts["encoder_wall_s"] / row["ingest_s"] if row["ingest_s"] else float("nan")
        rate = (counts["useful_flops"] / 1e9 / counts["encoder_cpu_s"]
                if counts["encoder_cpu_s"] else float("nan"))
        print(f"{name}: {counts['sequences']} sequences, {counts['tokens']} tokens "
              f"({counts['positions']} positions computed), {counts['useful_flops'] / 1e9:.1f} "
              f"GFLOP useful; ingest {row['ingest_s']:.1f} s, encoder "
              f"{counts['encoder_wall_s']:.1f} s wall ({share:.0%} of ingest), "
              f"{counts['encoder_cpu_s']:.1f} CPU-s: "
              f"{rate:.1f} useful GFLOP per CPU-second; load {load:.1f}", flush=True)
    (args.out / "ingest_flops.json").write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
