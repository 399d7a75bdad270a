"""The related systems' own prompts, read from their source files or their data (issues 44, 57).

Every expectation here is read from the upstream files at test time by a route independent of
:mod:`synapse_pt.data.upstream` (a markdown file's raw text, ``templates.json`` parsed with
:mod:`json`, GAAMA's ``{{key}}`` filled with ``str.replace`` as its ``prompt_loader`` does, Membox's
with ``str.format``), so a loader that misreads a template fails these tests. Skipped where the
files are not at hand (``SYNAPSE_UPSTREAM`` or ``../shared/data/upstream`` beside the checkout);
the comparison with the Python sources themselves needs ``SYNAPSE_UPSTREAM_SOURCES``.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest
from upstream_files import (
    ROOT,
    SOURCES,
    gaama_answer_md,
    membox_qa_template,
    needs_sources,
    needs_upstream,
    template_entry,
)

from synapse_pt.data import upstream
from synapse_pt.data.schema import Question
from synapse_pt.eval.qa.pipeline import EvalSettings, answer_request, for_memory
from synapse_pt.eval.qa.prompts import answer_messages
from synapse_pt.eval.qa.scorers.judge import JudgeInputs, judge_answers
from synapse_pt.memory.gaama.judge import parse_gaama_reward
from synapse_pt.memory.gaama.memory import GAAMAMemory
from synapse_pt.memory.membox.memory import MemboxMemory
from synapse_pt.memory.synapse import SynapseMemory
from synapse_pt.models.llm.base import ChatResponse
from synapse_pt.retrieval.items import EPISODIC, RetrievedItem

REPO = Path(__file__).resolve().parents[1]
pytestmark = needs_upstream
MAY, JUNE = datetime(2023, 5, 8), datetime(2023, 6, 1)


@pytest.fixture(autouse=True)
def _upstream_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(upstream.ENV_VAR, str(ROOT))


JUDGE_FILE = "gaama/evals/locomo/locomo_eval.py"


def gaama_judge_sentences() -> list[str]:
    """The literal pieces of GAAMA's judge prompt, as ``templates.json`` holds them."""
    parts = template_entry(JUDGE_FILE, "prompt", "_compute_hypothesis_reward")["parts"]
    return [p for p in parts if isinstance(p, str)]


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


@pytest.fixture
def data_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The shared data's layout (GAAMA's prompt files and templates.json, no Python sources),
    copied from ROOT, as $SYNAPSE_UPSTREAM."""
    folder = tmp_path / "data_only"
    shutil.copytree(ROOT / "gaama" / "prompts", folder / "gaama" / "prompts")
    shutil.copy(ROOT / "templates.json", folder / "templates.json")
    monkeypatch.setenv(upstream.ENV_VAR, str(folder))
    return folder


def test_loader_checks_the_pinned_sha256_and_says_where_to_put_missing_files(tmp_path,
                                                                             data_only) -> None:
    """The shared folder has no Python sources: membox.py's templates come from its
    templates.json, whose own sha256 and every entry's file_sha256 are the pinned ones."""
    src = upstream.resolve_upstream_file("membox/membox.py")
    assert src.path == data_only / "templates.json" and src.origin == "env"
    assert src.read_from == "templates.json"
    assert src.sha256 == upstream.pinned_sha256()["membox/membox.py"]
    # every pinned file the shared folder holds has the shared SHA256SUMS' hash; templates.json
    # names each source by its pinned sha256
    sums = dict(line.split()[::-1] for line in (ROOT / "SHA256SUMS").read_text().splitlines()
                if line.strip())
    pinned = upstream.pinned_sha256()
    held = {rel.removeprefix("./"): digest for rel, digest in sums.items()}
    assert {"templates.json", "gaama/prompts/answer_from_memory.md"} <= set(held) & set(pinned)
    assert all(held[rel] == pinned[rel] for rel in set(held) & set(pinned))
    entries = json.loads((ROOT / "templates.json").read_text())["templates"]
    assert len(entries) == 8
    assert all(e["file_sha256"] == pinned[e["file"]] for e in entries)
    with pytest.raises(upstream.UpstreamNotFoundError) as err:
        upstream.resolve_upstream_file("membox/membox.py", tmp_path)
    message = str(err.value)
    assert "\n" not in message and "eval.upstream_path" in message
    assert upstream.ENV_VAR in message and "membox/membox.py" in message
    assert "templates.json" in message
    changed = tmp_path / "membox" / "membox.py"
    changed.parent.mkdir()
    changed.write_text("class Config:\n    PROMPT_QA_ANSWER = 'Answer in 5-7 words'\n")
    with pytest.raises(upstream.UpstreamMismatchError, match="sha256"):
        upstream.membox_constant("PROMPT_QA_ANSWER", tmp_path)
    assert upstream.url_of("gaama/prompts/answer_from_memory.md") == (
        "https://raw.githubusercontent.com/swarna-kpaul/gaama/"
        "2d992f7f7b97c802bfe4c799878a5477cac1b6ff/prompts/answer_from_memory.md")


def test_templates_json_that_is_not_the_pinned_one_is_refused_in_one_line(tmp_path,
                                                                          monkeypatch) -> None:
    """A templates.json whose bytes changed, or whose entry names another sha256 of its source
    than the pinned one: one UpstreamMismatchError line naming the file (and the entry)."""
    data = json.loads((ROOT / "templates.json").read_text())
    data["templates"][0]["text"] += " Be brief."
    (tmp_path / "templates.json").write_text(json.dumps(data))
    with pytest.raises(upstream.UpstreamMismatchError, match="templates.json") as err:
        upstream.membox_constant("PROMPT_QA_ANSWER", tmp_path)
    assert "\n" not in str(err.value)
    # pinned to these bytes, the entry's file_sha256 is still checked against its source's pin
    data["templates"][0]["file_sha256"] = "0" * 64
    (tmp_path / "templates.json").write_text(json.dumps(data))
    digest = hashlib.sha256((tmp_path / "templates.json").read_bytes()).hexdigest()
    monkeypatch.setattr(upstream, "pinned_sha256",
                        lambda: {**_real_pins, "templates.json": digest})
    with pytest.raises(upstream.UpstreamMismatchError,
                       match=r"templates\[0\] \('PROMPT_QA_ANSWER'\): file_sha256 0{64}") as err:
        upstream.membox_constant("PROMPT_QA_ANSWER", tmp_path)
    assert "\n" not in str(err.value)


_real_pins = dict(upstream.pinned_sha256())

# a Python source written here, and templates.json entries for it written by hand (as the shared
# data describes its fields), for the two routes of a template
OWN_SOURCE = '''class Config:
    PROMPT_GREET = """Hello {name},
you asked {{nothing}} about {topic}."""


def judge(question, answer, last_raw):
    note = "unused"
    prompt = (
        "Question: "
        f"{question}\\n\\nAnswer: {answer}"
        f" -- earlier: {last_raw[:5]}"
    )
    fallback = "(none)"
    return prompt, note, fallback
'''
OWN_ENTRIES = [
    {"file": "membox/membox.py", "name": "PROMPT_GREET", "kind": "format",
     "text": "Hello {name},\nyou asked {{nothing}} about {topic}."},
    {"file": "gaama/evals/locomo/locomo_eval.py", "function": "judge", "name": "prompt",
     "kind": "fstring", "text": "Question: {question}\n\nAnswer: {answer} -- earlier: "
     "{last_raw[:5]}",
     "parts": ["Question: ", {"field": "question", "expr": "question"}, "\n\nAnswer: ",
               {"field": "answer", "expr": "answer"}, " -- earlier: ",
               {"field": "last_raw", "expr": "last_raw[:5]"}]},
    {"file": "gaama/evals/locomo/locomo_eval.py", "function": "judge", "name": "fallback",
     "kind": "fstring", "text": "(none)", "parts": ["(none)"]},
]


def test_a_source_and_its_templates_json_give_the_same_template(tmp_path, monkeypatch) -> None:
    """Both routes read the same Template (text, kind, parts) from a source file written here
    and from templates.json entries written by hand; each renders as the code would (worked out
    by hand), and each records where it was read."""
    sources, data = tmp_path / "sources", tmp_path / "data"
    for rel in ("membox/membox.py", JUDGE_FILE):
        (sources / rel).parent.mkdir(parents=True, exist_ok=True)
        (sources / rel).write_text(OWN_SOURCE)
    digest = hashlib.sha256(OWN_SOURCE.encode()).hexdigest()
    entries = [{**e, "file_sha256": digest} for e in OWN_ENTRIES]
    data.mkdir()
    (data / "templates.json").write_text(json.dumps({"about": "test", "templates": entries}))
    pins = {"membox/membox.py": digest, JUDGE_FILE: digest,
            "templates.json": hashlib.sha256((data / "templates.json").read_bytes()).hexdigest()}
    monkeypatch.setattr(upstream, "pinned_sha256", lambda: {**_real_pins, **pins})

    def fields(t: upstream.Template) -> tuple:
        return t.text, t.kind, t.parts

    a = upstream.membox_constant("PROMPT_GREET", sources)
    b = upstream.membox_constant("PROMPT_GREET", data)
    assert (a.source.read_from, b.source.read_from) == ("source", "templates.json")
    assert fields(a) == fields(b) == (OWN_ENTRIES[0]["text"], "format", ())
    assert a.render(name="Ann", topic="cats") == b.render(name="Ann", topic="cats") == (
        "Hello Ann,\nyou asked {nothing} about cats.")
    for name, want in (("prompt", "Q? Question: Q?\n\nAnswer: A! -- earlier: 12345"),
                       ("fallback", "(none)")):
        a = upstream.fstring(JUDGE_FILE, "judge", name, sources)
        b = upstream.fstring(JUDGE_FILE, "judge", name, data)
        assert fields(a) == fields(b)
        values = {"question": "Q?", "answer": "A!", "last_raw": "123456789"}
        assert a.render(**values) == b.render(**values) == want.removeprefix("Q? ")
    assert b.source.describe() == {"file": JUDGE_FILE, "sha256": digest, "commit": "2d992f7",
                                   "read_from": "templates.json",
                                   "templates_sha256": pins["templates.json"]}
    assert a.source.describe()["read_from"] == "source"
    # a folder holding both: the source wins
    shutil.copy(data / "templates.json", sources / "templates.json")
    assert upstream.membox_constant("PROMPT_GREET", sources).source.read_from == "source"
    with pytest.raises(ValueError, match="0 templates for membox/membox.py: PROMPT_NONE"):
        upstream.membox_constant("PROMPT_NONE", data)


@needs_sources
def test_the_python_sources_and_templates_json_agree(data_only: Path) -> None:
    """With the two systems' sources at hand (``SYNAPSE_UPSTREAM_SOURCES``): every template of
    templates.json is the one the loader reads from its source, and the constants the tests
    assume of GAAMA's judge are in its code."""
    for e in json.loads((ROOT / "templates.json").read_text())["templates"]:
        if e["kind"] == "format":
            a = upstream.membox_constant(e["name"], SOURCES)
            b = upstream.membox_constant(e["name"], data_only)
        else:
            a = upstream.fstring(e["file"], e["function"], e["name"], SOURCES)
            b = upstream.fstring(e["file"], e["function"], e["name"], data_only)
        assert (a.source.read_from, b.source.read_from) == ("source", "templates.json")
        assert (a.text, a.kind, a.parts) == (b.text, b.kind, b.parts), e["name"]
    code = (SOURCES / JUDGE_FILE).read_text()
    assert "_MAX_RETRIES = 3" in code and "max_tokens=400" in code


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

    res = judge_answers(Judge(), JudgeInputs(["Q1", "Q2", "Q3"], ["a and b", "c", "d"],
                                             ["a", "x", "d"]),
                        categories=[1, 2, 4], n_runs=1, protocol="gaama")
    np.testing.assert_allclose(res.labels, [[0.5, 0.0, 1.0]])
    np.testing.assert_array_equal(res.n_failures, [0, 1, 0])
    assert len(sent) == 3 + 2 + 1
    parts = template_entry(JUDGE_FILE, "prompt", "_compute_hypothesis_reward")["parts"]
    values = {"question": "Q1", "answer": "a and b", "hypothesis": "a"}
    # the code's prompt, piece by piece (its f-string fields filled)
    assert "".join(p if isinstance(p, str) else values[p["expr"]] for p in parts) == sent[0][0]
    retries = [p for p, _ in sent if "could not be parsed" in p]
    assert len(retries) == 3  # Q1 once, Q2 twice
    assert all("Expecting value: line 1 column 1 (char 0)" in p for p in retries)
    assert "Your previous output:\nHard to say about Q2." in retries[-1]


def test_a_run_without_the_files_stops_before_its_build(tmp_path, monkeypatch) -> None:
    """memory=gaama eval=qa with an empty eval.upstream_path: one UpstreamNotFoundError line
    naming the file and where to put it, before the memory is built (no output written)."""
    from test_configs import make_cfg

    from synapse_pt.commands.run import run

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


def test_templates_json_stands_in_only_for_the_sources_it_holds(data_only: Path) -> None:
    """GAAMA's llm_extractors.py (its retry prompt, read by the code's reply handling) has no
    entries in templates.json: the shared folder does not stand in for it."""
    entries = json.loads((ROOT / "templates.json").read_text())["templates"]
    assert not [e for e in entries if e["file"] == "gaama/services/llm_extractors.py"]
    with pytest.raises(upstream.UpstreamNotFoundError, match="llm_extractors.py"):
        upstream.resolve_upstream_file("gaama/services/llm_extractors.py", data_only)
    found = upstream.resolve_upstream_file("membox/membox.py", data_only)
    assert found.read_from == "templates.json"
