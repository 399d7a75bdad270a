"""Counting context tokens (SPEC §3 "context tokens per query")."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from synapse_pt.models.llm.base import LLM


class TokenCounter(Protocol):
    name: str

    def count_many(self, texts: Sequence[str]) -> list[int]: ...


class HFTokenCounter:
    """Counts tokens with a local Hugging Face tokenizer (default: the bundled MiniLM WordPiece).

    In retrieval-only runs no answer model exists; the bundled tokenizer gives a fixed, offline
    yardstick. The tokenizer used is recorded in metrics.json.
    """

    def __init__(self, tokenizer: str | Path | None = None) -> None:
        from transformers import AutoTokenizer

        if tokenizer is None:
            from synapse_pt.models.locate import bundled_minilm_path

            self.name = "hf:bundled:all-MiniLM-L6-v2"
            tokenizer = bundled_minilm_path()
        else:
            self.name = f"hf:{tokenizer}"
        # counting only: lift the model's 512-token input limit (and its warning)
        self._tok = AutoTokenizer.from_pretrained(str(tokenizer), local_files_only=True,
                                                  model_max_length=10**9)

    def count_many(self, texts: Sequence[str]) -> list[int]:
        """Tokens of each text (no special tokens). Each distinct text is tokenised once: the
        retrieved units of a run repeat the same few thousand turns tens of thousands of times."""
        if not texts:
            return []
        unique = list(dict.fromkeys(texts))
        enc = self._tok(unique, add_special_tokens=False)["input_ids"]
        counts = {t: len(ids) for t, ids in zip(unique, enc, strict=True)}
        return [counts[t] for t in texts]


class LLMTokenCounter:
    """Counts with the answer model's own tokenizer."""

    def __init__(self, llm: LLM) -> None:
        self._llm = llm
        self.name = f"llm:{llm.model}"

    def count_many(self, texts: Sequence[str]) -> list[int]:
        counts = {t: self._llm.count_tokens(t) for t in dict.fromkeys(texts)}  # once per text
        return [counts[t] for t in texts]
