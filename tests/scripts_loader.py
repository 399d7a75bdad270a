"""A script of ``scripts/`` (or a study's script beside its record in ``experiments/``) as a module
(neither is a package), for tests that call its ``main(argv)`` or its functions."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"


def load_script(name: str, folder: str = "scripts") -> ModuleType:
    """``<folder>/<name>.py`` (``scripts`` or ``experiments``), loaded afresh."""
    spec = importlib.util.spec_from_file_location(name, ROOT / folder / f"{name}.py")
    assert spec is not None and spec.loader is not None, name
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
