"""W&B in offline mode: what a run writes (config, tags, summary metrics, tables, files), read back
from the offline run folder, and that a run which crashes still finishes its W&B run."""

from __future__ import annotations

import json
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_configs import make_cfg  # tests/ is on sys.path (rootdir conftest)

wandb = pytest.importorskip("wandb")
from wandb.proto import wandb_internal_pb2 as pb  # noqa: E402

FAST = ("dataset=sample", "embedder=hashing", "smoke=true", "device=cpu", "logger=wandb",
        "logger.mode=offline")
BLOCK = 32 * 1024  # the .wandb file is a LevelDB-style log of protobuf ``Record``s
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def read_records(path: Path) -> Iterator[pb.Record]:
    """Records of a ``run-<id>.wandb`` file (wandb 0.31 has no Python reader of its own): a 7-byte
    file header (``:W&B``, magic, version), then 32 KiB blocks of chunks, each with a 7-byte
    header (crc32, length, type), a record split over FIRST/MIDDLE/LAST chunks when needed."""
    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path}: not a W&B transaction log"
    pos, pending = 7, b""
    while pos + 7 <= len(data):
        if BLOCK - pos % BLOCK < 7:  # block trailer: padding
            pos += BLOCK - pos % BLOCK
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind == FULL:
            payload = chunk
        elif kind in (FIRST, MIDDLE):
            pending += chunk
            continue
        elif kind == LAST:
            payload, pending = pending + chunk, b""
        else:  # zero padding at the end of a block
            pos += (BLOCK - pos % BLOCK) % BLOCK
            continue
        record = pb.Record()
        record.ParseFromString(payload)
        yield record


def _key(item) -> str:
    return item.key or "/".join(item.nested_key)


def offline_run(output_dir: Path, timeout_s: float = 30.0) -> tuple[Path, list[pb.Record]]:
    """The offline run's folder and its records, once W&B's writer has flushed the exit record
    (it writes from a service process: on a loaded machine the file can lag ``finish``)."""
    runs = sorted((output_dir / "wandb").glob("offline-run-*"))
    assert len(runs) == 1, f"expected one offline run under {output_dir / 'wandb'}, got {runs}"
    deadline = time.monotonic() + timeout_s
    while True:
        logs = [p for p in runs[0].glob("run-*.wandb") if p.stat().st_size >= 7]
        records = list(read_records(logs[0])) if logs else []
        if any(r.WhichOneof("record_type") == "exit" for r in records):
            return runs[0], records
        if time.monotonic() > deadline:
            raise AssertionError(f"{runs[0]}: no exit record after {timeout_s:.0f} s "
                                 f"({len(records)} records)")
        time.sleep(0.2)


@pytest.fixture
def wandb_env(tmp_path, monkeypatch):
    """Keep W&B quiet and its settings/caches inside the test's folder."""
    for var, sub in (("WANDB_CONFIG_DIR", "config"), ("WANDB_CACHE_DIR", "cache"),
                     ("WANDB_DATA_DIR", "data")):
        monkeypatch.setenv(var, str(tmp_path / "wandb_home" / sub))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_MODE", raising=False)
    yield
    assert wandb.run is None, "a W&B run was left open"


def test_offline_run_logs_config_metrics_tables(tmp_path, wandb_env):
    from synapse_pt.commands.run import run
    from synapse_pt.eval.records.record import flatten_metrics

    out = tmp_path / "run"
    cfg = make_cfg(*FAST, "experiment=no_gate", f"paths.cache_dir={tmp_path / 'cache'}",
                   output_dir=str(out))
    metrics = run(cfg)
    folder, records = offline_run(out)

    kinds = [r.WhichOneof("record_type") for r in records]
    run_rec = next(r.run for r in records if r.WhichOneof("record_type") == "run")
    assert run_rec.project == "synapse_pt" and run_rec.run_group == "no_gate"
    assert {"ablation", "no_gate"} <= set(run_rec.tags)
    config = {u.key: json.loads(u.value_json) for u in run_rec.config.update}
    assert config["experiment_name"] == "no_gate"
    assert config["memory"]["params"]["tau_gate"] == 0.0  # the resolved config
    assert config["paths"]["output_dir"] == str(out)

    summary: dict[str, object] = {}
    for r in records:
        if r.WhichOneof("record_type") == "summary":
            summary.update({_key(u): json.loads(u.value_json) for u in r.summary.update})
    for key, value in flatten_metrics(metrics).items():
        assert summary[key] == pytest.approx(value), key
    assert summary["retrieval/gated_rate"] == 0.0
    assert "timing/ingest_seconds" in summary
    for table in ("tables/main_recall@10", "predictions"):
        assert summary[f"{table}/_type"] == "table-file"
    assert summary["predictions/nrows"] == metrics["identity"]["dataset"]["questions"]

    media = sorted(p.name for p in (folder / "files" / "media" / "table").rglob("*.table.json"))
    assert any(n.startswith("main_recall@10") for n in media)
    assert any(n.startswith("predictions") for n in media)
    saved = json.loads((folder / "files" / "metrics.json").read_text())
    assert saved["identity"]["experiment"] == "no_gate"
    exit_rec = next(r.exit for r in records if r.WhichOneof("record_type") == "exit")
    assert exit_rec.exit_code == 0
    assert kinds.index("exit") > kinds.index("run")


def test_crashing_run_still_finishes_wandb(tmp_path, wandb_env, monkeypatch):
    import synapse_pt.commands.run as run_module
    from synapse_pt.commands.tracking import WandbTracker

    finished: list[int] = []
    original = WandbTracker.finish

    def spy(self, exit_code: int = 0) -> None:
        finished.append(exit_code)
        original(self, exit_code)

    def broken_memory(*args, **kwargs):  # a crash after the W&B run started
        raise RuntimeError("memory exploded")

    monkeypatch.setattr(WandbTracker, "finish", spy)
    monkeypatch.setattr(run_module, "run_memory", broken_memory)
    out = tmp_path / "crash"
    cfg = make_cfg(*FAST, f"paths.cache_dir={tmp_path / 'cache'}", output_dir=str(out))
    with pytest.raises(RuntimeError, match="memory exploded"):
        run_module.run(cfg)
    assert finished == [1]
    assert wandb.run is None
    _, records = offline_run(out)
    exit_rec = next(r.exit for r in records if r.WhichOneof("record_type") == "exit")
    assert exit_rec.exit_code == 1


def test_logger_modes(tmp_path, wandb_env):
    from synapse_pt.commands.tracking import Tracker, make_tracker

    assert type(make_tracker({"name": "none"}, config={}, output_dir=tmp_path, tags=[],
                             run_name="x")) is Tracker
    with pytest.raises(ValueError, match="logger.mode must be online, offline or disabled"):
        make_tracker({"name": "wandb", "mode": "sometimes"}, config={}, output_dir=tmp_path,
                     tags=[], run_name="x")
    with pytest.raises(ValueError, match="unknown logger"):
        make_tracker({"name": "tensorboard"}, config={}, output_dir=tmp_path, tags=[],
                     run_name="x")
    tracker = make_tracker({"name": "wandb", "mode": "disabled"}, config={"a": 1},
                           output_dir=tmp_path, tags=["t"], run_name="x")
    tracker.log_metrics({"m": 1.0})
    tracker.finish(0)
    assert not (tmp_path / "wandb").exists() or not list((tmp_path / "wandb").glob("offline-*"))
