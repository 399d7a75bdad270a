"""Prepare what ``scripts/device_bench.sh`` needs on a GPU machine without model weights or a
network: the embeddings, the data and the pure-Python packages that machine lacks.

    python scripts/device_inputs.py [--out .device] [--config "experiment=paper_main" ...]

For each ``--config`` (a space-separated list of Hydra overrides; default:
``experiment=paper_main``, the memory of ``bench_retrieval`` and ``bench_sweep``) the memory is
built and every question is retrieved once, as a run does, with the embedding cache recording
every text it serves. Writes
into ``--out``:

* ``cache/embeddings/``: those rows only (``embeddings.sqlite``) and ``encoder.json``, the
  input of ``embedder=cached`` (:class:`~synapse_pt.cache.exported.CacheOnlyEncoder`);
* ``locomo10.json``: a copy of the dataset file the configurations read (checked by sha256);
* ``site/``: copies of the installed pure-Python packages the device image lacks (hydra,
  omegaconf, antlr4, and rank_bm25 for the CUDA-parametrised tests), put on ``PYTHONPATH`` there.

The folder is git-ignored (``/.device/``); the device tool carries it (``carry: [".device"]``).
The last line is the folder's size, which must stay under the 64 MiB a device call carries.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import shutil
import sys
from pathlib import Path

import hydra
import torch

from synapse_pt.cache.exported import write_encoder_file
from synapse_pt.cache.vectors import CACHE_FILE
from synapse_pt.commands.build import composed_config, ingested_memory
from synapse_pt.eval.qa.pipeline import blind
from synapse_pt.models.embedder import HFEmbedder

# pure Python; the device image has the rest (rank_bm25: for the CUDA-parametrised tests)
PACKAGES = ("hydra", "omegaconf", "antlr4", "rank_bm25")
LIMIT_MIB = 64


def package_path(name: str) -> Path:
    """The installed package's folder, or the file of a single-module distribution."""
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(f"{name} is not installed here; run bash scripts/setup.sh")
    origin = Path(spec.origin)
    return origin.parent if origin.name == "__init__.py" else origin


def folder_mib(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 2**20


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path(".device"))
    parser.add_argument("--config", action="append", default=None,
                        help="Hydra overrides of one configuration, space-separated (repeatable)")
    args = parser.parse_args()
    configs = [c.split() for c in (args.config or ["experiment=paper_main"])]
    target = args.out / "cache" / "embeddings"
    if (target / CACHE_FILE).exists():
        raise FileExistsError(f"{target / CACHE_FILE} exists; remove {args.out} to re-export")
    target.mkdir(parents=True, exist_ok=True)

    encoder: HFEmbedder | None = None
    data: tuple[str, str] | None = None
    for overrides in configs:
        cfg = composed_config(overrides)
        if encoder is None:
            encoder = hydra.utils.instantiate(cfg.embedder, _convert_="all")
            if not isinstance(encoder, HFEmbedder) or encoder.cache is None:
                raise ValueError("device_inputs exports an HFEmbedder's disk cache; the "
                                 f"configuration's embedder is {type(encoder).__name__}")
            encoder.cache.seen = set()
        memory, dataset = ingested_memory(cfg, "exporting device inputs", encoder)
        with torch.no_grad():
            memory.retrieve([blind(q) for q in dataset.questions()])
        if data is None:
            data = (dataset.path, dataset.sha256)
        elif data[1] != dataset.sha256:
            raise ValueError(f"the configurations read different data files: {data[0]} and "
                             f"{dataset.path}")
        print(f"{' '.join(overrides)}: {len(encoder.cache.seen):,} texts so far")
    assert encoder is not None and encoder.cache is not None and data is not None
    rows = encoder.cache.export(encoder.cache.seen, target / CACHE_FILE)
    write_encoder_file(target, identity=encoder.identity, name=encoder.name, dim=encoder.dim)
    copied = args.out / "locomo10.json"
    shutil.copyfile(data[0], copied)
    if hashlib.sha256(copied.read_bytes()).hexdigest() != data[1]:
        raise RuntimeError(f"{copied}: the copy's sha256 differs from {data[0]}'s")
    site = args.out / "site"
    site.mkdir(parents=True, exist_ok=True)
    for name in PACKAGES:
        source = package_path(name)
        if source.is_dir():
            shutil.copytree(source, site / name, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copyfile(source, site / source.name)
    size = folder_mib(args.out)
    print(f"{rows:,} embeddings of {encoder.name} -> {target}; data {copied} "
          f"(sha256 {data[1][:12]}); packages {', '.join(PACKAGES)} -> {site}")
    if size > LIMIT_MIB:
        print(f"{args.out} is {size:.1f} MiB, over the {LIMIT_MIB} MiB a device call carries",
              file=sys.stderr)
        return 1
    print(f"device_inputs_size: {size:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
