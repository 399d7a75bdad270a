"""Collect run folders into result tables (used by ``scripts/make_tables.py`` and notebooks).

Each run folder holds a ``metrics.json`` (:mod:`synapse_pt.commands.run`). :func:`find_runs` finds
them below
any folder (a Hydra multirun folder, ``outputs/``), :func:`load_runs` labels them by experiment
name, :func:`build_tables` assembles the main, ablation, delta, rejection, judge-sensitivity
(:mod:`~synapse_pt.eval.reports.judge_sensitivity`), paper-ablation and provenance tables, and
:func:`write` writes them as Markdown and LaTeX into a folder of tables, committed
(:mod:`~synapse_pt.eval.records.commit`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from synapse_pt.data.schema import gold_set_id, question_set_id
from synapse_pt.eval.qa.scorers import answer_scorers, scorer_protocol
from synapse_pt.eval.records.commit import JOURNAL, REPLACED, STAGING, committing, holding
from synapse_pt.eval.records.outputs import PATH_KEYS, RESULT_NEUTRAL_KEYS, naming
from synapse_pt.eval.records.record import build_label
from synapse_pt.eval.reports import paper_numbers
from synapse_pt.eval.reports.judge_sensitivity import FORMATS, has_judges, sensitivity_tables
from synapse_pt.eval.reports.report import run_gold, run_tables
from synapse_pt.eval.reports.tables import PAPER_AVERAGE, PAPER_PREFIX, to_latex, to_markdown

#: folders of the commit protocol whose files are no run's outputs (yet, or any more)
BOOKKEEPING_DIRS = {STAGING, REPLACED}

REJECTION_COLUMNS = {
    "true_rejection_rate": "true rejection (cat 5 gated)",
    "false_rejection_rate": "false rejection (cat 1-4 gated)",
    "c_ret_auc_adversarial": "AUC of C_ret (cat 5 vs rest)",
    "gate_score_auc_adversarial": "AUC of the gate's signal (cat 5 vs rest)",
    "gated_rate": "gated (all)",
    "context_tokens_mean": "context tokens/query",
}


def _natural_key(path: Path) -> list[Any]:
    """``.../2_x`` before ``.../10_x``: Hydra job numbers sort as numbers."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(path))]


def find_runs(paths: Sequence[str | Path]) -> list[Path]:
    """Run folders (holding ``metrics.json``) at or below each of ``paths``, each once, in order.
    A commit a killed run left below them is completed first (:func:`~synapse_pt.eval.records.
    commit.recover`, logged); a staging folder's files are no run's."""
    found: list[Path] = []
    for p in map(Path, paths):
        if not p.exists():
            raise FileNotFoundError(f"make_tables: {p} does not exist")
        for journal in sorted(p.rglob(JOURNAL)):
            with holding(journal.parent):  # completes it
                pass
        hits = [p / "metrics.json"] if (p / "metrics.json").is_file() else sorted(
            (h for h in p.rglob("metrics.json")
             if not BOOKKEEPING_DIRS & set(h.relative_to(p).parts)), key=_natural_key)
        found.extend(h.parent.resolve() for h in hits if h.parent.resolve() not in found)
    if not found:
        raise FileNotFoundError(f"make_tables: no metrics.json under {[str(p) for p in paths]}")
    return found


#: Overrides that say nothing of a run's setting (where it wrote, caches, data files and other paths
#: of :data:`~synapse_pt.eval.records.outputs.PATH_KEYS`, devices, logging, the result-neutral
#: settings of :data:`~synapse_pt.eval.records.outputs.RESULT_NEUTRAL_KEYS`), by key or key
#: prefix: left out of a row's label
LABEL_NEUTRAL_KEYS = ("hydra", *PATH_KEYS, "device", "task_name", "experiment_name",
                      *RESULT_NEUTRAL_KEYS)


def _override_key(override: str) -> str:
    return override.lstrip("+~").split("=", 1)[0]


def run_overrides(folder: Path) -> list[str]:
    """The command-line overrides a run was started with (Hydra's ``.hydra/overrides.yaml``),
    less the :data:`LABEL_NEUTRAL_KEYS`; ``[]`` for a run started without Hydra's CLI."""
    path = folder / ".hydra" / "overrides.yaml"
    if not path.is_file():
        return []
    try:
        listed = yaml.safe_load(path.read_text(encoding="utf-8")) or []
    except (UnicodeDecodeError, yaml.YAMLError) as err:
        raise ValueError(f"make_tables: {path} is not YAML ({type(err).__name__})") from err
    if not isinstance(listed, list):
        raise ValueError(f"make_tables: {path} is not a list of overrides")
    return [str(o) for o in listed
            if not any(_override_key(str(o)) == k or _override_key(str(o)).startswith(k + ".")
                       for k in LABEL_NEUTRAL_KEYS)]


def system_label(identity: Mapping[str, Any], overrides: Sequence[str],
                 shared: set[str], fallback: str) -> str:
    """A run without an experiment name, by system and setting: the memory system's name
    (``identity.memory.memory``; else ``fallback``) and its overrides that not every run
    tabulated with it shares (``memory=`` left out: the name says it), e.g.
    ``bm25 (memory.k=5)``."""
    name = (identity.get("memory") or {}).get("memory") or fallback
    own = [o for o in overrides if o not in shared and _override_key(o) != "memory"]
    return f"{name} ({' '.join(own)})" if own else str(name)


def load_runs(folders: Sequence[Path], baseline: str | None = None
              ) -> tuple[dict[str, dict[str, Any]], dict[str, Path]]:
    """``({label: metrics}, {label: folder})``; labels from ``identity.experiment``, else by
    system and setting (:func:`system_label`: the memory's name and the overrides that differ
    between the runs), an LLM-free GAAMA / Membox build named in its label
    (:func:`~synapse_pt.eval.records.record.build_label`, e.g. ``gaama_fused (gaama-llm-free)``),
    made
    unique with the folder name; the ``baseline`` row first (its label as asked for)."""
    loaded: list[tuple[Path, dict[str, Any], list[str]]] = []
    for folder in folders:
        path = folder / "metrics.json"
        try:
            metrics = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise ValueError(f"make_tables: {path} is not a synapse_pt metrics.json "
                             f"({type(err).__name__}: {err})") from err
        except OSError as err:
            raise ValueError(f"make_tables: {path} cannot be read ({err.strerror or err})"
                             ) from err
        if not isinstance(metrics, dict) or not all(
                isinstance(metrics.get(k), dict) for k in ("identity", "metrics")):
            raise ValueError(f"make_tables: {path} is not a synapse_pt metrics.json (no "
                             "'identity' and 'metrics' objects at its top level)")
        loaded.append((folder, metrics, run_overrides(folder)))
    shared = set.intersection(*(set(o) for _, _, o in loaded)) if loaded else set()
    runs: dict[str, dict[str, Any]] = {}
    where: dict[str, Path] = {}
    for folder, metrics, overrides in loaded:
        identity = metrics["identity"]
        label = identity.get("experiment") or system_label(
            identity, overrides, shared, identity.get("task_name") or folder.name)
        if label != baseline:  # an LLM-free GAAMA / Membox build is named so in its label
            label = build_label(label, identity.get("memory"))
        if label in runs:
            label = f"{label} ({folder.name})"
        runs[label] = metrics
        where[label] = folder
    if baseline in runs:
        runs = {baseline: runs[baseline]} | {k: v for k, v in runs.items() if k != baseline}
    return runs, where


def question_set(metrics: Mapping[str, Any], folder: Path) -> tuple[int | None, str | None]:
    """``(number, id)`` of the questions a run was scored on: ``identity.dataset.question_set``
    (:func:`~synapse_pt.data.schema.question_set_id`), or for a run recorded before it, the id of
    the ``(sample_id, qa_index)`` pairs of its ``predictions.parquet``; ``None`` where neither
    is there."""
    dataset = metrics["identity"].get("dataset") or {}
    number, ident = dataset.get("questions"), dataset.get("question_set")
    predictions = folder / "predictions.parquet"
    if ident is None and predictions.is_file():
        frame = pd.read_parquet(predictions, columns=["sample_id", "qa_index"])
        ident = question_set_id(f"{s}/{q}" for s, q in zip(frame["sample_id"], frame["qa_index"],
                                                           strict=True))
        number = len(frame)
    return number, ident


#: the columns of ``predictions.parquet`` a question's gold is read from (in
#: :meth:`~synapse_pt.data.schema.Question.gold`'s order, after the key's two)
GOLD_COLUMNS = ("sample_id", "qa_index", "category", "question", "gold", "adversarial_answer",
                "evidence")


def gold_set(metrics: Mapping[str, Any], folder: Path) -> str | None:
    """What a run's questions were scored against: ``identity.dataset.gold_set``
    (:func:`~synapse_pt.data.schema.gold_set_id`), or for a run recorded before it and scored
    against its file's own gold (``dataset.gold`` official or both), the same id of its
    ``predictions.parquet``; ``None`` where neither is there."""
    ident = (metrics["identity"].get("dataset") or {}).get("gold_set")
    predictions = folder / "predictions.parquet"
    if ident is None and predictions.is_file() and run_gold(metrics["identity"]) != "audited":
        frame = pd.read_parquet(predictions, columns=list(GOLD_COLUMNS))
        ident = gold_set_id(
            (f"{r.sample_id}/{r.qa_index}", int(r.category), r.question, _text(r.gold),
             _text(r.adversarial_answer), [str(e) for e in r.evidence])
            for r in frame.itertuples(index=False))
    return ident


def _text(value: Any) -> str | None:
    """A text cell of ``predictions.parquet`` (``None`` where the question has none)."""
    return None if value is None or (isinstance(value, float) and value != value) else str(value)


def check_one_question_set(runs: Mapping[str, Mapping[str, Any]],
                           where: Mapping[str, Path]) -> None:
    """A :class:`ValueError` naming each run with its number of questions and question set
    where the runs were scored on different questions (a table sets its rows side by side only
    over the same ones; a run whose set is unknown is compared by its number of questions), or
    on the same questions against different gold (:func:`gold_set`: an edited file's answers or
    evidence; a run whose gold is unknown is not compared)."""
    sets = {label: question_set(m, where[label]) for label, m in runs.items()}
    keys = {ident if ident is not None else f"{number} questions" for number, ident in
            sets.values()}
    if len(keys) > 1:
        listed = "; ".join(f"{label}: {number} questions, set {ident or 'unknown'}"
                           for label, (number, ident) in sets.items())
        raise ValueError(f"the runs were scored on different questions ({listed}); make the "
                         "tables of each question set apart")
    golds = {label: gold_set(m, where[label]) for label, m in runs.items()}
    if len({g for g in golds.values() if g is not None}) > 1:
        listed = "; ".join(f"{label}: gold {g or 'unknown'} ({_data_of(runs[label])})"
                           for label, g in golds.items())
        raise ValueError(f"the runs were scored against different gold on the same questions "
                         f"({listed}); make the tables of each gold apart")


def question_groups(runs: Mapping[str, Mapping[str, Any]],
                    where: Mapping[str, Path]) -> list[list[str]]:
    """The labels of ``runs`` grouped by the questions they were scored on (their question set,
    else their number of questions: :func:`question_set`), each group in the order of ``runs``,
    the groups in the order of their first run: the runs whose tables can be set side by side."""
    groups: dict[str, list[str]] = {}
    for label, metrics in runs.items():
        number, ident = question_set(metrics, where[label])
        groups.setdefault(ident if ident is not None else f"{number} questions", []).append(label)
    return list(groups.values())


def _data_of(metrics: Mapping[str, Any]) -> str:
    """The data file of a run, and how it compares with its release."""
    data = metrics["identity"].get("dataset") or {}
    named = str(data.get("path"))
    if data.get("upstream"):
        named += f", upstream {data['upstream']}"
    if data.get("upstream_change"):
        named += f": {data['upstream_change']}"
    return named


def category_names(runs: Mapping[str, Mapping[str, Any]]) -> dict[int, str]:
    """The runs' category names (``identity.category_names``); they must agree."""
    names: dict[int, str] | None = None
    for label, m in runs.items():
        named = m["identity"].get("category_names")
        if not isinstance(named, dict):
            raise ValueError(f"make_tables: run {label!r} records no category names "
                             "(identity.category_names in its metrics.json)")
        these = {int(k): v for k, v in named.items()}
        if names is not None and these != names:
            raise ValueError(f"make_tables: run {label!r} names its categories {these}, "
                             f"others {names}; tables need one naming")
        names = these
    assert names is not None
    return names


def rejection_table(runs: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    """Rows = runs; the retrieval section's rejection figures (fractions) and context size."""
    rows = {label: {title: m.get("retrieval", {}).get(key) for key, title in
                    REJECTION_COLUMNS.items()} for label, m in runs.items()}
    df = pd.DataFrame.from_dict(rows, orient="index", columns=list(REJECTION_COLUMNS.values()))
    df.index.name = "config"
    return df.astype("float64")


def delta_table(ablation: pd.DataFrame, baseline: str) -> pd.DataFrame:
    """Our rows of an ablation table minus the ``baseline`` row (paper rows dropped)."""
    ours = ablation.loc[[i for i in ablation.index if not str(i).startswith(PAPER_PREFIX)]]
    delta = (ours - ours.loc[baseline]).drop(columns=[PAPER_AVERAGE], errors="ignore")
    delta.attrs.update(ablation.attrs, delta_from=baseline)
    return delta


def paper_ablation_table() -> pd.DataFrame:
    """The paper's reported ablation effects (SPEC §1.3; F1 in %, gpt-4o-mini)."""
    df = pd.DataFrame([{"config": a["config"], "change": a["change"], "column": a["metric"],
                        "full": a["full"], "ablated": a["ablated"]}
                       for a in paper_numbers.ABLATIONS]).set_index("config")
    return df


#: What makes two runs' numbers comparable besides their configs: how answers were asked for and
#: scored, and what they were scored against (identity fields of metrics.json, dotted for nested
#: ones; ``prompts`` holds the prompt texts' hashes, ``dataset.gold`` the gold and
#: ``dataset.audit.sha256`` the audit file that corrected it).
#: the scorers' own protocol fields (:attr:`~synapse_pt.steps.Scorer.protocol`: how a
#: scorer treats a question), compared like the rest; none in a retrieval run
SCORER_FIELDS = tuple(scorer_protocol(True))
PROTOCOL_FIELDS = ("eval_mode", "strict", "category_date_instruction", "category5_options",
                   "strict_evidence", "answer_style", "scoring_protocols", "judge_protocol",
                   "judges", "judge_unreadable", "dataset.gold", "dataset.audit.sha256", "prompts",
                   "prompt_source", *SCORER_FIELDS)
# not a protocol field: ``upstream_prompts`` (the related systems' files a run sent) differs
# between the memories by design under answer_style=system; the runs table lists it
#: the value of a protocol field a run recorded before the field existed, where it is known: a run
#: from before ``dataset.gold`` scored the release's gold; a scorer's field, what the scorer did
#: before it (:attr:`~synapse_pt.steps.Scorer.protocol_before`)
PROTOCOL_DEFAULTS = {"dataset.gold": "official",
                     **{k: v for s in answer_scorers() for k, v in s.protocol_before.items()}}


def protocol_of(identity: Mapping[str, Any]) -> dict[str, Any]:
    """A run's protocol (``PROTOCOL_FIELDS``; a field an older run lacks is its
    ``PROTOCOL_DEFAULTS`` value, else ``None``)."""
    out = {}
    for f in PROTOCOL_FIELDS:
        if f in ("prompt_source", *SCORER_FIELDS) and identity.get("eval_mode") == "retrieval":
            out[f] = None  # a retrieval run sends no prompt and scores no answer
            continue
        node: Any = identity
        for part in f.split("."):
            node = node.get(part) if isinstance(node, Mapping) else None
        out[f] = PROTOCOL_DEFAULTS.get(f) if node is None else node
    return out


def protocol_differences(runs: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """``{field: {label: value}}`` for every protocol field on which the runs differ. Prompt
    hashes are compared per prompt (``prompts.<module.NAME>``)."""
    protocols = {label: protocol_of(m["identity"]) for label, m in runs.items()}
    out: dict[str, dict[str, Any]] = {}
    for f in PROTOCOL_FIELDS:
        if f == "prompts":
            names = sorted({n for p in protocols.values() for n in (p["prompts"] or {})})
            for n in names:
                values = {label: (p["prompts"] or {}).get(n) for label, p in protocols.items()}
                if len({json.dumps(v) for v in values.values()}) > 1:
                    out[f"prompts.{n}"] = values
            continue
        values = {label: p[f] for label, p in protocols.items()}
        if len({json.dumps(v, sort_keys=True) for v in values.values()}) > 1:
            out[f] = values
    return out


def runs_table(runs: Mapping[str, Mapping[str, Any]], where: Mapping[str, Path]) -> pd.DataFrame:
    """Provenance of each row: folder, commit, data and settings."""
    rows = {}
    for label, m in runs.items():
        ident = m["identity"]
        mem = ident.get("memory", {})
        rows[label] = {"folder": str(where[label]), "git_commit": ident.get("git_commit"),
                       "dataset": ident.get("dataset", {}).get("name"),
                       "gold": run_gold(ident),
                       "questions": ident.get("dataset", {}).get("questions"),
                       "question_set": question_set(m, where[label])[1],
                       "gold_set": gold_set(m, where[label]),
                       "eval_mode": ident.get("eval_mode"), "memory": mem.get("memory"),
                       "build": mem.get("build"), "llm_free": mem.get("llm_free"),
                       "extractor": mem.get("extractor"), "embedder": ident.get("embedder"),
                       "llm": ident.get("llm"), "smoke": ident.get("smoke"),
                       "strict": ident.get("strict"), "answer_style": ident.get("answer_style"),
                       "judge_protocol": ident.get("judge_protocol"),
                       "judges": ", ".join(ident.get("judges") or []) or None,
                       "prompt_source": ident.get("prompt_source"),
                       "upstream_prompts": "; ".join(
                           _upstream_cell(rel, found)
                           for rel, found in (ident.get("upstream_prompts") or {}).items())}
    df = pd.DataFrame.from_dict(rows, orient="index")
    df.index.name = "config"
    return df


def _upstream_cell(rel: str, found: str | Mapping[str, str]) -> str:
    """``membox/membox.py b00b7d6885 (templates.json)``: a file's sha256 and where its templates
    were read (a run before issue 57 recorded the sha256 alone, read from the source)."""
    if isinstance(found, str):
        return f"{rel} {found[:12]}"
    return f"{rel} {found['sha256'][:12]} ({found.get('read_from', 'source')})"


def build_tables(runs: Mapping[str, Mapping[str, Any]], where: Mapping[str, Path],
                 baseline: str | None) -> dict[str, tuple[pd.DataFrame, str]]:
    """``{name: (table, float format)}``: the metric tables (percent) and the others. Runs
    scored on different questions are refused (:func:`check_one_question_set`)."""
    check_one_question_set(runs, where)
    names = category_names(runs)
    tables: dict[str, tuple[pd.DataFrame, str]] = {
        name: (df, ".1f") for name, df in run_tables(runs, names,
                                                      ablation_baseline=baseline).items()}
    if baseline is not None:
        for name in [n for n in tables if n.startswith("ablation_")]:
            tables[name.replace("ablation_", "delta_", 1)] = (
                delta_table(tables[name][0], baseline), "+.1f")
    if any("retrieval" in m for m in runs.values()):
        tables["rejection"] = (rejection_table(runs), ".3f")
    if has_judges(runs):  # judge sensitivity: every judge's and scorer's order of the systems
        tables.update({name: (df, FORMATS[name])
                       for name, df in sensitivity_tables(runs).items()})
    tables["paper_ablations"] = (paper_ablation_table(), ".1f")
    tables["runs"] = (runs_table(runs, where), ".1f")
    return tables


#: the file holding every table of a folder of tables, one ``### <name> ...`` section each
COMBINED = "tables.md"
_SECTION = re.compile(r"^### (\S+)", re.MULTILINE)


def write_files(tables: Mapping[str, tuple[pd.DataFrame, str]], folder: Path) -> list[Path]:
    """Each table as ``<name>.md`` and ``<name>.tex`` in ``folder`` (made as needed), and all of
    them in ``tables.md``; the files written."""
    folder.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    sections = []
    for name, (df, fmt) in tables.items():
        md = to_markdown(df, floatfmt=fmt)
        scale = df.attrs.get("scale")
        parts = [df.attrs.get("metric"), f"x{scale:g}" if scale else None,
                 f"minus {df.attrs['delta_from']}" if "delta_from" in df.attrs else None,
                 f"{df.attrs['gold']} gold" if "gold" in df.attrs else None]
        note = f" ({', '.join(filter(None, parts))})" if any(parts) else ""
        sections.append(f"### {name}{note}\n\n{md}")
        caption = name.replace("_", " ") + note
        for suffix, text in ((".md", md), (".tex", to_latex(df, floatfmt=fmt, caption=caption))):
            written.append(_write_text(folder / f"{name}{suffix}", text))
    written.append(_write_text(folder / COMBINED, "\n".join(sections)))
    return written


def _write_text(path: Path, text: str) -> Path:
    with naming(path):
        path.write_text(text)
    return path


def legacy_table_files(folder: Path, prefix: str = "") -> list[str]:
    """The files a version before manifests wrote into a folder of tables (``prefix``: the
    folder's path in the committed folder, e.g. ``tables/``): ``tables.md`` and the ``.md`` and
    ``.tex`` of each table it holds a section of; none without a ``tables.md``."""
    combined = folder / prefix / COMBINED
    if not combined.is_file():
        return []
    names = _SECTION.findall(combined.read_text(errors="replace"))
    return [f"{prefix}{COMBINED}", *(f"{prefix}{n}{s}" for n in names for s in (".md", ".tex"))]


def write(tables: Mapping[str, tuple[pd.DataFrame, str]], out: Path) -> list[Path]:
    """The tables in ``out`` (:func:`write_files`), committed as every folder the project writes
    (:mod:`synapse_pt.eval.records.commit`: locked, staged, swapped in whole): the tables an earlier
    call wrote there and this one does not are removed, every other file is left; the files
    written."""
    with committing(out, legacy=legacy_table_files) as staged:
        written = write_files(tables, staged)
    return [out / p.relative_to(staged) for p in written]
