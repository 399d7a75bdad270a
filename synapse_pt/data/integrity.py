"""Is the loaded file the upstream data? File hash, content hash, and what differs.

A dataset file is compared with the manifest of its upstream release shipped in the package
(``manifests/<name>.json``: the file's sha256, the content sha256 of the parsed data as canonical
JSON, and the content sha256 of every top-level field of every sample; for a dataset of several
files, each file's sha256, as the data folder's ``SHA256SUMS`` lists them). Three outcomes:

* ``identical``: the upstream file byte for byte;
* ``same_content``: another serialisation of the same data (an earlier shared copy of LoCoMo-10,
  sha256 9c4cc1fa..., was one): recognised as the same, said once, no warning;
* ``different``: the data differs; :func:`check_upstream` names what, by kind: conversations
  missing, added or reordered, and content edited (the top-level fields of a conversation whose
  content differs: ``qa`` its questions, ``conversation`` its turns).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from synapse_pt.data.schema import Dataset

__all__ = ["DataCheck", "check_upstream", "manifest_of", "upstream_manifest"]


def manifest_of(dataset: Dataset) -> dict[str, Any]:
    """The manifest of a loaded dataset (what ``manifests/<name>.json`` holds for upstream)."""
    return {"sha256": dataset.sha256, "content_sha256": dataset.content_sha256,
            "fields": dataset.field_sha256}


def upstream_manifest(name: str) -> dict[str, Any] | None:
    """The shipped manifest of the upstream release ``name`` (``None`` when none is shipped)."""
    path = resources.files("synapse_pt.data").joinpath(f"manifests/{name}.json")
    if not path.is_file():
        return None
    return json.loads(path.read_text(encoding="utf-8"))


@dataclass(frozen=True)
class DataCheck:
    """How a loaded file compares with its upstream release."""

    status: str  # "identical" | "same_content" | "different" | "no_manifest"
    differences: list[str] = field(default_factory=list)

    def describe(self) -> str:
        if self.status == "identical":
            return "the upstream file, byte for byte"
        if self.status == "same_content":
            return "the upstream data under another serialisation (same content sha256)"
        if self.status == "no_manifest":
            return "no upstream manifest to compare with"
        shown = "; ".join(self.differences[:12])
        more = "" if len(self.differences) <= 12 else f"; ... ({len(self.differences) - 12} more)"
        return f"differs from the upstream data: {shown}{more}"


def check_upstream(dataset: Dataset, manifest: dict[str, Any] | None) -> DataCheck:
    """Compare ``dataset`` (as loaded, before any subset) with an upstream ``manifest``."""
    if manifest is None:
        return DataCheck("no_manifest")
    if "files" in manifest:  # a dataset of several files: each against its upstream sha256
        ours, theirs = dataset.file_sha256, manifest["files"]
        differences = [f"{f} missing" for f in theirs if f not in ours]
        differences += [f"{f} not upstream" for f in ours if f not in theirs]
        differences += [f"{f} differs (sha256 {ours[f][:12]}...)" for f in theirs
                        if f in ours and ours[f] != theirs[f]]
        return DataCheck("different", differences) if differences else DataCheck("identical")
    if dataset.sha256 == manifest["sha256"]:
        return DataCheck("identical")
    if dataset.content_sha256 == manifest["content_sha256"]:
        return DataCheck("same_content")
    ours, theirs = dataset.field_sha256, manifest["fields"]
    order = dataset.source_order or list(ours)
    missing = [s for s in theirs if s not in ours]
    added = [s for s in order if s not in theirs]
    edited = {}
    for s in (s for s in theirs if s in ours):
        fields = sorted(set(theirs[s]) | set(ours[s]))
        changed = [f for f in fields if theirs[s].get(f) != ours[s].get(f)]
        if changed:
            edited[s] = changed
    differences = []
    if missing:
        differences.append(f"conversations missing: {_listed(missing)}")
    if added:
        differences.append(f"conversations added: {_listed(added)}")
    if [s for s in order if s in theirs] != [s for s in theirs if s in ours]:
        differences.append("conversations reordered")
    if edited:
        differences.append("content edited: " + _listed(
            [f"{s} ({', '.join(fields)})" for s, fields in edited.items()]))
    if not differences:  # the content hash differs though no field of a sample does
        differences.append("content edited (the samples' fields are upstream's)")
    return DataCheck("different", differences)


def _listed(names: list[str], shown: int = 6) -> str:
    """``a, b, c`` (at most ``shown`` names, then how many in all)."""
    more = "" if len(names) <= shown else f", ... ({len(names)} in all)"
    return ", ".join(names[:shown]) + more
