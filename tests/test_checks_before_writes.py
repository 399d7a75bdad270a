"""Every check before the first write (issue 58, item 3): the objective, an Optuna sweep's ranges,
the judges a mode ignores, the API key, the settings that form paths and the roots named by the
environment are checked before a run makes or writes a folder, in one line naming the setting.

On main 492016d: a typo in a section's key (``objective=retrieval.false_rejection_rat``) was found
after the run had replaced the folder's outputs (a ``KeyError`` traceback); ``interval(0.5,0.1)``
was a traceback after the sweep's folder was made; ``eval.judges`` in retrieval mode passed
without a word; a key of white space passed the check; ``task_name=../../../escaped_task`` made a
folder outside ``outputs/``; a ``SYNAPSE_ROOT`` that does not exist was created; ``seed=abc`` was
a traceback."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from loopback import completion_body, echo, serve
from test_configs import make_cfg  # tests/ is on sys.path (rootdir conftest)

import synapse_pt.commands.build
from synapse_pt.commands.preflight import section_keys
from synapse_pt.commands.run import run
from synapse_pt.common.errors import ConfigError
from synapse_pt.eval.qa.objective import run_sections
from synapse_pt.eval.qa.pipeline import EvalSettings

REPO_ROOT = Path(__file__).resolve().parents[1]
USAGE = {"prompt_tokens": 11, "completion_tokens": 3}
FAST = ("dataset=sample", "embedder=hashing", "logger=none", "device=cpu", "memory=bm25")


def cli(*overrides: str, cwd: Path = REPO_ROOT, env: dict[str, str] | None = None
        ) -> subprocess.CompletedProcess:
    """``python -m synapse_pt.run`` of this checkout (``PYTHONPATH``: from any folder)."""
    env = {**{k: v for k, v in os.environ.items() if k not in ("SYNAPSE_ROOT", "SYNAPSE_CACHE")},
           "TQDM_DISABLE": "1", "PYTHONPATH": str(REPO_ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-m", "synapse_pt.run", *overrides], cwd=cwd,
                          capture_output=True, text=True, timeout=300, env=env)


def files_of(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


def refuse_encoder(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """From now on, building the run's encoder (the first step of the slow part) fails the
    test; the list names each attempt."""
    built: list[str] = []

    def refuse(cfg):
        built.append(str(cfg.get("_target_")))
        raise AssertionError("the encoder was built: the check came after the slow part began")

    monkeypatch.setattr(synapse_pt.commands.build, "build_encoder", refuse)
    return built


@pytest.fixture
def no_encoder(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    return refuse_encoder(monkeypatch)


def test_a_section_key_typo_stops_the_run_before_it_replaces_anything(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``objective=retrieval.false_rejection_rat`` with ``overwrite=true`` over a finished run:
    refused in one line naming the section's keys before the encoder is built; the finished
    run's files stay byte for byte (on main: replaced, then a KeyError)."""
    folder = tmp_path / "run"
    cache = f"paths.cache_dir={tmp_path / 'cache'}"
    run(make_cfg(*FAST, cache, output_dir=str(folder)))
    before = files_of(folder)
    built = refuse_encoder(monkeypatch)
    cfg = make_cfg(*FAST, cache, "memory.k=5", "overwrite=true",
                   "objective=retrieval.false_rejection_rat", output_dir=str(folder))
    with pytest.raises(ConfigError, match=r"^objective=retrieval\.false_rejection_rat: retrieval "
                       r"has no key 'false_rejection_rat'; its keys: true_rejection_rate, "
                       r"false_rejection_rate, ") as err:
        run(cfg)
    assert "\n" not in str(err.value) and built == []
    assert files_of(folder) == before


def test_the_section_keys_checked_are_the_keys_a_run_writes(tmp_path: Path) -> None:
    """:func:`section_keys` (what a section's objective is checked against) gives exactly the keys
    of each flat section of ``metrics.json``: a retrieval run, and a qa run with two judges
    against a loopback server whose every judge reply is readable (``retrieval``, ``judge``,
    ``usage``). (A category whose every judge reply is unreadable has no judge accuracy: that key
    passes the check and is refused before the outputs are committed, ``run.objective_value``.)
    """
    cache = f"paths.cache_dir={tmp_path / 'cache'}"
    retrieval = run(make_cfg(*FAST, cache, output_dir=str(tmp_path / "retrieval")))
    def readable(body: dict, count: int) -> tuple[int, str, float]:
        """mem0's judge gets a label it reads (the echo of its prompt holds both words)."""
        if "CORRECT or WRONG" in body["messages"][-1]["content"]:
            return 200, completion_body('{"label": "CORRECT"}', USAGE), 0.0
        return echo(body, count)

    with serve(readable) as server:
        judged = run(make_cfg(*FAST, cache, "eval=judge", "eval.judge_runs=2", "llm=vllm",
                              "eval.judges=[mem0,realtalk]", f"llm.backend.base_url={server.url}",
                              "llm.backend.model=m", "llm.backend.max_retries=0",
                              output_dir=str(tmp_path / "qa")))
    asked = {1, 2, 3, 4, 5}  # the sample asks every category
    for metrics, settings, llm in (
            (retrieval, EvalSettings(), False),
            (judged, EvalSettings(mode="qa", judge_runs=2, judges=("mem0", "realtalk")), True)):
        sections = run_sections(settings, llm=llm, peer_rules=True, gold="official",
                                llm_extractor=False)
        keys = section_keys(settings, sections, categories=asked, answerable=(1, 2, 3, 4),
                            unanswerable=5, gold="official")
        assert set(keys) == {s for s in ("retrieval", "judge", "usage") if s in metrics}
        for section, listed in keys.items():
            assert sorted(listed) == sorted(metrics[section]), section


def test_an_optuna_range_it_cannot_draw_from_is_one_line_and_makes_no_folder(
        tmp_path: Path) -> None:
    """``memory.params.S=interval(0.5,0.1)`` in an Optuna sweep: one line naming the parameter,
    exit status 1, no sweep folder and no study storage (on main: optuna's ValueError as a
    traceback, the sweep folder left behind)."""
    proc = cli("-m", "hparams_search=synapse_optuna", *FAST, "memory=synapse",
               "memory.params.S=interval(0.5,0.1)", "hydra.sweeper.n_trials=1",
               f"paths.cache_dir={tmp_path / 'cache'}", f"hydra.sweep.dir={tmp_path / 'sweep'}")
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines() == [
        "[synapse_pt] error: memory.params.S=interval(0.5,0.1) (the command line): not a range "
        "the Optuna sweeper can draw from: The `low` value must be smaller than or equal to the "
        "`high` value (low=0.5, high=0.1). (HYDRA_FULL_ERROR=1 shows the traceback)"]
    assert not (tmp_path / "sweep").exists() and not (tmp_path / "cache").exists()


def test_judges_a_mode_ignores_are_warned_before_the_slow_part(
        tmp_path: Path, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``eval.judges=[mem0,gaama]`` (and ``eval.judge_runs=2``) in retrieval mode: a warning
    naming both, logged before the encoder is built (on main: nothing for ``eval.judges``; the
    ``judge_runs`` warning came after the whole retrieval)."""
    seen: list[list[str]] = []
    real = synapse_pt.commands.build.build_encoder

    def record(cfg):
        seen.append([r.getMessage() for r in caplog.records if r.levelno == logging.WARNING])
        return real(cfg)

    monkeypatch.setattr(synapse_pt.commands.build, "build_encoder", record)
    with caplog.at_level(logging.WARNING):
        run(make_cfg(*FAST, "smoke=true", "reuse_ingested=false", "eval.judges=[mem0,gaama]",
                     "eval.judge_runs=2",
                     f"paths.cache_dir={tmp_path / 'cache'}", output_dir=str(tmp_path / "run")))
    assert len(seen) == 1
    assert ("eval.judges=['mem0', 'gaama'] and eval.judge_runs=2 ignored: eval.mode=retrieval "
            "has no answers to judge (eval=judge, or eval=qa eval.judge_runs=1, judges them)"
            ) in seen[0]


def test_a_blank_api_key_is_a_missing_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          no_encoder: list[str]) -> None:
    """``OPENAI_API_KEY`` of white space for api.openai.com: refused before the encoder is built,
    naming the variable (on main: it passed, and the server would have been asked)."""
    monkeypatch.setenv("OPENAI_API_KEY", " \t ")
    cfg = make_cfg(*FAST, "eval=qa", "llm=openai", f"paths.cache_dir={tmp_path / 'cache'}",
                   output_dir=str(tmp_path / "run"))
    with pytest.raises(ConfigError, match=r"^llm\.backend\.api_key_env: https://api\.openai\.com"
                       r"/v1 needs an API key and the environment variable OPENAI_API_KEY "
                       r"holds only white space; export OPENAI_API_KEY="):
        run(cfg)
    assert no_encoder == [] and not (tmp_path / "run").exists()


def test_a_task_name_that_leaves_outputs_is_refused_before_any_folder(tmp_path: Path) -> None:
    """``task_name=../../../escaped_task`` from a folder three levels down: one line naming the
    setting, exit status 1, and no folder anywhere (on main: ``escaped_task/<stamp>/`` made
    beside the three levels, outside ``outputs/``)."""
    cwd = tmp_path / "a" / "b" / "c"
    cwd.mkdir(parents=True)
    proc = cli(*FAST, "task_name=../../../escaped_task", f"paths.cache_dir={tmp_path / 'cache'}",
               cwd=cwd)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines() == [
        "[synapse_pt] error: task_name='../../../escaped_task': it names a folder inside its "
        "root (outputs/<task_name>/..., a study's <out>/<i>_<label>), so it must be a relative "
        "name without '..', '.', a leading '/' or '~', or a backslash (e.g. my_study, "
        "ablations/no_gate) (HYDRA_FULL_ERROR=1 shows the traceback)"]
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["a", "b", "c"]


@pytest.mark.parametrize("label", ["..", "../x", "/tmp/x", "a/../../x", "~/x", "a\\..\\b", ""])
def test_path_forming_labels_stay_inside_their_root(tmp_path: Path, label: str,
                                                    no_encoder: list[str]) -> None:
    """``task_name`` and ``experiment_name`` (a study's variant label is both) that would name a
    folder outside its root are refused before anything is made; a name with subfolders is
    not."""
    for key in ("task_name", "experiment_name"):
        cfg = make_cfg(*FAST, f"{key}='{label}'", output_dir=str(tmp_path / "run"))
        with pytest.raises(ConfigError, match=f"^{key}="):
            run(cfg)
    assert not (tmp_path / "run").exists()
    from synapse_pt.commands.preflight import check_path_label

    assert check_path_label("task_name", "ablations/no_gate") == "ablations/no_gate"


def test_a_root_that_does_not_exist_is_named_not_created(tmp_path: Path) -> None:
    """``SYNAPSE_ROOT=<missing>``: one line naming the variable and the setting it fills, exit
    status 1, the root not created (on main: the run made it, and ``.cache/`` in it)."""
    root = tmp_path / "no_such_root"
    proc = cli(*FAST, f"hydra.run.dir={tmp_path / 'run'}", env={"SYNAPSE_ROOT": str(root)})
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines() == [
        f"[synapse_pt] error: paths.root_dir='{root}' (from SYNAPSE_ROOT='{root}') does not "
        "exist; the root is not created: set SYNAPSE_ROOT to an existing folder (the checkout) "
        "or unset it (HYDRA_FULL_ERROR=1 shows the traceback)"]
    assert not root.exists() and not (tmp_path / "run").exists()


def test_a_seed_that_is_not_an_integer_is_one_line(tmp_path: Path) -> None:
    """``seed=abc``: one line, exit status 1, no folder (on main: ``int()``'s ValueError as a
    traceback)."""
    proc = cli(*FAST, "seed=abc", f"hydra.run.dir={tmp_path / 'run'}")
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines() == [
        "[synapse_pt] error: seed must be an integer, got 'abc' (HYDRA_FULL_ERROR=1 shows the "
        "traceback)"]
    assert not (tmp_path / "run").exists()
