"""Counting context tokens (SPEC §3 "context tokens per query")."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from synapse_pt.cache.texts import TextValueCache, cached_map, library_versions
from synapse_pt.models.fingerprint import folder_fingerprint
from synapse_pt.models.llm.base import LLM


class TokenCounter(Protocol):
    name: str

    def count_many(self, texts: Sequence[str]) -> list[int]: ...


class HFTokenCounter:
    """Counts tokens with a local Hugging Face tokenizer (default: the bundled MiniLM WordPiece).

    In retrieval-only runs no answer model exists; the bundled tokenizer gives a fixed, offline
    yardstick. The tokenizer used is recorded in metrics.json.
    """

    def __init__(self, tokenizer: str | Path | None = None, *,
                 cache: TextValueCache | None = None) -> None:
        if tokenizer is None:
            from synapse_pt.models.locate import bundled_minilm_path

            self.name = "hf:bundled:all-MiniLM-L6-v2"
            tokenizer = bundled_minilm_path()
        else:
            self.name = f"hf:{tokenizer}"
        self._path = str(tokenizer)
        self._tok: Any = None  # loaded on the first count the cache cannot answer
        self.cache = cache
        # cached counts are keyed by the tokenizer's files (their JSON configs), not its path
        folder = Path(tokenizer)
        files = f"@{folder_fingerprint(folder)[:12]}" if folder.is_dir() else ""
        self._identity = (f"tokens/{self.name}{files}/"
                          + library_versions("transformers", "tokenizers"))

    def _tokenizer(self) -> Any:
        if self._tok is None:
            from transformers import AutoTokenizer

            # counting only: lift the model's 512-token input limit (and its warning)
            self._tok = AutoTokenizer.from_pretrained(self._path, local_files_only=True,
                                                      model_max_length=10**9)
        return self._tok

    def _count(self, texts: list[str]) -> list[int]:
        return [len(ids) for ids in self._tokenizer()(texts, add_special_tokens=False)["input_ids"]]

    def count_many(self, texts: Sequence[str]) -> list[int]:
        """Tokens of each text (no special tokens), through the cache when one is given. Each
        distinct text is tokenised once: the retrieved units of a run repeat the same few
        thousand turns tens of thousands of times."""
        if not texts:
            return []
        return cached_map(self.cache, self._identity, texts, self._count)


class LLMTokenCounter:
    """Counts with the answer model's own tokenizer."""

    def __init__(self, llm: LLM) -> None:
        self._llm = llm
        self.name = f"llm:{llm.model}"

    def count_many(self, texts: Sequence[str]) -> list[int]:
        counts = {t: self._llm.count_tokens(t) for t in dict.fromkeys(texts)}  # once per text
        return [counts[t] for t in texts]
