"""Run outputs: ``predictions.parquet``, ``metrics.json``, ``timing.json``, ``spend.json`` and
``tables/`` in the run's own folder (:func:`write_run_outputs`; ``config.yaml`` is written when
the folder is claimed).

Files hold only what the configuration and data determine (no wall-clock times), so a resumed run
writes byte-identical files; timings go to ``timing.json``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from synapse_pt.common.resources import checkout_root, version
from synapse_pt.eval.qa.scorers import table_columns
from synapse_pt.eval.qa.scorers.judge import JUDGE_PROTOCOLS
from synapse_pt.eval.qa.scorers.peer_rules import PEER_RULES

#: every file a run writes into its folder, and its folder of tables
RUN_FILES = ("config.yaml", "metrics.json", "predictions.parquet", "timing.json", "spend.json")
TABLES = "tables"

PREDICTION_COLUMNS = [
    "sample_id", "qa_index", "category", "question", "gold", "adversarial_answer", "evidence",
    "prediction", "retrieved", "retrieved_turns", "c_ret", "gate_score", "gated",
    "context_tokens", "prompt_tokens", "completion_tokens", "latency_s",
]

#: Arrow types of the fixed columns: the same schema whether or not an LLM ran (an all-null
#: ``prediction`` column is still a string column).
PREDICTION_SCHEMA: dict[str, pa.DataType] = {
    "sample_id": pa.string(), "qa_index": pa.int64(), "category": pa.int64(),
    "question": pa.string(), "gold": pa.string(), "adversarial_answer": pa.string(),
    "evidence": pa.list_(pa.string()), "prediction": pa.string(),
    "retrieved": pa.list_(pa.string()), "retrieved_turns": pa.list_(pa.string()),
    "c_ret": pa.float64(), "gate_score": pa.float64(),
    "gated": pa.bool_(),
    "context_tokens": pa.int64(), "prompt_tokens": pa.int64(), "completion_tokens": pa.int64(),
    "latency_s": pa.float64(),
}

#: Metric columns in the order they are written (under ``eval.judges`` each judge's
#: ``judge_<protocol>``, ``judge_<protocol>_std``, ``n_judge_<protocol>_failures`` follow, in
#: the order of ``JUDGE_PROTOCOLS``; others follow, sorted); all float64 but the per-question
#: counts of unreadable judge replies.
METRIC_ORDER = [*table_columns(), "judge", "judge_std", "n_judge_failures"]
COUNT_METRICS = {"n_judge_failures": pa.int64(),
                 **{f"n_judge_{p}_failures": pa.int64() for p in JUDGE_PROTOCOLS}}
_JUDGE_ORDER = [c for p in JUDGE_PROTOCOLS
                for c in (f"judge_{p}", f"judge_{p}_std", f"n_judge_{p}_failures")]
#: the columns a run scored under the audited gold adds (``dataset.gold``): which audit status a
#: question has, and in a ``both`` run the audited gold beside the official
AUDIT_SCHEMA: dict[str, pa.DataType] = {
    "audit_status": pa.string(), "audited_gold": pa.string(),
    "audited_evidence": pa.list_(pa.string())}
#: what a run writes into every row about itself: ``build``, the memory's build (e.g.
#: ``gaama-llm-free``), so a row read on its own names an LLM-free stand-in as such
RUN_SCHEMA: dict[str, pa.DataType] = {"build": pa.string()}


def column_type(col: str) -> pa.DataType:
    """The Arrow type of a column past :data:`PREDICTION_COLUMNS` (metrics are float64)."""
    if col in RUN_SCHEMA:
        return RUN_SCHEMA[col]
    if col in AUDIT_SCHEMA:
        return AUDIT_SCHEMA[col]
    return COUNT_METRICS.get(col.removeprefix("audited_"), pa.float64())


def code_identity() -> dict[str, str]:
    """Which code made a run: the package's version and, in a source checkout, its commit
    (:func:`git_commit`); an installed package has no commit at hand (``unknown``)."""
    root = checkout_root()
    return {"git_commit": git_commit(root) if root is not None else "unknown",
            "version": version()}


def git_commit(root: str | Path | None = None) -> str:
    """The checkout's commit, ``-dirty`` appended when tracked files have changes; ``unknown``
    outside a git checkout."""
    try:
        cwd = str(root) if root else None
        sha = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                             cwd=cwd, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, cwd=cwd, check=True).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


#: The modules whose prompt texts a run's answers, extraction and judge depend on, besides those of
#: every registered answer step and judge (:func:`prompt_modules`).
PROMPT_MODULES = ("synapse_pt.eval.qa.prompts", "synapse_pt.graph.extraction",
                  "synapse_pt.eval.qa.scorers.judge", "synapse_pt.memory.gaama.llm_build",
                  "synapse_pt.memory.membox.llm_build", "synapse_pt.models.structured")
_PROMPT_SUFFIXES = ("PROMPT", "TEMPLATE", "INSTRUCTION", "STYLES", "EVIDENCE", "REPLY")


def prompt_modules() -> list[str]:
    """:data:`PROMPT_MODULES` and the modules of every registered answer step and judge
    (:mod:`synapse_pt.steps`)."""
    from synapse_pt import steps

    found = [fn.__module__ for s in steps.ANSWER_STEPS.values()
             for fn in (s.messages, s.upstream_messages) if fn is not None]
    found += [type(j).__module__ for j in steps.JUDGES.values()]
    return list(dict.fromkeys([*PROMPT_MODULES, *found]))


def prompt_hashes() -> dict[str, str]:
    """``{module.NAME: sha256[:12]}`` of every prompt text (module-level string, or mapping of
    strings, whose name ends in PROMPT, TEMPLATE, INSTRUCTION, ...), the module named by its path
    in the package (``memory.gaama.llm_build.FACT_PROMPT``: GAAMA's and Membox's modules share
    their file names): two runs whose hashes differ asked their models different questions,
    whatever their configs say."""
    import importlib

    out: dict[str, str] = {}
    for name in prompt_modules():
        module = importlib.import_module(name)
        for attr, value in sorted(vars(module).items()):
            if attr.startswith("_") or not attr.isupper() or not attr.endswith(_PROMPT_SUFFIXES):
                continue
            if isinstance(value, Mapping):
                value = json.dumps(dict(value), sort_keys=True)
            if isinstance(value, str):
                key = f"{name.removeprefix('synapse_pt.')}.{attr}"
                out[key] = hashlib.sha256(value.encode()).hexdigest()[:12]
    return out


def config_hash(resolved: Mapping[str, Any]) -> str:
    """sha256 (first 16 hex digits) of the resolved config as canonical JSON."""
    blob = json.dumps(resolved, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


#: Dotted config keys that cannot change what a run computes: how it is asked to write, spending
#: caps, request concurrency, timeouts and retries, the experiment tracker and its tags. A run
#: folder records them (``config.yaml``) but does not compare them, so a run stopped by
#: ``llm.max_cost_usd`` resumes with a higher cap into the same folder.
RESULT_NEUTRAL_KEYS: tuple[str, ...] = (
    "overwrite", "tags", "logger",
    "llm.max_cost_usd",
    "llm.backend.max_concurrency", "llm.backend.timeout_s", "llm.backend.max_retries",
    "llm.backend.backoff_s",
)


def _drop(tree: dict[str, Any], dotted: str) -> None:
    """Remove ``a.b.c`` from a nested dict (nothing where absent)."""
    *parents, leaf = dotted.split(".")
    node: Any = tree
    for part in parents:
        node = node.get(part) if isinstance(node, dict) else None
    if isinstance(node, dict):
        node.pop(leaf, None)


def without_result_neutral(resolved: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy of the resolved config without :data:`RESULT_NEUTRAL_KEYS` (absent keys are
    skipped)."""
    out: dict[str, Any] = json.loads(json.dumps(resolved, default=str))
    for dotted in RESULT_NEUTRAL_KEYS:
        _drop(out, dotted)
    return out


#: Dotted config keys that say where files are, not what a run computes: the roots of ``paths``
#: (the run's own folder, the caches, the checkout), the data file and where it is looked for (the
#: data is compared by its content sha256, ``identity.dataset.content_sha256``), the caches' files
#: and the related systems' sources (checked against their pinned sha256 as they are read). A run
#: folder moved elsewhere, a changed ``SYNAPSE_CACHE`` or a copy of the data file at another path
#: is the same run.
PATH_KEYS: tuple[str, ...] = (
    "paths", "dataset.path", "dataset.candidates", "dataset.cache_dir", "dataset.audit.path",
    "dataset.audit.candidates", "dataset.audit.cache_dir", "embedder.cache_dir",
    "embedder.onnx_dir", "llm.cache", "eval.upstream_path", "memory.upstream_path",
)
#: the roots of ``paths``, longest first when they nest (a run's folder below the checkout)
PATH_ROOTS = ("output_dir", "cache_dir", "root_dir")


def run_config(resolved: Mapping[str, Any]) -> dict[str, Any]:
    """What two runs must share to write the same outputs: a deep copy of the resolved config
    without :data:`RESULT_NEUTRAL_KEYS` and :data:`PATH_KEYS`, and any other value that is a file
    below one of its own roots (:data:`PATH_ROOTS`, e.g. ``embedder=mpnet``'s weights in the
    cache) written relative to that root (``${paths.cache_dir}/models/all-mpnet-base-v2``)."""
    paths = resolved.get("paths") if isinstance(resolved.get("paths"), Mapping) else {}
    roots = sorted(((f"${{paths.{k}}}", str(paths[k]).rstrip("/")) for k in PATH_ROOTS
                    if isinstance(paths.get(k), str) and paths[k]),
                   key=lambda item: -len(item[1]))

    def relative(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: relative(v) for k, v in value.items()}
        if isinstance(value, list):
            return [relative(v) for v in value]
        if isinstance(value, str):
            for name, root in roots:
                if value == root or value.startswith(root + "/"):
                    return name + value[len(root):]
        return value

    out = without_result_neutral(resolved)
    for dotted in PATH_KEYS:
        _drop(out, dotted)
    return relative(out)


def result_neutral_changes(before: Mapping[str, Any],
                           after: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
    """``{dotted key: (before, after)}`` for the :data:`RESULT_NEUTRAL_KEYS` whose values differ."""
    missing = object()
    changes: dict[str, tuple[Any, Any]] = {}
    for dotted in RESULT_NEUTRAL_KEYS:
        values = []
        for conf in (before, after):
            node: Any = conf
            for part in dotted.split("."):
                node = node.get(part, missing) if isinstance(node, Mapping) else missing
            values.append(None if node is missing else node)
        if values[0] != values[1]:
            changes[dotted] = (values[0], values[1])
    return changes


def _clean(obj: Any) -> Any:
    """NaN -> ``None`` (``json`` would write the invalid token NaN), tuples -> lists."""
    if isinstance(obj, float):
        return None if math.isnan(obj) else obj
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


@contextmanager
def naming(path: Path) -> Iterator[None]:
    """An :class:`OSError` raised without a file name while ``path`` is written (pyarrow's
    "Error writing bytes to file", a full disk met by ``write()``) raised again with it."""
    try:
        yield
    except OSError as err:
        if err.filename is not None:
            raise
        reason = os.strerror(err.errno) if err.errno else str(err)
        raise OSError(err.errno, reason, str(path)) from err


def write_json(path: Path, obj: Any) -> None:
    """Canonical JSON (sorted keys, NaN as null), written atomically."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    with naming(tmp):
        tmp.write_text(json.dumps(_clean(obj), indent=2, sort_keys=True, default=str) + "\n")
    tmp.replace(path)


def _metric_key(col: str) -> tuple[int, int, int, str]:
    if col in RUN_SCHEMA:
        return (-2, 0, list(RUN_SCHEMA).index(col), col)
    if col in AUDIT_SCHEMA:
        return (-1, 0, list(AUDIT_SCHEMA).index(col), col)
    if col in METRIC_ORDER:
        return (0, 0, METRIC_ORDER.index(col), col)
    if col in _JUDGE_ORDER:
        return (0, 1, _JUDGE_ORDER.index(col), col)
    if col.startswith("recall@") and col[7:].isdigit():
        return (1, 0, int(col[7:]), col)  # recall@k by k
    if col.startswith("recall@") and col.endswith("tok") and col[7:-3].isdigit():
        return (1, 1, int(col[7:-3]), col)  # then recall@<T>tok by T
    rule, _, k = col.removeprefix("peer_").rpartition("@")
    if col.startswith("peer_") and rule in PEER_RULES and k.isdigit():
        return (1, 2 + list(PEER_RULES).index(rule), int(k), col)  # the peers' rules, by k
    return (2, 0, 0, col)


def predictions_table(df: pd.DataFrame) -> pa.Table:
    """The predictions frame as an Arrow table with a fixed schema: the columns of
    :data:`PREDICTION_COLUMNS`, then the metric columns (:data:`METRIC_ORDER`, recall@k by k,
    anything else sorted)."""
    missing = [c for c in PREDICTION_COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"predictions frame lacks columns {missing}; has {list(df.columns)}")
    metric_cols = sorted((c for c in df.columns if c not in PREDICTION_COLUMNS), key=_metric_key)
    fields = [pa.field(c, PREDICTION_SCHEMA[c]) for c in PREDICTION_COLUMNS]
    fields += [pa.field(c, column_type(c)) for c in metric_cols]
    schema = pa.schema(fields)
    frame = df[PREDICTION_COLUMNS + metric_cols].reset_index(drop=True)
    # pandas metadata is left out: it records the frame's index and pandas version, not data
    table = pa.Table.from_pandas(frame, schema=schema, preserve_index=False)
    return table.replace_schema_metadata()


def write_predictions(path: Path, df: pd.DataFrame) -> None:
    """``predictions.parquet``: one row per question, fixed schema (see :func:`predictions_table`).

    Written to a temporary file and moved into place, so an interrupted write leaves no torn file;
    the bytes depend only on the rows (no timestamps or library metadata beyond the writer name).
    """
    table = predictions_table(df)
    tmp = path.with_suffix(".parquet.tmp")
    with naming(tmp):
        pq.write_table(table, tmp, compression="zstd")
    tmp.replace(path)


def write_tables(folder: Path, tables: Mapping[str, pd.DataFrame]) -> list[Path]:
    """Each table as ``<name>.md`` and ``<name>.tex`` in ``folder``."""
    from synapse_pt.eval.reports.tables import to_latex, to_markdown

    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, table in tables.items():
        for suffix, text in ((".md", to_markdown(table)), (".tex", to_latex(table))):
            p = folder / f"{name}{suffix}"
            with naming(p):
                p.write_text(text)
            written.append(p)
    return written


def write_run_outputs(folder: Path, *, predictions: pd.DataFrame, metrics: Mapping[str, Any],
                      timings: Mapping[str, float], spend: Mapping[str, Any],
                      tables: Mapping[str, pd.DataFrame]) -> None:
    """A run's outputs besides its ``config.yaml``: ``predictions.parquet``
    (:func:`write_predictions`), ``metrics.json``, ``timing.json``, ``spend.json`` and
    ``tables/`` (:func:`write_tables`)."""
    write_predictions(folder / "predictions.parquet", predictions)
    write_json(folder / "metrics.json", metrics)
    write_json(folder / "timing.json", timings)
    write_json(folder / "spend.json", spend)
    write_tables(folder / TABLES, tables)
