"""Data source resolution: explicit path, env var, candidates, cache, download, sample fallback."""

from __future__ import annotations

import functools
import http.server
import threading
from dataclasses import replace

import pytest

from synapse_pt.data import DatasetNotFoundError, load_dataset, resolve_dataset_path, sample_path
from synapse_pt.data.source import ENV_VAR, LOCOMO, sha256_file


@pytest.fixture
def no_env(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)


def test_explicit_path_wins(tmp_path, monkeypatch, locomo_path):
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "elsewhere.json"))
    src = resolve_dataset_path(str(locomo_path))
    assert src.path == locomo_path and src.origin == "path"
    with pytest.raises(DatasetNotFoundError, match="dataset.path='nope.json': no such file"):
        resolve_dataset_path("nope.json")


def test_env_var(monkeypatch, locomo_path, tmp_path):
    monkeypatch.setenv(ENV_VAR, str(locomo_path))
    assert resolve_dataset_path(None, cache_dir=tmp_path).origin == "env"
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "missing.json"))
    with pytest.raises(DatasetNotFoundError, match=f"{ENV_VAR}="):
        resolve_dataset_path(None, cache_dir=tmp_path)


def test_candidates_then_cache(no_env, tmp_path, locomo_path):
    src = resolve_dataset_path(None, candidates=[tmp_path / "x.json", locomo_path],
                               cache_dir=tmp_path, allow_download=False)
    assert src.origin == "candidate" and src.path == locomo_path
    (tmp_path / "locomo10.json").write_bytes(locomo_path.read_bytes())
    src = resolve_dataset_path(None, cache_dir=tmp_path, allow_download=False)
    assert src.origin == "cache"


def test_offline_without_file_is_one_clear_error(no_env, tmp_path):
    with pytest.raises(DatasetNotFoundError) as err:
        resolve_dataset_path(None, cache_dir=tmp_path,
                             file=replace(LOCOMO, url="http://127.0.0.1:9/locomo10.json"))
    msg = str(err.value)
    assert "downloading http://127.0.0.1:9/locomo10.json failed" in msg
    assert "dataset.path=" in msg and ENV_VAR in msg and str(tmp_path) in msg


def test_sample_fallback(no_env, tmp_path, caplog):
    src = resolve_dataset_path(None, cache_dir=tmp_path, allow_download=False, allow_sample=True)
    assert src.is_sample and src.path == sample_path()
    assert "sample conversation shipped with synapse_pt" in caplog.text
    ds = load_dataset(None, cache_dir=tmp_path, allow_download=False, allow_sample=True)
    assert ds.name == "sample" and ds.num_questions >= 12


def test_download_from_loopback_server(no_env, tmp_path, locomo_path):
    served = tmp_path / "served"
    served.mkdir()
    (served / "locomo10.json").write_bytes(locomo_path.read_bytes())
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    handler.log_message = lambda *a, **k: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/locomo10.json"
        cache = tmp_path / "cache"
        served_file = replace(LOCOMO, url=url)
        src = resolve_dataset_path(None, cache_dir=cache, file=served_file)
        assert src.origin == "download"
        assert sha256_file(src.path) == sha256_file(locomo_path)
        record = (cache / "locomo10.json.sha256").read_text()
        assert record.startswith(sha256_file(locomo_path)) and url in record
        # second time: served from the cache, no download
        server.shutdown()
        assert resolve_dataset_path(None, cache_dir=cache, file=served_file).origin == "cache"
    finally:
        server.server_close()
