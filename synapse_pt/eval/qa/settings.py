"""The ``eval`` settings of a run (:class:`EvalSettings`) and what they choose: the memory's own
answer step and judge (:func:`for_memory`), the judges and their columns, the answer step's
budget, empty-pack rule and upstream files (:mod:`synapse_pt.steps`)."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field

from synapse_pt import steps
from synapse_pt.common.errors import ConfigError
from synapse_pt.data.schema import Dataset
from synapse_pt.eval.qa.prompts import PROMPT_SOURCES
from synapse_pt.eval.qa.scorers.judge import JUDGE_PROTOCOLS
from synapse_pt.memory.base import MemorySystem

log = logging.getLogger(__name__)

#: ``answer_style`` / ``judge_protocol`` value that means "the memory's own"
SYSTEM = "system"


@dataclass
class EvalSettings:
    """How a run is evaluated (the ``eval`` config group).

    Attributes:
        mode: ``"retrieval"`` (no answer model, retrieval-level metrics only) or ``"qa"``.
        recall_ks: cut-offs of evidence recall@k (k retrieved units).
        recall_budgets: context-token budgets of evidence recall within the first T tokens
            (``recall@<T>tok``; units counted whole, :func:`~synapse_pt.eval.qa.scorers.retrieval.
            unit_recall`), the fair comparison of systems whose units differ in size.
        strict_evidence: add the strict-evidence instruction to the answer prompt (SPEC §1.2.7).
        answer_style: the answer step: ``"system"`` (the default: the memory's own,
            ``MemorySystem.own_steps``), ``"shared"`` (every system on equal terms) or any
            registered step by name (:mod:`synapse_pt.steps`: a related system's, its
            code's prompt read from the upstream files; under ``prompts=ours`` our wording).
        prompts: where the related systems' prompts come from (:data:`~synapse_pt.eval.
            prompts.PROMPT_SOURCES`): ``"upstream"`` (their code's files, sha256-checked,
            :mod:`synapse_pt.data.upstream`) or ``"ours"`` (our wordings).
        upstream_path: the folder of the upstream files (``null``: ``$SYNAPSE_UPSTREAM``, else
            ``../shared/data/upstream`` beside the checkout, else the cache or a download).
        category_date_instruction: the LoCoMo/A-Mem date instruction for temporal questions; the
            one place the pipeline reads a category before scoring. Off in the strict setting.
        category5_options: the official generation's category-5 prompt (choose between the
            distractor and "Not mentioned in the conversation"); reads the category and the
            distractor, so off in the strict setting.
        max_answer_tokens: generation budget of an answer.
        answer_budget: ``"style"``: an answer step with a budget of its own
            (:attr:`~synapse_pt.steps.AnswerStep.budget`) uses it; ``"config"``: always
            ``max_answer_tokens`` / ``answer_stop``. An empty pack under a step whose code asks
            no model about one (:attr:`~synapse_pt.steps.AnswerStep.empty_pack`) gets the
            answer that code records.
        answer_stop: stop sequences of an answer (answers are short phrases; small models keep
            writing new "Question:" lines otherwise).
        answer_batch_size: answer requests per ``llm.generate`` call.
        retrieval_batch_size: questions per ``memory.retrieve`` call (0: all at once).
        seed: seed of the answer requests (judge runs use ``seed + r``).
        judge_runs: LLM-judge runs (0: no judge); only in ``qa`` mode.
        judge_max_tokens: generation budget of a judge reply (it explains, then labels).
        judge_protocol: ``"system"`` (the default: the memory's own judge,
            ``MemorySystem.own_steps``), ``"mem0"`` (CORRECT/WRONG), ``"realtalk"`` (REALTALK's
            correctness score in [0, 1]), ``"beam_rubric"`` (BEAM: the share of the question's
            rubric items satisfied) or a related system's own (:mod:`synapse_pt.steps`).
            An unreadable reply is counted; it scores 0 where the protocol's code does so.
        judges: several judges over the same answers (judge sensitivity): each protocol of
            :data:`~synapse_pt.eval.qa.scorers.judge.JUDGE_PROTOCOLS` listed scores every answer
            ``judge_runs`` times, into columns ``judge_<protocol>`` (:func:`judge_column`) and
            metrics of the same names; empty (the default): the one judge of
            ``judge_protocol``, in the column ``judge``. Needs ``judge_runs >= 1`` in ``qa``.
        peer_ks: cut-offs of the retrieval rules peers publish
            (:mod:`~synapse_pt.eval.qa.scorers.peer_rules`).
    """

    mode: str = "retrieval"  # "retrieval" | "qa"
    recall_ks: tuple[int, ...] = (5, 10, 30)
    recall_budgets: tuple[int, ...] = (500, 1000, 2000)
    strict_evidence: bool = True
    answer_style: str = "system"  # system | shared | a registered step (synapse_pt/steps/)
    prompts: str = "upstream"  # upstream (the related systems' files) | ours
    upstream_path: str | None = None
    category_date_instruction: bool = False  # a label-reading exception; off when strict
    category5_options: bool = False  # the other one (official cat-5 two-option prompt)
    max_answer_tokens: int = 32
    answer_stop: tuple[str, ...] = ("\n",)
    answer_budget: str = "style"  # style: a style's own budget where it has one | config
    answer_batch_size: int = 64
    retrieval_batch_size: int = 0  # 0: all questions in one batched call
    seed: int = 0
    judge_runs: int = 0  # LLM-judge runs (0: no judge)
    judge_protocol: str = "system"  # system | mem0 | realtalk | beam_rubric | a system's own
    judge_max_tokens: int = 128
    judges: tuple[str, ...] = ()  # several judges of the same answers; (): judge_protocol's
    peer_ks: tuple[int, ...] = (1, 5, 10)
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.mode not in ("retrieval", "qa"):
            raise ConfigError(f"eval.mode must be 'retrieval' or 'qa', got {self.mode!r}")
        self.recall_ks = tuple(int(k) for k in self.recall_ks)
        self.peer_ks = tuple(int(k) for k in self.peer_ks)
        if not self.peer_ks or min(self.peer_ks) < 1:
            raise ConfigError(f"eval.peer_ks must be integers >= 1, got {list(self.peer_ks)}")
        self.recall_budgets = tuple(int(t) for t in self.recall_budgets)
        if any(t < 1 for t in self.recall_budgets):
            raise ConfigError(f"eval.recall_budgets must be integers >= 1, got "
                              f"{list(self.recall_budgets)}")
        for name in ("max_answer_tokens", "answer_batch_size", "retrieval_batch_size", "seed",
                     "judge_runs", "judge_max_tokens"):
            value = getattr(self, name)
            if isinstance(value, str) and value.startswith("${"):
                # an eval config converted without resolve=True keeps "${seed}" as a string
                msg = (f"eval.{name} is the unresolved interpolation {value!r}; build "
                       "EvalSettings from OmegaConf.to_container(cfg.eval, resolve=True)")
                if self.mode == "qa":
                    raise ValueError(msg)
                log.warning("%s (unused in retrieval mode)", msg)
                continue
            setattr(self, name, int(value))
        if self.judge_runs < 0:
            raise ConfigError(f"eval.judge_runs must be >= 0, got {self.judge_runs}")
        self.judges = tuple(str(j) for j in (self.judges or ()))
        unknown = [j for j in self.judges if j not in JUDGE_PROTOCOLS]
        if unknown:
            raise ConfigError(f"eval.judges: {unknown} not judges; each must be one of "
                              f"{list(JUDGE_PROTOCOLS)} (system is one judge per memory: not "
                              "comparable across systems)")
        if len(set(self.judges)) != len(self.judges):
            raise ConfigError(f"eval.judges lists a judge twice: {list(self.judges)}")
        if self.judges and self.mode == "qa" and self.judge_runs == 0:
            raise ConfigError(f"eval.judges={list(self.judges)} needs eval.judge_runs >= 1 "
                              "(eval=judge sets 1)")
        styles = [SYSTEM, *steps.ANSWER_STEPS]
        if self.answer_style not in styles:
            raise ConfigError(f"eval.answer_style must be one of {styles}, got "
                              f"{self.answer_style!r}")
        if self.judge_protocol not in (SYSTEM, *JUDGE_PROTOCOLS):
            raise ConfigError(f"eval.judge_protocol must be one of {[SYSTEM, *JUDGE_PROTOCOLS]}, "
                              f"got {self.judge_protocol!r}")
        if self.prompts not in PROMPT_SOURCES:
            raise ConfigError(f"eval.prompts must be one of {list(PROMPT_SOURCES)}, got "
                              f"{self.prompts!r}")
        if self.answer_budget not in ("style", "config"):
            raise ConfigError(f"eval.answer_budget must be 'style' or 'config', got "
                              f"{self.answer_budget!r}")
        if not self.recall_ks or min(self.recall_ks) < 1:
            raise ConfigError(f"eval.recall_ks must be integers >= 1, got {list(self.recall_ks)}")
        for name in ("max_answer_tokens", "answer_batch_size", "judge_max_tokens"):
            if isinstance(getattr(self, name), int) and getattr(self, name) < 1:
                raise ConfigError(f"eval.{name} must be >= 1, got {getattr(self, name)}")
        if isinstance(self.retrieval_batch_size, int) and self.retrieval_batch_size < 0:
            raise ConfigError(f"eval.retrieval_batch_size must be >= 0 (0: all questions at "
                              f"once), got {self.retrieval_batch_size}")


def judge_protocols(settings: EvalSettings) -> list[str]:
    """The judges a run asks: ``eval.judges`` where given, else ``judge_protocol`` when
    ``judge_runs > 0`` (``system`` resolved for the memory by :func:`for_memory` first), else
    none."""
    if settings.judge_runs == 0:
        return []
    return list(settings.judges) if settings.judges else [settings.judge_protocol]


def judge_column(settings: EvalSettings, protocol: str) -> str:
    """The per-question score column of ``protocol``'s judge: ``judge`` in a run with one judge
    (``judge_protocol``), ``judge_<protocol>`` under ``eval.judges``; its spread is
    ``<column>_std`` and its unreadable replies ``n_<column>_failures``."""
    return f"judge_{protocol}" if settings.judges else "judge"


def for_memory(settings: EvalSettings, memory: MemorySystem | type[MemorySystem],
               dataset: Dataset | None = None) -> EvalSettings:
    """``settings`` with ``"system"`` answer style and judge protocol replaced by the ones the
    memory declares as its own code's (:attr:`~synapse_pt.memory.base.MemorySystem.own_steps`;
    ``memory`` an instance or its class); a ``"system"`` judge is the benchmark's own where
    ``dataset`` declares one (:attr:`~synapse_pt.data.schema.Dataset.judge`: LoCoMo-Plus's
    authors', the judge of items without a reference answer); others unchanged."""
    style, protocol = memory.own_steps
    if dataset is not None and dataset.judge:
        protocol = dataset.judge
    return dataclasses.replace(
        settings,
        answer_style=style if settings.answer_style == SYSTEM else settings.answer_style,
        judge_protocol=protocol if settings.judge_protocol == SYSTEM else settings.judge_protocol)


def _step(settings: EvalSettings) -> steps.AnswerStep:
    """The run's answer step (``system`` not yet resolved by :func:`for_memory`: the shared)."""
    return steps.answer_step("shared" if settings.answer_style == SYSTEM
                             else settings.answer_style)


def upstream_files(settings: EvalSettings) -> list[str]:
    """The upstream files (``<system>/<path>``) whose prompts the run's answers and judge read,
    the empty-pack reply of :func:`empty_pack_reply` included (empty under ``prompts=ours``, or
    when neither step is a related system's)."""
    if settings.prompts != "upstream" or settings.mode != "qa":
        return []
    step = _step(settings)
    files = list(step.upstream_files) if step.upstream(settings.prompts) else []
    if skips_empty_pack(settings):
        files.append(step.empty_pack[0])  # type: ignore[index]
    for protocol in judge_protocols(settings):
        if protocol in steps.JUDGES:  # "system" before for_memory: none of its own
            files += steps.JUDGES[protocol].upstream_files(settings.prompts)
    return list(dict.fromkeys(files))


def require_upstream(settings: EvalSettings) -> None:
    """Find and check every upstream file the run's answers and judge will read (raises
    :class:`~synapse_pt.data.upstream.UpstreamNotFoundError` naming where to put a missing one),
    and every data file a judge's templates are read from (:func:`template_files`), so that a
    run stops before it builds its memory, not after."""
    from synapse_pt.data.upstream import resolve_upstream_file

    for rel in upstream_files(settings):
        resolve_upstream_file(rel, settings.upstream_path)
    template_files(settings)


def template_files(settings: EvalSettings) -> dict[str, str]:
    """``{file: sha256}`` of the data files the run's judges read their templates from
    (:meth:`~synapse_pt.steps.Judge.template_files`; found and checked here), in qa mode."""
    if settings.mode != "qa":
        return {}
    out: dict[str, str] = {}
    for protocol in judge_protocols(settings):
        if protocol in steps.JUDGES:
            out.update(steps.JUDGES[protocol].template_files(settings.prompts))
    return out


def skips_empty_pack(settings: EvalSettings) -> bool:
    """Whether a question with an empty retrieved pack gets no answer request: the answer step's
    code sends none (:attr:`~synapse_pt.steps.AnswerStep.empty_pack`; only its code's
    step, ``prompts=upstream``)."""
    step = _step(settings)
    return step.upstream(settings.prompts) and step.empty_pack is not None


def empty_pack_reply(settings: EvalSettings) -> str:
    """The answer recorded for an empty pack under :func:`skips_empty_pack`, read from the
    answer step's code."""
    from synapse_pt.data.upstream import fstring

    rel, function, variable = _step(settings).empty_pack  # type: ignore[misc]
    return fstring(rel, function, variable, settings.upstream_path).render()


def is_strict(settings: EvalSettings) -> bool:
    """The strict setting: no prompt reads a category or gold data (SPEC §3)."""
    return not (settings.category_date_instruction or settings.category5_options)


def answer_limits(settings: EvalSettings) -> tuple[int, tuple[str, ...]]:
    """``(max tokens, stop sequences)`` of an answer request under ``settings``: the answer
    step's own budget where it has one and ``answer_budget`` is ``"style"`` (under
    ``prompts=upstream`` a related system's step brings its code's budget, else our wording's:
    :meth:`~synapse_pt.steps.AnswerStep.own_budget`), else the configured
    ``max_answer_tokens`` / ``answer_stop``."""
    own = _step(settings).own_budget(settings.prompts)
    if own is not None and settings.answer_budget == "style":
        return own
    return int(settings.max_answer_tokens), tuple(settings.answer_stop)
