"""Where the dataset comes from.

Resolution order (first hit wins):

1. an explicit path (config ``dataset.path``);
2. the ``SYNAPSE_DATA`` environment variable;
3. candidate paths from config (e.g. ``../shared/data/locomo10.json`` beside the repo);
4. the cache folder (``~/.cache/synapse_pt/locomo10.json`` unless configured);
5. a download of the upstream file into the cache folder (progress bar, sha256 recorded beside it);
6. if allowed, the small sample conversation shipped in the package, with a warning that says so.

With every step failing and no fallback allowed, one :class:`DatasetNotFoundError` explains how to
provide the file.
"""

from __future__ import annotations

import hashlib
import logging
import os
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from tqdm import tqdm

from synapse_pt.common.resources import checkout_root

from .errors import DatasetNotFoundError

log = logging.getLogger(__name__)

ENV_VAR = "SYNAPSE_DATA"
LOCOMO_URL = "https://raw.githubusercontent.com/snap-research/locomo/main/data/locomo10.json"
LOCOMO_FILENAME = "locomo10.json"
# sha256 of the upstream LoCoMo-10 release file (snap-research/locomo data/locomo10.json), byte for
# byte what a download gives (an earlier shared copy, 9c4cc1fa..., re-serialised the same content).
LOCOMO_SHA256 = "79fa87e90f04081343b8c8debecb80a9a6842b76a7aa537dc9fdf651ea698ff4"
#: the dataset note of a run that fell back to the shipped sample (its dataset is named "sample")
SAMPLE_FALLBACK_NOTE = "fell back to the sample conversation shipped with synapse_pt"
DEFAULT_CACHE_DIR = Path(os.environ.get("SYNAPSE_CACHE", Path.home() / ".cache" / "synapse_pt"))


@dataclass(frozen=True)
class ResolvedSource:
    path: Path
    origin: str  # "path", "env", "candidate", "cache", "download", "sample"

    @property
    def is_sample(self) -> bool:
        return self.origin == "sample"


@dataclass(frozen=True)
class DatasetFile:
    """The dataset file (or folder) :func:`resolve_dataset_path` looks for: its ``filename`` in
    the cache, the upstream ``url`` it downloads from and the ``expected_sha256`` it checks (a
    mismatch is recorded and warned about), the environment variable ``env_var`` and config
    ``key`` that name it; ``folder``: a folder of files (REALTALK, BEAM), found the same way
    but never downloaded."""

    filename: str = LOCOMO_FILENAME
    url: str | None = LOCOMO_URL
    expected_sha256: str | None = LOCOMO_SHA256
    env_var: str = ENV_VAR
    key: str = "dataset.path"
    folder: bool = False


#: LoCoMo-10 as upstream releases it
LOCOMO = DatasetFile()


def default_locomo_path() -> str:
    """For scripts: ``$SYNAPSE_DATA``, else ``../shared/data/locomo10.json`` beside the checkout
    (beside the working folder for an installed package)."""
    root = checkout_root() or Path.cwd()
    return os.environ.get(ENV_VAR) or str(root.parent / "shared" / "data" / LOCOMO_FILENAME)


def sample_path() -> Path:
    """The small conversation shipped with the package (for smoke runs and tests)."""
    return Path(str(resources.files("synapse_pt.data").joinpath("sample/sample_conversation.json")))


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def download(url: str, dest: Path, *, timeout_s: float = 60.0,
             expected_sha256: str | None = None) -> Path:
    """Download ``url`` to ``dest`` with a progress bar; write ``dest.sha256`` beside it.

    The file is written to a temporary name and renamed only when complete. A checksum different
    from ``expected_sha256`` is logged as a warning (upstream may re-serialise the same data) and
    recorded, never hidden.
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_suffix(dest.suffix + ".part")
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        total = int(response.headers.get("Content-Length") or 0) or None
        with open(tmp, "wb") as out, tqdm(total=total, unit="B", unit_scale=True,
                                          desc=f"download {dest.name}",
                                          disable=None) as bar:  # off when not a TTY
            for chunk in iter(lambda: response.read(1 << 16), b""):
                out.write(chunk)
                bar.update(len(chunk))
    tmp.replace(dest)
    digest = sha256_file(dest)
    dest.with_suffix(dest.suffix + ".sha256").write_text(f"{digest}  {dest.name}\n{url}\n")
    if expected_sha256 and digest != expected_sha256:
        log.warning("%s: sha256 %s differs from the expected %s (recorded in %s.sha256)",
                    dest, digest, expected_sha256, dest.name)
    return dest


def resolve_dataset_path(path: str | os.PathLike | None = None, *,
                         candidates: Sequence[str | os.PathLike] = (),
                         cache_dir: str | os.PathLike | None = None,
                         allow_download: bool = True, allow_sample: bool = False,
                         file: DatasetFile = LOCOMO) -> ResolvedSource:
    """Find ``file`` (see the module docstring for the order): the explicit ``path``, its
    environment variable, the ``candidates``, the ``cache_dir``, a download (``allow_download``),
    the shipped sample (``allow_sample``). ``file`` names what is looked for (another file than
    LoCoMo's, e.g. the audit's, has its own, :class:`DatasetFile`)."""
    kind = "folder" if file.folder else "file"

    def exists(p: Path) -> bool:
        return p.is_dir() if file.folder else p.is_file()

    if path is not None and str(path) != "":
        p = Path(path).expanduser()
        if not exists(p):
            raise DatasetNotFoundError(f"{file.key}={str(path)!r}: no such {kind}")
        return ResolvedSource(p, "path")
    env = os.environ.get(file.env_var)
    if env:
        p = Path(env).expanduser()
        if not exists(p):
            raise DatasetNotFoundError(f"{file.env_var}={env!r}: no such {kind}")
        return ResolvedSource(p, "env")
    for cand in candidates:
        p = Path(cand).expanduser()
        if exists(p):
            return ResolvedSource(p, "candidate")
    cache = Path(cache_dir).expanduser() if cache_dir else DEFAULT_CACHE_DIR
    cached = cache / file.filename
    if exists(cached):
        return ResolvedSource(cached, "cache")
    if file.folder:
        raise DatasetNotFoundError(
            f"No {file.filename} folder found. Provide it in one of these ways: pass "
            f"{file.key}=/path/to/{file.filename}; set {file.env_var}=/path/to/{file.filename}; "
            f"or copy it to {cached}"
            + (f" (upstream: {file.url})." if file.url else "."))
    problem = "downloads are disabled (dataset.allow_download=false)"
    if allow_download and file.url:
        try:
            return ResolvedSource(
                download(file.url, cached, expected_sha256=file.expected_sha256), "download")
        except (urllib.error.URLError, OSError, TimeoutError) as err:
            problem = f"downloading {file.url} failed: {err}"
    if allow_sample:
        log.warning("No LoCoMo file found (%s); using the small sample conversation shipped with "
                    "synapse_pt (%s). Results on it are smoke tests, not benchmark numbers.",
                    problem, sample_path())
        return ResolvedSource(sample_path(), "sample")
    raise DatasetNotFoundError(
        f"No dataset file found and {problem}. Provide {file.filename} in one of these ways: "
        f"pass {file.key}=/path/to/{file.filename}; set {file.env_var}=/path/to/"
        f"{file.filename}; or copy the file to {cached} (upstream: {file.url})."
    )
