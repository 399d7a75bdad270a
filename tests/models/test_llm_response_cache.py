"""ResponseCache and CachedLLM: hits, misses, concurrent writer processes, resume after a crash."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path

import pytest

from synapse_pt.models.llm.base import LLM, ChatRequest, ChatResponse, LLMError
from synapse_pt.models.llm.cache import CachedLLM, ResponseCache, canonical_request
from synapse_pt.models.llm.openai_compat import OpenAICompatibleLLM

REPO_ROOT = Path(__file__).resolve().parents[2]

FAKE_LLM_SOURCE = '''
from synapse_pt.models.llm.base import LLM, ChatResponse, LLMError

class FakeLLM(LLM):
    """Answers "answer to <last message>"; records every batch; may fail after ``fail_after``."""

    backend = "fake"

    def __init__(self, model="fake-1", fail_after=None, on_answer=None):
        self.model = model
        self.batches = []
        self.fail_after = fail_after
        self.on_answer = on_answer

    def answer(self, request):
        last = request.messages[-1][1]
        return ChatResponse(text=f"answer to {last}", prompt_tokens=len(last), completion_tokens=3,
                            latency_s=0.5, model=self.model, meta={"n": len(self.batches)})

    def generate(self, requests):
        return self.generate_incremental(requests, lambda i, r: None)

    def generate_incremental(self, requests, on_response):
        self.batches.append([r.messages[-1][1] for r in requests])
        out = []
        for i, request in enumerate(requests):
            if self.fail_after is not None and i == self.fail_after:
                raise LLMError(f"fake backend down at request {i}")
            out.append(self.answer(request))
            on_response(i, out[-1])
            if self.on_answer is not None:
                self.on_answer(i)
        return out

    def count_tokens(self, text):
        return len(text.split())
'''
namespace: dict = {}
exec(FAKE_LLM_SOURCE, namespace)  # the same class runs in the subprocesses below
FakeLLM = namespace["FakeLLM"]


def ask(content: str, **kw) -> ChatRequest:
    return ChatRequest((("user", content),), **kw)


def run_python(code: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code, *args], cwd=REPO_ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_hit_and_miss(tmp_path):
    inner = FakeLLM()
    llm = CachedLLM(inner, tmp_path / "r.sqlite")
    first = llm.generate([ask("a"), ask("b")])
    assert [r.text for r in first] == ["answer to a", "answer to b"]
    assert not any(r.cached for r in first)
    assert (llm.hits, llm.misses) == (0, 2)

    second = llm.generate([ask("b"), ask("c"), ask("a")])
    assert [r.text for r in second] == ["answer to b", "answer to c", "answer to a"]
    assert [r.cached for r in second] == [True, False, True]
    b = second[0]
    assert (b.prompt_tokens, b.completion_tokens, b.latency_s) == (1, 3, 0.5)  # the original
    assert (llm.hits, llm.misses) == (2, 3)
    assert inner.batches == [["a", "b"], ["c"]]  # misses only, one batch per call


def test_parameters_model_and_backend_are_part_of_the_key(tmp_path):
    cache = ResponseCache(tmp_path / "r.sqlite")
    llm = CachedLLM(FakeLLM(), cache)
    llm.generate([ask("a")])
    for request in (ask("a", max_tokens=9), ask("a", temperature=0.7), ask("a", seed=1),
                    ask("a", stop=("x",)), ChatRequest((("system", "s"), ("user", "a")))):
        assert not llm.generate([request])[0].cached
    assert not CachedLLM(FakeLLM(model="fake-2"), cache).generate([ask("a")])[0].cached
    assert CachedLLM(FakeLLM(), cache).generate([ask("a")])[0].cached
    assert canonical_request("fake", "fake-1", ask("a")) != canonical_request("other", "fake-1",
                                                                              ask("a"))


def test_duplicates_in_one_batch_are_asked_once(tmp_path):
    inner = FakeLLM()
    llm = CachedLLM(inner, tmp_path / "r.sqlite")
    out = llm.generate([ask("a"), ask("a"), ask("b")])
    assert [r.text for r in out] == ["answer to a", "answer to a", "answer to b"]
    assert inner.batches == [["a", "b"]]
    # the second "a" cost no call: the spend ledger says so
    assert [r.cached for r in llm.served] == [False, True, False]
    llm.generate([ask("b")])
    assert [r.cached for r in llm.served] == [False, True, False, True]


def test_resume_after_backend_failure_mid_batch(tmp_path):
    path = tmp_path / "r.sqlite"
    with pytest.raises(LLMError, match="down at request 2"):
        CachedLLM(FakeLLM(fail_after=2), path).generate([ask(q) for q in "abcd"])
    assert len(ResponseCache(path)) == 2  # a and b were stored as they arrived

    inner = FakeLLM()
    llm = CachedLLM(inner, path)
    out = llm.generate([ask(q) for q in "abcd"])
    assert [r.text for r in out] == [f"answer to {q}" for q in "abcd"]
    assert inner.batches == [["c", "d"]]
    assert (llm.hits, llm.misses) == (2, 2)


def test_resume_after_process_killed_mid_batch(tmp_path):
    """A process dies abruptly (os._exit) after 3 answers: those 3 are on disk."""
    path = tmp_path / "r.sqlite"
    code = FAKE_LLM_SOURCE + textwrap.dedent('''
        import os, sys
        from synapse_pt.models.llm.base import ChatRequest
        from synapse_pt.models.llm.cache import CachedLLM

        def crash(i):
            if i == 2:
                os._exit(17)

        llm = CachedLLM(FakeLLM(on_answer=crash), sys.argv[1])
        llm.generate([ChatRequest((("user", q),)) for q in "abcdef"])
    ''')
    proc = run_python(code, str(path))
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 17, err
    inner = FakeLLM()
    out = CachedLLM(inner, path).generate([ask(q) for q in "abcdef"])
    assert [r.cached for r in out] == [True] * 3 + [False] * 3
    assert inner.batches == [["d", "e", "f"]]


def test_concurrent_writer_processes(tmp_path):
    path = tmp_path / "r.sqlite"
    code = FAKE_LLM_SOURCE + textwrap.dedent('''
        import sys
        from synapse_pt.models.llm.base import ChatRequest
        from synapse_pt.models.llm.cache import CachedLLM

        worker = int(sys.argv[2])
        llm = CachedLLM(FakeLLM(), sys.argv[1])
        # 40 requests of its own and 40 shared with every other worker, one request per call so
        # the processes interleave their writes
        for i in range(40):
            llm.generate([ChatRequest((("user", f"w{worker}-{i}"),))])
            llm.generate([ChatRequest((("user", f"shared-{i}"),))])
        print(llm.hits, llm.misses)
    ''')
    procs = [run_python(code, str(path), str(w)) for w in range(4)]
    outputs = [p.communicate(timeout=120) for p in procs]
    for proc, (_, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err
    cache = ResponseCache(path)
    assert len(cache) == 4 * 40 + 40
    texts = [f"w{w}-{i}" for w in range(4) for i in range(40)] + [f"shared-{i}" for i in range(40)]
    found = cache.get_many([hashlib.sha256(canonical_request("fake", "fake-1", ask(t)).encode())
                            .hexdigest() for t in texts])
    assert sorted(r.text for r in found.values()) == sorted(f"answer to {t}" for t in texts)
    hits = sum(int(out.split()[0]) for out, _ in outputs)
    misses = sum(int(out.split()[1]) for out, _ in outputs)
    assert hits + misses == 4 * 80 and misses >= 4 * 40 + 40


def test_cached_http_backend_sends_nothing_on_rerun(tmp_path, fake_server):
    path = tmp_path / "r.sqlite"

    def make() -> CachedLLM:
        return CachedLLM(OpenAICompatibleLLM("fake-model", base_url=fake_server.url,
                                             api_key_env=None, backoff_s=0.01), path)

    first = make().generate([ask("x"), ask("y")])
    assert len(fake_server.bodies) == 2
    again = make()
    second = again.generate([ask("y"), ask("x")])
    assert len(fake_server.bodies) == 2
    assert [r.text for r in second] == [first[1].text, first[0].text]
    assert all(r.cached for r in second) and again.hits == 2


class _Broken(LLM):
    backend, model = "broken", "b"

    def generate(self, requests: Sequence[ChatRequest]) -> list[ChatResponse]:
        return []

    def count_tokens(self, text: str) -> int:
        return 0


def test_inner_backend_answering_nothing_is_an_error(tmp_path):
    with pytest.raises(LLMError, match="without answering requests"):
        CachedLLM(_Broken(), tmp_path / "r.sqlite").generate([ask("a")])
