"""Where the tests find the related systems' upstream files (issues 44, 57): ``$SYNAPSE_UPSTREAM``,
else ``../shared/data/upstream`` beside the checkout (GAAMA's prompt files and ``templates.json``,
the templates of the two systems' Python sources as data); tests that need them are skipped
without. The Python sources themselves are not in the shared data: tests that read them need
``$SYNAPSE_UPSTREAM_SOURCES``, a folder holding ``gaama/`` and ``membox/`` at the pinned commits
(``SOURCES``), and are skipped without.

Every reader here takes its own route to the text (a regular expression, :mod:`json`), not the
loader's, so a loader that misreads a template fails the tests that compare with these."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from synapse_pt.data import upstream

ROOT = Path(os.environ.get(upstream.ENV_VAR) or upstream.default_root())
PRESENT = (ROOT / "gaama" / "prompts").is_dir() and (ROOT / upstream.TEMPLATES).is_file()
needs_upstream = pytest.mark.skipif(not PRESENT, reason=f"upstream files not found at {ROOT}")
SOURCES = Path(os.environ.get("SYNAPSE_UPSTREAM_SOURCES") or "/nonexistent")
needs_sources = pytest.mark.skipif(
    not (SOURCES / "membox" / "membox.py").is_file(),
    reason="the upstream Python sources are not at hand (set SYNAPSE_UPSTREAM_SOURCES)")


def template_entry(file: str, name: str, function: str | None = None) -> dict:
    """The entry of ``templates.json`` for ``name`` (in ``function``) of the source ``file``,
    read with :mod:`json`."""
    import json

    entries = json.loads((ROOT / upstream.TEMPLATES).read_text())["templates"]
    (entry,) = [e for e in entries if e["file"] == file and e["name"] == name
                and e.get("function") == function]
    return entry


def gaama_answer_md() -> str:
    """GAAMA's answer prompt as the file holds it."""
    return (ROOT / "gaama" / "prompts" / "answer_from_memory.md").read_text()


def membox_qa_template() -> str:
    """Membox's ``PROMPT_QA_ANSWER`` as ``templates.json`` holds it (read with :mod:`json`)."""
    return membox_template("PROMPT_QA_ANSWER")


def membox_template(name: str) -> str:
    """The string constant ``name`` of Membox's ``membox.py`` (a ``class Config`` attribute), as
    ``templates.json`` holds it (read with :mod:`json`, not the loader)."""
    return template_entry("membox/membox.py", name)["text"]


def template_head(template: str) -> str:
    """The text of a ``str.format`` template before its first field (``{{`` unescaped): what
    every prompt rendered from it starts with."""
    import string

    literal, *_ = next(iter(string.Formatter().parse(template)))
    return literal


def unformat(template: str, text: str) -> dict[str, str]:
    """The field values of ``text`` rendered from ``template`` by ``str.format`` (the inverse,
    by a regular expression built from the template's literal parts)."""
    import re
    import string

    pattern, names = "", []
    for literal, field, _, _ in string.Formatter().parse(template):
        pattern += re.escape(literal)
        if field is not None:
            pattern += "(.*?)"
            names.append(field)
    match = re.fullmatch(pattern, text, re.DOTALL)
    assert match, f"not rendered from the template: {text[:120]!r}"
    return dict(zip(names, match.groups(), strict=True))


def provenance(rel: str) -> dict[str, str]:
    """What a run's identity should record of the upstream file ``rel`` read from ``ROOT``: a
    file at hand, its own sha256; a Python source (not in the shared data), the sha256 its
    ``templates.json`` entries name, read from there (hashed and parsed here, not by the loader)."""
    import hashlib
    import json

    path = ROOT / rel
    if path.is_file():
        return {"sha256": hashlib.sha256(path.read_bytes()).hexdigest(), "read_from": "source"}
    data = ROOT / upstream.TEMPLATES
    (digest,) = {e["file_sha256"] for e in json.loads(data.read_text())["templates"]
                 if e["file"] == rel}
    return {"sha256": digest, "read_from": upstream.TEMPLATES,
            "templates_sha256": hashlib.sha256(data.read_bytes()).hexdigest()}
