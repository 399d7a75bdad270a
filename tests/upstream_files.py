"""Where the tests find the related systems' upstream files (issue 44): ``$SYNAPSE_UPSTREAM``,
else ``../shared/data/upstream`` beside the checkout; tests that need them are skipped without."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from synapse_pt.data import upstream

ROOT = Path(os.environ.get(upstream.ENV_VAR) or upstream.default_root())
PRESENT = (ROOT / "gaama").is_dir() and (ROOT / "membox").is_dir()
needs_upstream = pytest.mark.skipif(not PRESENT, reason=f"upstream files not found at {ROOT}")


def gaama_answer_md() -> str:
    """GAAMA's answer prompt as the file holds it."""
    return (ROOT / "gaama" / "prompts" / "answer_from_memory.md").read_text()


def membox_qa_template() -> str:
    """Membox's ``PROMPT_QA_ANSWER`` cut from the source text with a regular expression (not
    the loader's ``ast``)."""
    import re

    match = re.search(r'PROMPT_QA_ANSWER = """(.*?)"""',
                      (ROOT / "membox" / "membox.py").read_text(), re.DOTALL)
    assert match
    return match.group(1)


def membox_template(name: str) -> str:
    """The string constant ``name`` of Membox's ``membox.py`` (a ``class Config`` attribute),
    cut from the source text with a regular expression (not the loader's ``ast``)."""
    import re

    match = re.search(rf'\n    {name} = """(.*?)"""', (ROOT / "membox" / "membox.py").read_text(),
                      re.DOTALL)
    assert match, name
    return match.group(1)


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
