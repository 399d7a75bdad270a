"""Wrong numbers or labels, silently, and tracebacks where one line is promised (issue 58).

On main 492016d: ``make_tables`` set a run on edited gold beside an official one under "(official
gold)" (same question keys); ``dataset=sample dataset.path=<another file>`` was announced as the
shipped sample and recorded ``name: sample``; NaN vectors in the embedding cache gave recall 0.0
everywhere, exit 0; a run with ``eval.judges=[...]`` showed none of its judges in its console
table or its ``tables/``; a lone surrogate in the data and ``make_tables`` on a bad or empty
folder were tracebacks."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from loopback import completion_body, echo, serve
from scripts_loader import load_script  # tests/ is on sys.path (rootdir conftest)
from test_configs import make_cfg

from synapse_pt.commands.run import run
from synapse_pt.data.errors import DataFormatError
from synapse_pt.data.text import require_text
from synapse_pt.eval.records.record import run_label
from synapse_pt.eval.reports.console import SAMPLE_WARNING, render_summary

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLE = REPO_ROOT / "synapse_pt" / "data" / "sample" / "sample_conversation.json"
FAST = ("embedder=hashing", "logger=none", "device=cpu", "memory=bm25")
NAMES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}


def cli(*overrides: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "synapse_pt.run", *overrides], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TQDM_DISABLE": "1"})


def edited_sample(path: Path) -> Path:
    """The shipped sample with its first question's evidence moved to the first turn: the same
    question keys, other gold."""
    samples = json.loads(SAMPLE.read_text())
    samples[0]["qa"][0]["evidence"] = ["D1:1"]
    path.write_text(json.dumps(samples))
    return path


def gold_of(path: Path) -> str:
    """What a file's questions are scored against, worked from the raw JSON: sha256 (16 hex
    digits) of each question's [key, category, question, answer, adversarial answer, evidence]
    as compact JSON, sorted, one a line (synapse_pt.data.schema.gold_set_id's rule)."""
    lines = sorted(json.dumps([f"{s['sample_id']}/{i}", q["category"], q["question"],
                               None if q.get("answer") is None else str(q["answer"]),
                               q.get("adversarial_answer"), q["evidence"]],
                              separators=(",", ":"))
                   for s in json.loads(path.read_text()) for i, q in enumerate(s["qa"]))
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]


def test_make_tables_sets_runs_side_by_side_only_on_the_same_gold(tmp_path: Path,
                                                                  capsys) -> None:
    """The sample, and the sample with one question's evidence edited (same question keys):
    refused in one line naming each run's gold and its file (on main: one table, both rows
    under "(official gold)"); each run's gold alone tabulates, and runs.md names it."""
    make_tables = load_script("make_tables")
    cache = f"paths.cache_dir={tmp_path / 'cache'}"
    edited = edited_sample(tmp_path / "edited.json")
    run(make_cfg("dataset=sample", *FAST, cache, output_dir=str(tmp_path / "runs" / "a")))
    run(make_cfg("dataset=sample", *FAST, cache, f"dataset.path={edited}", "memory.k=5",
                 output_dir=str(tmp_path / "runs" / "b")))
    capsys.readouterr()
    assert make_tables.main([str(tmp_path / "runs"), "--out", str(tmp_path / "t")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (
        "[make_tables] refused: the runs were scored against different gold on the same "
        f"questions (bm25: gold {gold_of(SAMPLE)} ({SAMPLE}); bm25 (b): gold {gold_of(edited)} "
        f"({edited}, upstream no_manifest)); make the tables of each gold apart")
    assert gold_of(SAMPLE) != gold_of(edited)
    assert not (tmp_path / "t").exists()
    assert make_tables.main([str(tmp_path / "runs" / "b"), "--out", str(tmp_path / "t")]) == 0
    assert gold_of(edited) in (tmp_path / "t" / "runs.md").read_text()


@pytest.mark.parametrize(("content", "problem"), [
    (None, "no metrics.json under"),
    ("{not json", "metrics.json is not a synapse_pt metrics.json (JSONDecodeError: "),
    ("[]", "metrics.json is not a synapse_pt metrics.json (no 'identity' and 'metrics' objects "
           "at its top level)"),
    ('{"identity": {}, "metrics": {}}', "records no category names"),
    (b"\xff\xfe", "metrics.json is not a synapse_pt metrics.json (UnicodeDecodeError: "),
], ids=["empty", "not-json", "a-list", "no-category-names", "not-utf8"])
def test_make_tables_on_a_bad_or_empty_folder_is_one_line(tmp_path: Path, capsys,
                                                          content: Any, problem: str) -> None:
    """An empty folder, a folder that does not exist, a metrics.json that is not a run's: one
    line, exit status 2 (on main: a FileNotFoundError, ValueError, TypeError or KeyError
    traceback)."""
    make_tables = load_script("make_tables")
    folder = tmp_path / "runs"
    (folder / "r1").mkdir(parents=True)
    if content is not None:
        target = folder / "r1" / "metrics.json"
        target.write_bytes(content if isinstance(content, bytes) else content.encode())
    assert make_tables.main([str(folder), "--out", str(tmp_path / "t")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) <= 2 and err[-1].startswith("[make_tables] "), err
    assert problem in err[-1], err
    assert make_tables.main([str(tmp_path / "nowhere"), "--out", str(tmp_path / "t")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"[make_tables] error: {tmp_path / 'nowhere'} does not exist"]
    assert not (tmp_path / "t").exists()


def test_a_file_is_labelled_by_what_it_is(tmp_path: Path) -> None:
    """``dataset=sample dataset.path=<an edited sample>``: not announced as the sample, recorded
    under its file's name (on main: "SAMPLE DATA" and ``name: sample``); a byte-for-byte copy of
    the sample elsewhere is the sample (by content)."""
    edited = edited_sample(tmp_path / "edited_sample.json")
    proc = cli("dataset=sample", *FAST, f"dataset.path={edited}",
               f"paths.cache_dir={tmp_path / 'cache'}", f"hydra.run.dir={tmp_path / 'edited'}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "SAMPLE DATA" not in proc.stdout
    assert "run: bm25 on edited_sample (1 conversations, 14 questions" in proc.stdout
    data = json.loads((tmp_path / "edited" / "metrics.json").read_text())["identity"]["dataset"]
    assert data["name"] == "edited_sample" and data["gold_set"] == gold_of(edited)
    assert any("not the shipped sample conversation" in n for n in data["notes"])

    copy = tmp_path / "copy.json"
    copy.write_bytes(SAMPLE.read_bytes())
    proc = cli("dataset=sample", *FAST, f"dataset.path={copy}",
               f"paths.cache_dir={tmp_path / 'cache'}", f"hydra.run.dir={tmp_path / 'copy'}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert SAMPLE_WARNING in proc.stdout
    data = json.loads((tmp_path / "copy" / "metrics.json").read_text())["identity"]["dataset"]
    assert data["name"] == "sample"


@pytest.mark.slow
def test_nan_vectors_in_the_embedding_cache_are_refused(tmp_path: Path) -> None:
    """A run that filled the embedding cache, then every cached vector set to NaN: the rerun
    stops in one line naming the cache file and a key, exit 1 (on main: recall 0.0 in every
    category, exit 0)."""
    cache = tmp_path / "cache"
    common = ("dataset=sample", "memory=vector_rag", "logger=none", "device=cpu",
              f"paths.cache_dir={cache}")
    first = cli(*common, f"hydra.run.dir={tmp_path / 'first'}")
    assert first.returncode == 0, first.stderr[-3000:]
    store = cache / "embeddings" / "embeddings.sqlite"
    with sqlite3.connect(store) as conn:
        rows = conn.execute("SELECT key, dim FROM embeddings").fetchall()
        conn.executemany("UPDATE embeddings SET vec = ? WHERE key = ?",
                         [(np.full(dim, np.nan, np.float32).tobytes(), key) for key, dim in rows])
    assert rows
    again = cli(*common, f"hydra.run.dir={tmp_path / 'again'}")
    assert again.returncode == 1, again.stdout[-3000:]
    (line,) = again.stderr.strip().splitlines()
    assert line.startswith(f"[synapse_pt] error: {store}: embedding ")
    key = line.split(": embedding ")[1].split(" ")[0]
    assert key in {k for k, _ in rows}
    assert f"holds {rows[0][1]} of {rows[0][1]} values that are not finite" in line
    assert not (tmp_path / "again" / "metrics.json").exists()


def test_a_run_shows_every_judge_it_asked(tmp_path: Path) -> None:
    """``eval=judge eval.judges=[mem0,realtalk]`` against a loopback server: both judges are rows
    of the console table and tables of its own ``tables/`` (``main_judge_mem0``,
    ``main_judge_realtalk``) holding the numbers of metrics.json (on main: neither); a run with
    one judge shows ``judge`` as before."""

    def judge(body: dict, count: int) -> tuple[int, str, float]:
        prompt = body["messages"][-1]["content"]
        if "CORRECT or WRONG" in prompt:  # mem0's judge: CORRECT for every even question
            return 200, completion_body('{"label": "CORRECT"}' if count % 2 == 0 else
                                        '{"label": "WRONG"}'), 0.0
        return echo(body, count)

    with serve(judge) as server:
        metrics = run(make_cfg("dataset=sample", *FAST, "eval=judge", "llm=vllm",
                               "eval.judges=[mem0,realtalk]", f"llm.backend.base_url={server.url}",
                               "llm.backend.model=m", "llm.backend.max_retries=0",
                               f"paths.cache_dir={tmp_path / 'cache'}",
                               output_dir=str(tmp_path / "run")))
    text = render_summary(metrics, NAMES, label=run_label(metrics["identity"]),
                          output_dir=str(tmp_path / "run"), width=200)
    rows = {line.split("│")[1].strip(): line for line in text.splitlines()
            if line.startswith("│")}
    for name in ("judge_mem0", "judge_realtalk"):
        overall = metrics["metrics"][name]["overall"]
        assert f"{100 * overall:.1f}" in rows[name].split("│")[-2], rows[name]
        table = (tmp_path / "run" / "tables" / f"main_{name}.md").read_text()
        assert f"{100 * overall:.1f}" in table
    assert list(rows)[-2:] == ["judge_mem0", "judge_realtalk"] and "judge" not in rows


def test_a_lone_surrogate_is_one_line_naming_the_file_and_record(tmp_path: Path) -> None:
    """A turn's text holding ``\\ud800`` (an escape of half a UTF-16 pair): one line naming the
    file, the sample and the field, exit 1 (on main: a UnicodeEncodeError traceback from the
    content hash)."""
    samples = json.loads(SAMPLE.read_text())
    samples[0]["conversation"]["session_1"][1]["text"] = "hello \ud800 world"
    bad = tmp_path / "surrogate.json"
    bad.write_text(json.dumps(samples))  # ensure_ascii: the escape "\ud800" in the file
    assert "\\ud800" in bad.read_text()
    proc = cli("dataset=sample", *FAST, f"dataset.path={bad}",
               f"paths.cache_dir={tmp_path / 'cache'}", f"hydra.run.dir={tmp_path / 'run'}")
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines() == [
        f"[synapse_pt] error: {bad}: sample 0 (sample-1): conversation.session_1[1].text: a lone "
        "surrogate \\ud800 at character 6: half of a UTF-16 pair escaped without its other "
        "half, not text; fix or remove the escape (HYDRA_FULL_ERROR=1 shows the traceback)"]


def test_require_text_names_the_field_and_lets_pairs_pass() -> None:
    """A surrogate pair (an emoji escaped as JSON does) is text; a lone low or high half is not,
    in a value or a key."""
    pair = json.loads('["\\ud83d\\ude00"]')
    require_text("f.json", '["\\ud83d\\ude00"]', pair)
    for text, field in (('{"a": [{"b": "x\\udc00"}]}', "a[0].b"),
                        ('{"a": {"\\ud800": 1}}', "a.<key>")):
        with pytest.raises(DataFormatError) as err:
            require_text("f.json", text, json.loads(text))
        assert str(err.value).startswith(f"f.json: file: {field}: a lone surrogate \\u")
