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
