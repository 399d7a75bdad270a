"""What the package ships and where it runs from: configs and studies, its checkout, its version.

The configs (``configs/``) and the study files (``studies/``) are the repository's folders, the one
copy anyone edits. The package reaches them as its own ``synapse_pt/configs`` and
``synapse_pt/studies`` (links to those folders in a checkout; in a wheel, the files copied there
when it is built: ``pyproject.toml``'s package data), so the commands find them wherever they run
from, installed or not: the entry points' ``@hydra.main`` is given :func:`config_dir`.
A user's own config folder is added with ``hydra.searchpath``.

Nothing here reads a file at import.
"""

from __future__ import annotations

import functools
from importlib import metadata, resources
from pathlib import Path


def config_dir() -> Path:
    """The configs the package ships (``synapse_pt/configs``)."""
    return Path(str(resources.files("synapse_pt").joinpath("configs")))


def study_dir() -> Path:
    """The study files the package ships (``synapse_pt/studies``)."""
    return Path(str(resources.files("synapse_pt").joinpath("studies")))


def config_file(rel: str) -> Path:
    """A file of the shipped configs, e.g. ``memory/synapse.yaml``."""
    return config_dir() / rel


@functools.cache
def checkout_root() -> Path | None:
    """The source checkout the package runs from (the folder holding ``synapse_pt/`` beside a
    ``pyproject.toml`` that names it), or ``None`` for an installed package."""
    root = Path(__file__).resolve().parents[2]
    project = root / "pyproject.toml"
    if project.is_file() and 'name = "synapse_pt"' in project.read_text(encoding="utf-8"):
        return root
    return None


def version() -> str:
    """The installed distribution's version (``pyproject.toml``'s)."""
    return metadata.version("synapse_pt")
