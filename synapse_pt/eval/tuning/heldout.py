"""Held-out tuning of a memory's retrieval settings (SPEC §1.5: tuned numbers held out).

The search evaluates every candidate configuration on every question once, giving ``[C, Q]``
matrices of evidence recall@k and ``C_ret`` (:func:`search_matrix`): SYNAPSE in batched sweeps
(:meth:`~synapse_pt.memory.synapse.SynapseMemory.sweep`: the (configuration, question) pairs are
the activation columns), any other memory by setting each candidate on the ingested memory
(``configure_retrieval``) and retrieving for every question in one call. Folds are sets of
*conversations*: for each fold the configuration with the best recall@10 over the answerable
questions of the other conversations is chosen, and only then read on the fold's own questions.
Every question is thus scored by a configuration chosen without it. The gate's ``tau_gate`` is
calibrated the same way: the ``target_fr`` quantile of ``C_ret`` over the training
conversations' answerable questions (the paper's < 2.5 % false rejection).

Candidates come from the memory's declared search space
(:class:`~synapse_pt.memory.declare.SearchSpace`): random combinations of its discrete
settings, each with ``per_combination`` random draws of its continuous ranges; its reference
configuration (the paper's or the public code's values, never values tuned on the data) is
candidate 0.
"""

from __future__ import annotations

import copy
import itertools
import json
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from synapse_pt.common.progress import progress
from synapse_pt.data.categories import ADVERSARIAL, ANSWERABLE
from synapse_pt.data.schema import Question
from synapse_pt.eval.qa.scorers.retrieval import evidence_recall_from_index, roc_auc, unit_recall
from synapse_pt.memory.base import MemorySystem
from synapse_pt.memory.declare import SearchSpace
from synapse_pt.memory.synapse import SynapseMemory
from synapse_pt.retrieval.settings import SynapseParams

KS = (5, 10, 30)

#: a candidate: its discrete settings and ``[per_combination]`` draws of its continuous ones
Candidate = tuple[dict[str, Any], dict[str, torch.Tensor]]


def make_folds(sample_ids: Sequence[str], scheme: str | Sequence[str]) -> list[list[str]]:
    """Test folds (lists of conversations). ``"kfold<n>"``: ``n`` folds of consecutive
    conversations; a list of ids: one fold holding them (a fixed split, tuned on the rest)."""
    ids = list(sample_ids)
    if isinstance(scheme, str):
        if not scheme.startswith("kfold") or not scheme[5:].isdigit():
            raise ValueError(f"folds must be 'kfold<n>' or a list of sample ids, got {scheme!r}")
        n = int(scheme[5:])
        if not 2 <= n <= len(ids):
            raise ValueError(f"folds={scheme!r}: need 2 <= n <= {len(ids)} conversations")
        return [list(part) for part in np.array_split(np.array(ids, dtype=object), n)]
    test = list(scheme)
    unknown = sorted(set(test) - set(ids))
    if unknown or not test or len(test) == len(ids):
        raise ValueError(f"split {test}: needs a proper subset of the conversations {ids} "
                         f"(unknown: {unknown})")
    return [test]


def candidates(space: SearchSpace, num_combinations: int, per_combination: int, seed: int
               ) -> list[Candidate]:
    """``[(discrete settings, {key: [per_combination] tensor})]`` from ``space``, its
    reference values first: ``num_combinations`` combinations of the discrete settings (the
    reference's, then random others), each with ``per_combination`` draws of the continuous
    ranges (one draw where the space has none)."""
    base = space.reference
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    grid = list(itertools.product(*space.discrete.values()))
    literal = tuple(base[k] for k in space.discrete)
    rest = [g for g in grid if g != literal]
    chosen = [literal, *rng.sample(rest, min(num_combinations - 1, len(rest)))]
    out = []
    for i, combo in enumerate(chosen):
        values = {name: lo + (hi - lo) * torch.rand(per_combination, generator=gen)
                  for name, (lo, hi) in space.continuous.items()}
        if i == 0:
            for name in space.continuous:
                values[name][0] = float(base[name])
        out.append((dict(zip(space.discrete, combo, strict=True)), values))
    return out


def expand(cands: Sequence[Candidate]) -> list[dict[str, Any]]:
    """Every configuration of ``cands``, one flat ``{key: value}`` each, in order."""
    out = []
    for discrete, values in cands:
        n = next(iter(values.values())).numel() if values else 1
        out.extend({**discrete, **{k: float(v[i]) for k, v in values.items()}}
                   for i in range(n))
    return out


def retrieval_settings_of(memory_cfg: Mapping[str, Any], config: Mapping[str, Any],
                          space: SearchSpace) -> dict[str, Any]:
    """The ``configure_retrieval`` arguments that set ``config`` (dotted keys) over the run's
    memory config: every retrieval field the space touches, whole (a nested one, such as the
    fused retriever's ``weights``, with the candidate's entries set in it)."""
    merged = copy.deepcopy(dict(memory_cfg))
    for key, value in config.items():
        *path, last = key.split(".")
        node = merged
        for part in path:
            if not isinstance(node.get(part), Mapping):
                raise ValueError(f"memory.{key}: the search space varies it, but the memory "
                                 f"config has no mapping memory.{part}")
            node = node[part]
        node[last] = value
    return {field: merged[field] for field in sorted(space.fields())}


@dataclass
class SweepMatrix:
    """Per candidate (rows) and question (columns): ``recall[k]`` ``[C, Q]`` and ``c_ret``."""

    configs: list[dict]
    recall: dict[int, torch.Tensor]
    c_ret: torch.Tensor


def _field(key: str) -> str:
    """The :class:`SynapseParams` field of a SYNAPSE config key (``params.S`` -> ``S``)."""
    return key.split(".", 1)[-1]


def sweep_matrix(memory: SynapseMemory, questions: Sequence[Question],
                 blinded: Sequence[Question], cands: Sequence[Candidate],
                 base: SynapseParams, chunk: int = 32) -> SweepMatrix:
    """Evaluate every candidate on every question (``questions`` for evidence, ``blinded`` go to
    the memory), ``chunk`` continuous draws per batched call (SYNAPSE's batched sweep: candidate
    keys ``params.<field>`` / ``readings.<field>``; every other field is ``base``'s)."""
    evidence = memory.evidence_index(questions)
    B = len(questions)
    recall: dict[int, list[torch.Tensor]] = {k: [] for k in KS}
    c_ret: list[torch.Tensor] = []
    configs: list[dict] = []
    searched = {_field(k) for discrete, values in cands for k in (*discrete, *values)}
    fixed = {k: v for k, v in vars(base).items() if k not in searched}
    fixed["tau_gate"] = 0.0  # the gate is calibrated afterwards, from c_ret
    for discrete, values in progress(cands, desc="sweep", unit="combinations"):
        n = next(iter(values.values())).numel()
        for c0 in range(0, n, chunk):
            part = {k: v[c0:c0 + chunk].to(memory.device) for k, v in values.items()}
            C = next(iter(part.values())).numel()
            params = SynapseParams(**fixed, **{_field(k): v for k, v in discrete.items()},
                                   **{_field(k): v for k, v in part.items()})
            ranked = memory.sweep(blinded, params)
            rec = evidence_recall_from_index(ranked.index, ranked.valid, evidence.repeat(C, 1),
                                             ks=KS)
            for k in KS:
                recall[k].append(rec[k].view(C, B).cpu())
            c_ret.append(ranked.c_ret.view(C, B).float().cpu())
            configs.extend({**discrete, **{k: float(v[i]) for k, v in part.items()}}
                           for i in range(C))
    return SweepMatrix(configs, {k: torch.cat(v) for k, v in recall.items()}, torch.cat(c_ret))


def retrieval_matrix(memory: MemorySystem, memory_cfg: Mapping[str, Any], space: SearchSpace,
                     questions: Sequence[Question], blinded: Sequence[Question],
                     cands: Sequence[Candidate]) -> SweepMatrix:
    """Evaluate every candidate on every question by setting it on the ingested memory
    (``configure_retrieval``, :func:`retrieval_settings_of`) and retrieving for all questions
    in one call; recall@k counts the evidence the first k items cover, as a run scores it
    (:func:`~synapse_pt.eval.qa.scorers.retrieval.unit_recall`). The memory is left set to the
    run's own configuration (``memory_cfg``)."""
    evidence = [list(q.evidence) for q in questions]
    configs = expand(cands)
    recall: dict[int, list[torch.Tensor]] = {k: [] for k in KS}
    c_ret: list[torch.Tensor] = []
    try:
        for config in progress(configs, desc="search", unit="candidates"):
            memory.configure_retrieval(**retrieval_settings_of(memory_cfg, config, space))
            result = memory.retrieve(blinded)
            for k, v in unit_recall(result.units(), evidence, KS).items():
                recall[int(k)].append(v)
            c_ret.append(result.c_ret.float().cpu())
    finally:
        memory.configure_retrieval(**retrieval_settings_of(memory_cfg, {}, space))
    return SweepMatrix(configs, {k: torch.stack(v) for k, v in recall.items()},
                       torch.stack(c_ret))


def search_matrix(memory: MemorySystem, memory_cfg: Mapping[str, Any], space: SearchSpace,
                  questions: Sequence[Question], blinded: Sequence[Question],
                  cands: Sequence[Candidate], chunk: int = 32) -> SweepMatrix:
    """Every candidate on every question: the memory's batched sweep where its space says it
    has one (:attr:`SearchSpace.batched`: SYNAPSE), else :func:`retrieval_matrix`."""
    if space.batched:
        return sweep_matrix(memory, questions, blinded, cands, memory.params,  # type: ignore[arg-type, attr-defined]
                            chunk=chunk)
    return retrieval_matrix(memory, memory_cfg, space, questions, blinded, cands)


def _mean(recall: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """``[C]`` mean over the chosen question columns, ignoring NaN (no evidence)."""
    return torch.nanmean(recall[:, cols], dim=1)


def choose(sweep: SweepMatrix, train: torch.Tensor, answerable: torch.Tensor) -> int:
    """Index of the candidate with the best recall@10 over the training answerable questions
    (ties: the earlier candidate)."""
    score = _mean(sweep.recall[10], train & answerable)
    return int(torch.nan_to_num(score, nan=-1.0).argmax())


def calibrate_tau(c_ret: torch.Tensor, target_fr: float) -> float:
    """The threshold gating a share ``target_fr`` of ``c_ret`` (answerable training questions)."""
    return float(torch.quantile(c_ret.double(), target_fr))


def heldout(sweep: SweepMatrix, questions: Sequence[Question], folds: Sequence[Sequence[str]],
            names: Mapping[int, str], target_fr: float = 0.025,
            answerable: Sequence[int] = ANSWERABLE) -> tuple[pd.DataFrame, list[dict]]:
    """Per-question held-out results and one record per fold (chosen config, tau, train score);
    ``answerable``: the categories chosen on and calibrated on (the dataset's)."""
    sample = np.array([q.sample_id for q in questions])
    category = torch.tensor([q.category for q in questions])
    answerable = torch.isin(category, torch.tensor(list(answerable)))
    per_q = pd.DataFrame({"sample_id": sample, "category": category.numpy()})
    for k in KS:
        per_q[f"recall@{k}"] = np.nan
    per_q["c_ret"] = np.nan
    per_q["gated"] = False
    records = []
    for i, fold in enumerate(folds):
        test = torch.from_numpy(np.isin(sample, list(fold)))
        best = choose(sweep, ~test, answerable)
        tau = calibrate_tau(sweep.c_ret[best][~test & answerable], target_fr)
        cols = test.numpy()
        for k in KS:
            per_q.loc[cols, f"recall@{k}"] = sweep.recall[k][best][test].numpy()
        per_q.loc[cols, "c_ret"] = sweep.c_ret[best][test].numpy()
        per_q.loc[cols, "gated"] = (sweep.c_ret[best][test] < tau).numpy()
        records.append({"fold": i, "test": list(fold), "candidate": best,
                        "config": sweep.configs[best], "tau_gate": tau,
                        "train_recall@10": float(_mean(sweep.recall[10][best:best + 1],
                                                       ~test & answerable)),
                        "test_recall@10": float(_mean(sweep.recall[10][best:best + 1],
                                                      test & answerable))})
    per_q["category_name"] = per_q["category"].map(names)
    return per_q, records


def summary_table(per_q: pd.DataFrame, names: Mapping[int, str],
                  answerable: Sequence[int] = ANSWERABLE, unanswerable: int | None = ADVERSARIAL
                  ) -> tuple[pd.DataFrame, dict[str, float]]:
    """Rows recall@5/10/30 (per answerable category and over their questions, ``mean_q_1_4``)
    and gate figures, from the scored questions of ``per_q`` (those in some test fold)."""
    scored = per_q.dropna(subset=["c_ret"])
    ans = scored[scored["category"].isin(list(answerable))]
    rows = {}
    for k in KS:
        col = f"recall@{k}"
        row = {names[c]: ans.loc[ans["category"] == c, col].mean() for c in answerable}
        row["mean_q_1_4"] = ans[col].mean()
        rows[col] = row
    table = pd.DataFrame.from_dict(rows, orient="index")
    adv = scored["category"] == (-1 if unanswerable is None else unanswerable)
    gate = {"false_rejection (1-4)": float(ans["gated"].mean()),
            "true_rejection (5)": float(scored.loc[adv, "gated"].mean()) if adv.any()
            else float("nan"),
            "auc_c_ret": roc_auc(torch.tensor(-scored["c_ret"].to_numpy()),
                                 torch.tensor(adv.to_numpy())) if adv.any() else float("nan")}
    return table, gate


def fold_table(records: Sequence[Mapping], describe: Callable[[Mapping], Mapping]
               ) -> pd.DataFrame:
    """One row per fold record (:func:`heldout`): test conversations, train and test recall@10,
    then the columns ``describe(record)`` returns for the candidate it chose."""
    return pd.DataFrame([{"fold": r["fold"], "test": " ".join(r["test"]),
                          "train R@10": r["train_recall@10"], "test R@10": r["test_recall@10"],
                          **describe(r)} for r in records]).set_index("fold")


def write_study(out: Path, report: str, text: Sequence[str], meta: Mapping, chosen_all: Mapping,
                headline_name: str, headline: float) -> None:
    """Write ``folds.json``, ``chosen_on_all.json`` and ``<report>.md`` into ``out``; print the
    report and end with ``headline_name: headline`` (the benchmark-style last line)."""
    (out / "folds.json").write_text(json.dumps(meta, indent=1, default=str))
    (out / "chosen_on_all.json").write_text(json.dumps(chosen_all, indent=1))
    (out / f"{report}.md").write_text("\n".join(text) + "\n")
    print("\n".join(text))
    print(f"{headline_name}: {headline:.4f}")


def fold_schemes(specs: Sequence[str], sample_ids: Sequence[str]
                 ) -> list[tuple[str, list[list[str]]]]:
    """``[(label, folds)]`` of command-line fold schemes: ``"kfold<n>"`` (label itself) or a
    comma-separated list of test conversations (a fixed split, label ``"split"``)."""
    out = []
    for spec in specs:
        scheme: str | list[str] = spec if spec.startswith("kfold") else spec.split(",")
        out.append((spec if isinstance(scheme, str) else "split",
                    make_folds(sample_ids, scheme)))
    return out


@dataclass
class SchemeResult:
    """One fold scheme of a :class:`HeldoutStudy`: the per-question held-out frame, one record
    per fold, the summary table (recall@5/10/30 per category) and the gate figures."""

    label: str
    folds: list[list[str]]
    per_q: pd.DataFrame
    records: list[dict]
    table: pd.DataFrame
    gate: dict[str, float]


class HeldoutStudy:
    """The held-out procedure every tuning study runs (SPEC §1.5): folds over conversations,
    the candidate chosen on the other conversations, read on the fold's own questions.

    A study evaluates its candidates on every question once (a :class:`SweepMatrix`: SYNAPSE's
    batched sweep, the fused retriever's weight search), then :meth:`schemes` reads it under each
    fold scheme and :meth:`chosen_on_all` gives the candidate the same procedure picks on all
    conversations (what a config ships). :meth:`write` writes ``folds.json``,
    ``chosen_on_all.json``, the report and the per-question frames.

    Args:
        questions: every question, in the order of the sweep's columns.
        sample_ids: the conversations, in dataset order (folds are consecutive runs of them).
        specs: fold schemes (:func:`fold_schemes`).
        names: category names.
        target_fr: false rejection the gate's threshold is calibrated for.
        answerable, unanswerable: the dataset's categories (``Dataset.answerable``,
            ``Dataset.unanswerable``; LoCoMo's 1-4 and 5 by default).
    """

    def __init__(self, questions: Sequence[Question], sample_ids: Sequence[str],
                 specs: Sequence[str], names: Mapping[int, str], target_fr: float = 0.025,
                 answerable: Sequence[int] = ANSWERABLE, unanswerable: int | None = ADVERSARIAL
                 ) -> None:
        if not 0.0 <= target_fr < 1.0:
            raise ValueError(f"target false rejection must lie in [0, 1), got {target_fr}")
        self.questions = list(questions)
        self.names = dict(names)
        self.target_fr = float(target_fr)
        self.folds = fold_schemes(specs, sample_ids)
        self.categories = (tuple(answerable), unanswerable)
        self.answerable = torch.tensor([q.category in answerable for q in self.questions])

    def chosen_on_all(self, sweep: SweepMatrix) -> tuple[int, float, float]:
        """``(candidate, tau_gate, in-sample recall@10)`` chosen on every conversation."""
        everything = torch.ones(len(self.questions), dtype=torch.bool)
        best = choose(sweep, everything, self.answerable)
        tau = calibrate_tau(sweep.c_ret[best][self.answerable], self.target_fr)
        return best, tau, float(torch.nanmean(sweep.recall[10][best][self.answerable]))

    def in_sample(self, sweep: SweepMatrix, candidate: int) -> dict[int, float]:
        """Recall@k of one candidate over every answerable question (in-sample)."""
        return {k: float(torch.nanmean(sweep.recall[k][candidate][self.answerable]))
                for k in KS}

    def scheme(self, sweep: SweepMatrix, folds: Sequence[Sequence[str]], label: str = ""
               ) -> SchemeResult:
        """``sweep`` read held out under one fold scheme."""
        per_q, records = heldout(sweep, self.questions, folds, self.names, self.target_fr,
                                 self.categories[0])
        table, gate = summary_table(per_q, self.names, *self.categories)
        return SchemeResult(label, [list(f) for f in folds], per_q, records, table, gate)

    def schemes(self, sweep: SweepMatrix) -> list[SchemeResult]:
        """``sweep`` read held out under every fold scheme of the study."""
        return [self.scheme(sweep, folds, label) for label, folds in self.folds]

    def write(self, out: Path, report: str, text: Sequence[str], meta: Mapping,
              chosen_all: Mapping, results: Sequence[SchemeResult], headline_name: str) -> None:
        """Write each scheme's ``per_question_<label>.parquet`` and the study's files
        (:func:`write_study`); the headline is the first scheme's held-out recall@10 over the
        answerable questions."""
        out.mkdir(parents=True, exist_ok=True)
        for r in results:
            r.per_q.to_parquet(out / f"per_question_{r.label}.parquet")
        write_study(out, report, text, meta, chosen_all, headline_name,
                    float(results[0].table.loc["recall@10", "mean_q_1_4"]))
