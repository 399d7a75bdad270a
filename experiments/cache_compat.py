"""Read every row of a cache folder through the cache code of two commits: same values?

    python experiments/cache_compat.py CACHE_DIR [--before 6066065] [--llm FILE]

Issue 60 moved the caches into synapse_pt/cache/ on one mechanism and kept their files' format.
This reads ``CACHE_DIR/embeddings/embeddings.sqlite`` (or ``CACHE_DIR/embeddings.sqlite``),
``CACHE_DIR/text.sqlite`` and, with ``--llm``, a response cache, once with the code of
``--before`` (``git archive`` of that commit into a temporary folder) and once with this
checkout's, each in its own process: every key of each file is looked up through that code's
cache class, and the decoded values (the vectors' float32 bytes, the text values' JSON with
sorted keys, the responses' fields) are hashed in key order. The text cache of the code before
has no lookup by key (only ``map`` by texts), so its rows are read with the statement and the
``json.loads`` of its ``map``. Prints one line per file, rows and digest per side, and
``same`` or ``DIFFERENT``; the exit status is 1 when any differs. The files are opened as a run
opens them (WAL, each table created if absent: nothing changes in a file that has it).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: run in a child process whose ``synapse_pt`` is one side's: prints ``{file: [rows, digest]}``
SIDE = r'''
import dataclasses, hashlib, json, sqlite3, sys
from pathlib import Path
try:
    from synapse_pt.cache.vectors import EmbeddingCache
    from synapse_pt.cache.texts import TextValueCache
    NEW = True
except ImportError:
    from synapse_pt.models.embedding_cache import EmbeddingCache
    from synapse_pt.models.text_cache import TextValueCache
    NEW = False
from synapse_pt.models.llm.cache import ResponseCache

def keys_of(path, table):
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    keys = [k for (k,) in conn.execute(f"SELECT key FROM {table} ORDER BY key")]
    conn.close()
    return keys

def text_values(cache, keys):
    if NEW:
        return cache.get_many(keys)
    marks = ",".join("?" * len(keys))
    rows = cache._conn.execute(f"SELECT key, value FROM derived WHERE key IN ({marks})", keys)
    return {key: json.loads(value) for key, value in rows}

def value_bytes(value):
    if hasattr(value, "numpy"):
        return value.numpy().tobytes()
    if dataclasses.is_dataclass(value):
        value = dataclasses.asdict(value)
    return json.dumps(value, sort_keys=True).encode()

def digest(path, table, cache, get):
    keys, h = keys_of(path, table), hashlib.sha256()
    for start in range(0, len(keys), 500):
        chunk = keys[start:start + 500]
        found = get(cache, chunk)
        assert len(found) == len(chunk), (path, start)
        for key in chunk:
            h.update(key.encode() + b"\0" + value_bytes(found[key]))
    return [len(keys), h.hexdigest()]

out = {}
for path, table, cls in json.loads(sys.argv[1]):
    cache = {"e": EmbeddingCache, "t": TextValueCache, "r": ResponseCache}[cls](path)
    getter = text_values if cls == "t" else (lambda c, k: c.get_many(k))
    out[path] = digest(path, table, cache, getter)
print(json.dumps(out))
'''


def side(src: Path, files: list[list[str]]) -> dict[str, list]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    done = subprocess.run([sys.executable, "-c", SIDE, json.dumps(files)], env=env, cwd=src,
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{src}: {done.stderr.strip().splitlines()[-1]}")
    return json.loads(done.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cache_dir", type=Path)
    parser.add_argument("--before", default="6066065")
    parser.add_argument("--llm", type=Path, default=None)
    args = parser.parse_args()
    embeddings = args.cache_dir / "embeddings" / "embeddings.sqlite"
    if not embeddings.is_file():
        embeddings = args.cache_dir / "embeddings.sqlite"
    files = [[str(embeddings), "embeddings", "e"], [str(args.cache_dir / "text.sqlite"),
                                                     "derived", "t"]]
    if args.llm is not None:
        files.append([str(args.llm), "responses", "r"])
    with tempfile.TemporaryDirectory() as tmp:
        archive = Path(tmp) / "before.tar"
        subprocess.run(["git", "archive", "-o", str(archive), args.before, "synapse_pt",
                        "configs", "studies"], cwd=ROOT, check=True)
        with tarfile.open(archive) as tar:
            tar.extractall(Path(tmp) / "src", filter="data")
        before = side(Path(tmp) / "src", files)
    after = side(ROOT, files)
    differ = 0
    for path, _, _ in files:
        same = before[path] == after[path]
        differ += not same
        print(f"{path}: before {args.before} {before[path][0]} rows {before[path][1][:16]}, "
              f"after {after[path][0]} rows {after[path][1][:16]}: "
              f"{'same' if same else 'DIFFERENT'}")
    return int(differ > 0)


if __name__ == "__main__":
    sys.exit(main())
