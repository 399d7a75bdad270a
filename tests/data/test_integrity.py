"""The data file against its upstream release: the shipped manifest, the same content under
another serialisation, a real difference named, and no warning on the upstream file."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import pytest

from synapse_pt.data.integrity import check_upstream, upstream_manifest
from synapse_pt.data.locomo import load_locomo
from synapse_pt.data.resolve import build_dataset

SHA256SUMS = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "SHA256SUMS"


def test_the_shipped_manifest_is_the_upstream_file(locomo_path):
    manifest = upstream_manifest("locomo10")
    raw = locomo_path.read_bytes()
    assert manifest["sha256"] == hashlib.sha256(raw).hexdigest()
    if SHA256SUMS.is_file():  # the data folder's own list, written by whoever placed the file
        sums = dict(line.split()[::-1] for line in SHA256SUMS.read_text().splitlines() if line)
        assert sums["locomo10.json"] == manifest["sha256"]
    canonical = json.dumps(json.loads(raw), sort_keys=True, ensure_ascii=False,
                           separators=(",", ":")).encode()
    assert manifest["content_sha256"] == hashlib.sha256(canonical).hexdigest()
    samples = json.loads(raw)
    assert list(manifest["fields"]) == [s["sample_id"] for s in samples]
    assert set(manifest["fields"]["conv-26"]) == set(samples[0])


def test_another_serialisation_is_the_same_and_a_change_is_named(locomo_path, tmp_path):
    samples = json.loads(locomo_path.read_text())
    manifest = upstream_manifest("locomo10")
    assert check_upstream(load_locomo(locomo_path), manifest).status == "identical"
    pretty = tmp_path / "pretty.json"
    pretty.write_text(json.dumps(samples, indent=1, ensure_ascii=False))
    assert check_upstream(load_locomo(pretty), manifest).status == "same_content"
    samples[3]["qa"][0]["answer"] = "something else"
    del samples[7]["event_summary"]
    changed = tmp_path / "changed.json"
    changed.write_text(json.dumps(samples))
    check = check_upstream(load_locomo(changed), manifest)
    assert check.status == "different"
    assert check.differences == [f"content edited: {samples[3]['sample_id']} (qa), "
                                 f"{samples[7]['sample_id']} (event_summary)"]
    assert "differs from the upstream data" in check.describe()


def test_the_upstream_file_loads_with_no_warning_and_says_what_it_is(locomo_path, caplog):
    cfg = {"name": "locomo10", "path": str(locomo_path), "allow_download": False}
    with caplog.at_level(logging.WARNING):
        dataset = build_dataset(cfg)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    assert dataset.upstream == "identical"


def test_a_changed_file_is_warned_about(locomo_path, tmp_path, caplog):
    samples = json.loads(locomo_path.read_text())
    samples[0]["qa"][0]["answer"] = "something else"
    changed = tmp_path / "changed.json"
    changed.write_text(json.dumps(samples))
    with caplog.at_level(logging.WARNING):
        dataset = build_dataset({"name": "locomo10", "path": str(changed),
                                 "allow_download": False})
    assert dataset.upstream == "different"
    assert "content edited: conv-26 (qa)" in caplog.text
    assert any("differs from the upstream data" in n for n in dataset.notes)


@pytest.mark.parametrize("gold", ["audited", "both"])
def test_the_audit_refuses_another_file(tmp_path, locomo_path, gold):
    from synapse_pt.data.resolve import build_audit

    samples = json.loads(locomo_path.read_text())
    samples[0]["qa"][0]["answer"] = "something else"
    changed = tmp_path / "changed.json"
    changed.write_text(json.dumps(samples))
    dataset = build_dataset({"name": "locomo10", "path": str(changed), "allow_download": False})
    with pytest.raises(ValueError, match="not it"):
        build_audit({"gold": gold}, dataset)
    assert build_audit({"gold": "official"}, dataset) is None
    with pytest.raises(ValueError, match="dataset.gold must be one of"):
        build_audit({"gold": "gold"}, dataset)


def _write(tmp_path: Path, name: str, samples: list) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(samples))
    return path


def test_conversations_missing_added_and_reordered_are_named_by_kind(locomo_path, tmp_path):
    """Issue 51: each kind of change is named as such (and never as a "sample")."""
    samples = json.loads(locomo_path.read_text())
    ids = [s["sample_id"] for s in samples]
    manifest = upstream_manifest("locomo10")

    def differences(changed: list) -> list[str]:
        check = check_upstream(load_locomo(_write(tmp_path, "x.json", changed)), manifest)
        assert check.status == "different"
        return check.differences

    assert differences(samples[1:]) == [f"conversations missing: {ids[0]}"]
    extra = json.loads(json.dumps(samples[0]))
    extra["sample_id"] = "conv-extra"
    assert differences([*samples, extra]) == ["conversations added: conv-extra"]
    assert differences([samples[1], samples[0], *samples[2:]]) == ["conversations reordered"]
    turns = json.loads(json.dumps(samples))
    turns[2]["conversation"]["session_1"][0]["text"] += " (edited)"
    assert differences(turns) == [f"content edited: {ids[2]} (conversation)"]
    assert not any("sample" in d for d in differences(samples[1:]))
