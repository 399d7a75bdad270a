"""The related systems' own prompts, read from their source files (issue 44).

Every expectation here is read from the upstream files at test time by a route independent of
:mod:`synapse_pt.data.upstream` (the raw text cut with a regular expression, GAAMA's ``{{key}}``
filled with ``str.replace`` as its ``prompt_loader`` does, Membox's with ``str.format``), so a
loader that misreads a template fails these tests. Skipped where the files are not at hand
(``SYNAPSE_UPSTREAM`` or ``../shared/data/upstream`` beside the checkout).
"""

from __future__ import annotations

import re
import shutil
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest
from upstream_files import ROOT, gaama_answer_md, membox_qa_template, needs_upstream

from synapse_pt.data import upstream
from synapse_pt.data.records import Question
from synapse_pt.eval.qa.pipeline import EvalSettings, answer_request, for_memory
from synapse_pt.eval.qa.prompts import answer_messages
from synapse_pt.eval.qa.scorers.judge import judge_answers
from synapse_pt.memory.base import EPISODIC, RetrievedItem
from synapse_pt.memory.gaama.judge import parse_gaama_reward
from synapse_pt.memory.gaama.memory import GAAMAMemory
from synapse_pt.memory.membox.memory import MemboxMemory
from synapse_pt.memory.synapse import SynapseMemory
from synapse_pt.models.llm.base import ChatResponse

REPO = Path(__file__).resolve().parents[1]
pytestmark = needs_upstream
MAY, JUNE = datetime(2023, 5, 8), datetime(2023, 6, 1)


@pytest.fixture(autouse=True)
def _upstream_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(upstream.ENV_VAR, str(ROOT))


def membox_source() -> str:
    return (ROOT / "membox" / "membox.py").read_text()


def gaama_judge_sentences() -> list[str]:
    """The literal pieces of GAAMA's judge prompt, cut from the source text."""
    src = (ROOT / "gaama" / "evals" / "locomo" / "locomo_eval.py").read_text()
    body = src.split("def _compute_hypothesis_reward")[1].split("    prompt = (")[1]
    body = body.split("\n    )\n")[0]
    literals = re.findall(r"""f?(?:"((?:[^"\\]|\\.)*)"|'((?:[^'\\]|\\.)*)')""", body)
    return [(a or b).encode().decode("unicode_escape") for a, b in literals]


def distinctive(lines: list[str]) -> list[str]:
    return [s.strip(" -\n") for s in lines if len(s.strip()) >= 40]


def test_no_upstream_prompt_text_is_pasted_into_the_project() -> None:
    """Sentences of GAAMA's answer and judge prompts and of Membox's answer prompt (each line of
    40+ characters) appear nowhere in synapse_pt/ or configs/."""
    sentences = (distinctive(gaama_answer_md().splitlines())
                 + distinctive(membox_qa_template().splitlines())
                 + distinctive(gaama_judge_sentences()))
    assert len(sentences) > 20
    texts = {p: p.read_text(errors="replace") for folder in ("synapse_pt", "configs")
             for p in (REPO / folder).rglob("*") if p.is_file()
             and p.suffix in (".py", ".yaml", ".md", ".txt", ".json")}
    found = [(s, str(p)) for s in sentences for p, t in texts.items() if s in t]
    assert found == []


def test_loader_checks_the_pinned_sha256_and_says_where_to_put_missing_files(tmp_path) -> None:
    src = upstream.resolve_upstream_file("membox/membox.py")
    assert src.path == ROOT / "membox" / "membox.py" and src.origin == "env"
    assert src.sha256 == upstream.pinned_sha256()["membox/membox.py"]
    # every pinned hash is the one of the shared SHA256SUMS
    sums = dict(line.split()[::-1] for line in (ROOT / "SHA256SUMS").read_text().splitlines()
                if line.strip())
    assert all(sums["./" + rel] == digest for rel, digest in upstream.pinned_sha256().items())
    with pytest.raises(upstream.UpstreamNotFoundError) as err:
        upstream.resolve_upstream_file("membox/membox.py", tmp_path)
    message = str(err.value)
    assert "\n" not in message and "eval.upstream_path" in message
    assert upstream.ENV_VAR in message and "membox/membox.py" in message
    changed = tmp_path / "membox" / "membox.py"
    changed.parent.mkdir()
    changed.write_text(membox_source().replace("5-6 words", "5-7 words"))
    with pytest.raises(upstream.UpstreamMismatchError, match="sha256"):
        upstream.membox_constant("PROMPT_QA_ANSWER", tmp_path)
    assert upstream.url_of("gaama/prompts/answer_from_memory.md") == (
        "https://raw.githubusercontent.com/swarna-kpaul/gaama/"
        "2d992f7f7b97c802bfe4c799878a5477cac1b6ff/prompts/answer_from_memory.md")


def test_a_download_lands_in_the_cache_and_is_checked(tmp_path, monkeypatch) -> None:
    """No folder holds the file: it is downloaded at the pinned commit (here: copied by a stub
    of the download) and its sha256 checked."""
    monkeypatch.delenv(upstream.ENV_VAR)
    monkeypatch.setattr(upstream, "default_root", lambda: tmp_path / "nowhere")
    monkeypatch.setattr(upstream, "cache_root", lambda: tmp_path / "cache")
    urls = []

    def fake_download(url, dest, **kw):
        urls.append(url)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / "gaama" / "prompts" / "answer_from_memory.md", dest)
        return dest

    monkeypatch.setattr(upstream, "download", fake_download)
    src = upstream.resolve_upstream_file("gaama/prompts/answer_from_memory.md")
    assert src.origin == "download" and urls == [upstream.url_of(src.rel)]
    assert src.path == tmp_path / "cache" / "gaama" / "prompts" / "answer_from_memory.md"
    assert upstream.resolve_upstream_file(src.rel).origin == "cache"
    with pytest.raises(upstream.UpstreamNotFoundError, match="downloads are disabled"):
        upstream.resolve_upstream_file("membox/membox.py", allow_download=False)


def _gaama_items() -> list[RetrievedItem]:
    return [RetrievedItem("F:3", "Ann adopted a cat.", "fact", 0.9, JUNE),
            RetrievedItem("D2:1", "Ann: I adopted a cat!", EPISODIC, 0.8, JUNE, "Ann"),
            RetrievedItem("R:7", "Ann loves animals.", "reflection", 0.7, JUNE),
            RetrievedItem("D1:1", "[8 May 2023] Ann: I want a pet.", EPISODIC, 0.6, MAY, "Ann",
                          dated=True)]


def test_gaama_answer_request_is_its_file_filled_as_its_code_fills_it() -> None:
    """answer_from_memory.md with {{query}} and {{memory_text}} replaced (gaama's load_prompt);
    the memory text as MemoryPack.to_text writes it, worked out by hand; one user message, no
    system message, 512 tokens, no stop (services/answer_from_memory.py)."""
    memory_text = ("## Facts\n- Ann adopted a cat.\n\n## Reflections\n- Ann loves animals.\n\n"
                   "## Episodes (in temporal order)\n- [8 May 2023] Ann: I want a pet.\n"
                   "- [1 June 2023] Ann: I adopted a cat!")
    expected = gaama_answer_md().replace("{{query}}", "Did Ann get a pet?").replace(
        "{{memory_text}}", memory_text)
    settings = for_memory(EvalSettings(mode="qa"), GAAMAMemory)
    assert settings.answer_style == "gaama" and settings.judge_protocol == "gaama"
    q = Question("conv-1", 0, "Did Ann get a pet?", "yes", 1, (), ())
    request = answer_request(q, _gaama_items(), "Ann and Bo", settings)
    assert request.messages == (("user", expected),)
    assert request.max_tokens == 512 and request.stop == ()


def test_membox_answer_prompt_is_its_constant_formatted() -> None:
    box = RetrievedItem("B:2", "8 May 2023 Ann: I want a pet.", "box", 0.9, MAY, dated=True)
    trace = RetrievedItem("T:0", "[08 May 2023] Ann wants a pet.", "trace", 0.9, MAY, dated=True)
    other = RetrievedItem("B:0", "1 June 2023 Ann: I adopted a cat!", "box", 0.5, JUNE,
                          dated=True)
    memories = ("8 May 2023 Ann: I want a pet.\nEvents:\n[08 May 2023] Ann wants a pet.\n\n"
                "1 June 2023 Ann: I adopted a cat!")
    messages = answer_messages("When did Ann adopt a cat?", [box, trace, other], "Ann and Bo",
                               style="membox")
    assert messages == [{"role": "user", "content": membox_qa_template().format(
        memories=memories, question="When did Ann adopt a cat?")}]
    settings = for_memory(EvalSettings(mode="qa"), MemboxMemory)
    assert settings.answer_style == "membox" and settings.judge_protocol == "mem0"
    assert for_memory(EvalSettings(mode="qa"), SynapseMemory).answer_style == "shared"
    ours = answer_messages("When?", [box], "Ann and Bo", style="membox", prompts="ours")
    assert ours[0]["role"] == "system" and "5-6 words" in ours[1]["content"]


@pytest.mark.parametrize(("reply", "reward"), [
    ('{"reward": 0.67, "justification": "2 of 3"}', 0.67),
    ('```json\n{"reward": 1.4, "justification": "x"}\n```', 1.0),  # clipped
    ('{"reward": -0.2}', 0.0),
    ('{"justification": "no reward key"}', 0.0),  # .get("reward", 0.0)
    ('{"reward": 0.333}', 0.33),  # rounded to 2 decimals
    ('The answer covers half. {"reward": 0.5}', None),  # not JSON as a whole
    ('["reward", 1]', None),  # a list has no .get
    ('{"reward": "high"}', None),
    ("", None),
])
def test_gaama_reward_is_read_as_its_code_reads_it(reply: str, reward: float | None) -> None:
    assert parse_gaama_reward(reply)[0] == reward


def test_gaama_judge_retries_with_its_retry_prompt_and_scores_zero_after_three() -> None:
    """Q1: prose, then JSON -> read at the second attempt. Q2: prose three times -> 0, counted.
    Q3: JSON at once (1.3 clipped to 1). By hand: 3 + 2 + 1 requests."""
    sent: list[tuple[str, int]] = []

    class Judge:
        backend, model = "scripted", "judge"

        def generate(self, requests):
            out = []
            for r in requests:
                prompt = r.messages[-1][1]
                assert len(r.messages) == 1 and r.max_tokens == 400
                sent.append((prompt, r.seed))
                retry = "could not be parsed" in prompt
                if "Q3" in prompt:
                    text = '{"reward": 1.3, "justification": "all"}'
                elif "Q1" in prompt or (retry and "about Q1" in prompt):
                    text = "It is about Q1." if not retry else '{"reward": 0.5}'
                else:
                    text = "Hard to say about Q2."
                out.append(ChatResponse(text, 1, 1, 0.0, model="judge"))
            return out

    res = judge_answers(Judge(), ["Q1", "Q2", "Q3"], ["a and b", "c", "d"], ["a", "x", "d"],
                        categories=[1, 2, 4], n_runs=1, protocol="gaama")
    np.testing.assert_allclose(res.labels, [[0.5, 0.0, 1.0]])
    np.testing.assert_array_equal(res.n_failures, [0, 1, 0])
    assert len(sent) == 3 + 2 + 1
    first = (ROOT / "gaama" / "evals" / "locomo" / "locomo_eval.py").read_text()
    pieces = gaama_judge_sentences()
    # the file's prompt, piece by piece (its f-string fields filled)
    assert "".join(pieces).replace("{question}", "Q1").replace("{answer}", "a and b").replace(
        "{hypothesis}", "a") == sent[0][0]
    retries = [p for p, _ in sent if "could not be parsed" in p]
    assert len(retries) == 3  # Q1 once, Q2 twice
    assert all("Expecting value: line 1 column 1 (char 0)" in p for p in retries)
    assert "Your previous output:\nHard to say about Q2." in retries[-1]
    assert "_MAX_RETRIES = 3" in first and "max_tokens=400" in first


def test_a_run_without_the_files_stops_before_its_build(tmp_path, monkeypatch) -> None:
    """memory=gaama eval=qa with an empty eval.upstream_path: one UpstreamNotFoundError line
    naming the file and where to put it, before the memory is built (no output written)."""
    from test_configs import make_cfg

    from synapse_pt.run import run

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    cfg = make_cfg("dataset=sample", "embedder=hashing", "logger=none", "memory=gaama",
                   "eval=qa", "llm=openai", "llm.backend.base_url=http://127.0.0.1:9/v1",
                   f"eval.upstream_path={tmp_path / 'empty'}",
                   f"paths.cache_dir={tmp_path / 'cache'}", output_dir=str(tmp_path / "run"))
    with pytest.raises(upstream.UpstreamNotFoundError,
                       match="gaama/prompts/answer_from_memory.md: not found") as err:
        run(cfg)
    assert "\n" not in str(err.value)
    assert not (tmp_path / "run" / "predictions.parquet").exists()
