"""What a run will cost, before it runs: ``python -m synapse_pt.estimate <the run's overrides>``.

Composes the same config as ``python -m synapse_pt.run``, loads the data and prints, without
calling any model (no LLM, no embedder), how many extraction, answer and judge calls the run makes,
their prompt tokens, the completion tokens their ``max_tokens`` allow, and the price from the
config's ``llm.prices``, for the whole run and per 1,000 questions.

What is exact and what is a bound:

* SYNAPSE's LLM concept extraction (``extractor=llm``): exact. The windows are cut as the graph
  builder cuts them and every request is rendered as the extractor renders it. A garbled reply's
  repair round, at most one more call per window, is a row of its own (``extraction repairs``:
  the request again, the bad reply at ``max_tokens`` and the repair instruction).
* Answers: one call per question, an upper bound (questions the gate rejects cost none). Each
  question's request is rendered exactly as the run renders it (instruction, date instruction,
  category-5 options) around the largest context the memory can retrieve. The memory's declared
  cost model (``cost_model``, :mod:`synapse_pt.memory.declare`) says how large that is: the
  conversation's ``k`` longest turns as context lines (:class:`TurnContext`), every turn
  (:class:`WholeConversation`), or, not a bound but an estimate where the units exist only once
  built, a pack of ``max_words`` words (:class:`WordBudget`, GAAMA) or ``k`` units at the mean
  tokens of a session (:class:`SessionUnits`, Membox's boxes); the basis column says which. A
  memory that declares no cost model is refused with an error naming it.
* Judge: ``eval.judge_runs`` calls per judged question and judge (``eval.judges``: a row each,
  ``judge_<protocol>``; BEAM's rubric judge: per rubric item; the dataset's unanswerable
  category left out but under the rubric judge); GAAMA's judge (its code's prompts) retries an
  unreadable reply up to twice more with its retry prompt (the reply's first 500 characters in
  it): a row of its own (``judge_gaama retries``); the answer is bounded
  by its request's ``max_tokens`` (``eval.max_answer_tokens``, or the answer style's own budget
  under ``eval.answer_budget=style``: :func:`~synapse_pt.eval.qa.pipeline.answer_limits`).
* GAAMA's and Membox's LLM builds (:class:`ModelDependentBuild`): their requests' number and
  prompts depend on the model's replies (the facts GAAMA's reflections group and shows again, the
  boxes Membox's Topic Loom closes, the traces it verifies); they are not bounded: the row says
  so, and the total is said to leave them out ("not bounded: ...").
* The backend's re-asks: a reply the run cannot use (an empty completion) is asked again, up to
  ``llm.backend.max_retries`` times, and each is billed; the line under the table gives the
  figure if every reply came back empty. ``llm.max_cost_usd`` holds the spending whatever
  happens (:mod:`synapse_pt.models.llm.budget`).

Tokens are counted with the bundled MiniLM WordPiece tokenizer (``eval.context_tokenizer``;
offline), plus :data:`~synapse_pt.models.llm.base.MESSAGE_OVERHEAD_TOKENS` per message. A
provider counts with its own tokenizer and chat template (SmolLM2 served by ``transformers
serve`` counted 14,367 prompt tokens for the sample's 14 answer requests with ``memory=bm25``,
where this counter gives 11,484: 25 % more; ``tests/test_real_server.py``), so the dollars price
every prompt at :data:`TOKENIZER_MARGIN` more tokens than counted: "at most" holds while the
provider counts no more than that; :data:`TOKENIZER_NOTE` says so under every estimate.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import hydra
import pandas as pd
from omegaconf import DictConfig, OmegaConf

from synapse_pt import steps
from synapse_pt.commands.hydra_app import drop_unused_folder
from synapse_pt.common.resources import config_dir
from synapse_pt.data.render import TurnRenderer
from synapse_pt.data.resolve import dataset_categories
from synapse_pt.data.schema import Conversation, Dataset
from synapse_pt.eval.qa.pipeline import (
    EvalSettings,
    answer_limits,
    answer_request,
    for_memory,
    judge_column,
    judge_protocols,
    judge_skip_categories,
)
from synapse_pt.eval.qa.prompts import format_item
from synapse_pt.eval.qa.scorers.judge import build_judge_requests, judge_inputs
from synapse_pt.eval.qa.tokens import HFTokenCounter
from synapse_pt.graph.consolidation import windows_of
from synapse_pt.graph.extraction import LLMConceptExtractor
from synapse_pt.memory.base import memory_class
from synapse_pt.memory.declare import (
    CostModel,
    ModelDependentBuild,
    SessionUnits,
    TurnContext,
    WholeConversation,
    WindowExtraction,
    WordBudget,
)
from synapse_pt.models.llm.accounting import price_for, price_table
from synapse_pt.models.llm.base import MESSAGE_OVERHEAD_TOKENS, ChatRequest
from synapse_pt.models.structured import DEFAULT_REPAIR_INSTRUCTION
from synapse_pt.retrieval.items import EPISODIC, RetrievedItem

#: the parse error a repair instruction quotes, at its longest (an excerpt of 200 characters of
#: the reply and the parser's words): counted in its place
REPAIR_ERROR_BOUND = "StructuredOutputError: no JSON object or list in reply: " + "x " * 120

#: the share of prompt tokens a provider's tokenizer and chat template may count beyond MiniLM's
#: (SmolLM2's server counted 25 % more on the sample): the dollars price every prompt with it
TOKENIZER_MARGIN = 0.5

#: printed under every estimate: what the token counts are, and the margin the dollars include
TOKENIZER_NOTE = (f"dollars price each prompt at {TOKENIZER_MARGIN:.0%} more tokens than counted "
                  "here, the margin for a provider's own tokenizer and chat template (SmolLM2's "
                  "server counted 25 % more on the sample; see synapse_pt/commands/estimate.py): "
                  "\"at most\" holds while the provider counts within it; llm.max_cost_usd holds "
                  "the spending whatever it counts")

#: a row's kind: a bound, an estimate (GAAMA's and Membox's answer contexts), or not bounded
BOUND, ESTIMATE, UNBOUNDED = "at most", "estimate", "not bounded"

__all__ = ["answer_prompt_bounds", "estimate", "format_estimate"]



def _prompt_tokens(requests: Sequence[ChatRequest], counter: HFTokenCounter) -> int:
    contents = [c for r in requests for _, c in r.messages]
    return sum(counter.count_many(contents)) + MESSAGE_OVERHEAD_TOKENS * len(contents)


def _row(stage: str, calls: int, prompt: int, completion: int, basis: str,
         bound: str = BOUND) -> dict[str, Any]:
    return {"stage": stage, "calls": calls, "prompt_tokens": prompt,
            "completion_tokens_max": completion, "bound": bound, "basis": basis}


def cost_model(cfg: DictConfig) -> CostModel:
    """The cost model the memory of ``cfg`` declares (an error naming it where it declares
    none: :meth:`~synapse_pt.memory.base.MemorySystem.declared_cost_model`)."""
    return memory_class(cfg).declared_cost_model()


def _setting(cfg: DictConfig, key: str) -> Any:
    """The memory config's value at the dotted ``key`` a cost model names; an error naming
    ``memory.<key>`` where the config has none."""
    value = OmegaConf.select(cfg.memory, key, default=None)
    if value is None:
        raise ValueError(f"memory.{key}: the cost model of {memory_class(cfg).__name__} reads it, "
                         "but the memory config has no value there")
    return value


def _extraction_rows(cfg: DictConfig, dataset: Dataset, counter: HFTokenCounter
                     ) -> list[dict[str, Any]]:
    if bool(cfg.extractor.get("llm_free", True)):
        return [_row("extraction", 0, 0, 0, "LLM-free extractor: no calls")]
    rule = cost_model(cfg).extraction
    name = memory_class(cfg).__name__
    if rule is None:
        return [_row("extraction", 0, 0, 0, f"{name} uses no extractor: no calls")]
    if isinstance(rule, ModelDependentBuild):
        return [_row("extraction", 0, 0, 0, f"{name}'s LLM build: not bounded (the number and "
                     "prompts of its requests depend on the model's replies)", UNBOUNDED)]
    if not isinstance(rule, WindowExtraction):
        raise TypeError(f"{name}.cost_model.extraction: no estimate for {rule!r}")
    extractor = LLMConceptExtractor(llm=None, max_concepts=int(cfg.extractor.max_concepts),  # type: ignore[arg-type]
                                    max_tokens=int(cfg.extractor.max_tokens))
    size = int(_setting(cfg, rule.window))
    requests = [extractor.request(w) for conv in dataset
                for w in windows_of(list(conv.turns()), size)]
    # a repair: the request, the bad reply (at most max_tokens) and the instruction with its error
    instruction = DEFAULT_REPAIR_INSTRUCTION.replace("{error}", REPAIR_ERROR_BOUND)
    repair = (counter.count_many([instruction])[0] + 2 * MESSAGE_OVERHEAD_TOKENS)
    completion = sum(r.max_tokens for r in requests)
    prompt = _prompt_tokens(requests, counter)
    return [_row("extraction", len(requests), prompt, completion,
                 f"exact: one request per window of {size} turns"),
            _row("extraction repairs", len(requests), prompt + completion + repair * len(requests),
                 completion, "at most one repair per window: its request, the bad reply at "
                 "max_tokens and the repair instruction")]


#: tokens per English word for estimating GAAMA's word-trimmed pack: a rule of thumb of ours
#: (GAAMA's code counts words, one token each, when it chunks; it never converts)
TOKENS_PER_WORD = 4 / 3


def _turn_items(conv: Conversation, renderer: TurnRenderer) -> list[RetrievedItem]:
    """Every turn of ``conv`` as the memories hand it to the answer prompt."""
    return [RetrievedItem(t.dia_id, renderer(t), EPISODIC, 0.0, t.timestamp, t.speaker,
                          dated=renderer.dated) for t in conv.turns()]


def _longest(items: list[RetrievedItem], k: int, counter: HFTokenCounter) -> list[RetrievedItem]:
    """The ``k`` items whose context lines (:func:`~synapse_pt.eval.qa.prompts.format_item`) have
    the most tokens: the largest context any ``k`` of them can make."""
    tokens = counter.count_many([format_item(it) for it in items])
    order = sorted(range(len(items)), key=lambda i: -tokens[i])
    return [items[i] for i in order[:k]]


def _context_items(cfg: DictConfig, dataset: Dataset, counter: HFTokenCounter
                   ) -> tuple[dict[str, list[RetrievedItem]] | None, str]:
    """Per conversation, the items of the largest answer context the memory can retrieve, and
    how it was chosen (its declared context rule); ``None`` where its units are not turns
    (:class:`WordBudget`, :class:`SessionUnits`: estimated by :func:`_unit_estimate`)."""
    rule = cost_model(cfg).context
    renderer = TurnRenderer(str(cfg.turn_template))
    if isinstance(rule, WholeConversation):
        return {c.sample_id: _turn_items(c, renderer) for c in dataset}, "the whole conversation"
    if not isinstance(rule, TurnContext):
        return None, ""
    k = int(_setting(cfg, rule.k))
    items = {c.sample_id: _longest(_turn_items(c, renderer), k, counter) for c in dataset}
    basis = f"the k={k} longest turns of the conversation"
    if rule.note:
        basis += f" ({rule.note})"
    return items, basis


def _unit_estimate(cfg: DictConfig, conv: Conversation, counter: HFTokenCounter) -> int:
    """The context tokens of a memory whose units exist only once built, estimated by its
    declared rule: a pack of ``words`` words, or ``k`` units at a session's mean tokens."""
    rule = cost_model(cfg).context
    if isinstance(rule, WordBudget):
        return math.ceil(int(_setting(cfg, rule.words)) * TOKENS_PER_WORD)
    if not isinstance(rule, SessionUnits):
        raise TypeError(f"{memory_class(cfg).__name__}.cost_model.context: no estimate for "
                        f"{rule!r}")
    tokens = counter.count_many(TurnRenderer(str(cfg.turn_template)).render(conv.turns()))
    per_session = sum(tokens) / max(1, len(conv.sessions))
    return math.ceil(int(_setting(cfg, rule.k)) * per_session)


def _eval_settings(cfg: DictConfig, dataset: Dataset | None = None) -> EvalSettings:
    """The ``eval`` group as the run reads it (``system`` steps resolved for the memory and the
    benchmark)."""
    resolved = OmegaConf.to_container(cfg.eval, resolve=True)
    return for_memory(EvalSettings(**{k: v for k, v in resolved.items()
                                      if k in EvalSettings.__dataclass_fields__}),
                      memory_class(cfg), dataset)


def answer_prompt_bounds(cfg: DictConfig, dataset: Dataset, counter: HFTokenCounter,
                         ev: EvalSettings) -> tuple[dict[str, int], str]:
    """``{question key: prompt tokens}`` of each question's answer request, and the basis.

    For the turn memories (and full context) a bound: the request is rendered exactly as the run
    renders it (:func:`~synapse_pt.eval.qa.pipeline.answer_request`: instruction, date instruction,
    category-5 options) around the largest context the memory can retrieve, its ``k`` longest
    turns. For a memory whose units exist only once built (GAAMA, Membox) an estimate, not a
    bound: the instruction exact, the context at its declared rule (a ``max_words`` pack at
    :data:`TOKENS_PER_WORD`, ours, or ``k`` units at a session's mean tokens)."""
    items, basis = _context_items(cfg, dataset, counter)
    speakers = {c.sample_id: f"{c.speaker_a} and {c.speaker_b}" for c in dataset}
    extra = {} if items is not None else {c.sample_id: _unit_estimate(cfg, c, counter)
                                          for c in dataset}
    out: dict[str, int] = {}
    for q in dataset.questions():
        context = items[q.sample_id] if items is not None else []
        request = answer_request(q, context, speakers[q.sample_id], ev)
        out[q.key] = _prompt_tokens([request], counter) + extra.get(q.sample_id, 0)
    if items is None:
        rule = cost_model(cfg).context
        return out, f"estimate, not a bound: context {rule.label} at mean tokens"  # type: ignore[union-attr]
    return out, f"upper bound: every question (the gate skips some); context {basis}"


def _answer_rows(cfg: DictConfig, dataset: Dataset, counter: HFTokenCounter
                 ) -> list[dict[str, Any]]:
    ev = _eval_settings(cfg, dataset)
    if ev.mode != "qa":
        return [_row("answers", 0, 0, 0, "eval.mode=retrieval: no answers")]
    bounds, basis = answer_prompt_bounds(cfg, dataset, counter, ev)
    questions = list(dataset.questions())
    rows = [_row("answers", len(questions), sum(bounds.values()),
                 len(questions) * answer_limits(ev)[0], basis,
                 BOUND if basis.startswith("upper bound") else ESTIMATE)]
    runs = int(ev.judge_runs)
    for protocol in judge_protocols(ev):  # eval.judges: a row per judge, judge_<protocol>
        skip = judge_skip_categories(dataset.unanswerable, protocol)
        judged = [q for q in questions if q.category not in skip]
        bound = " ".join(["answer"] * answer_limits(ev)[0])
        evidence, names = judge_inputs(dataset, judged, dataset_categories(cfg.dataset))
        inputs = steps.JudgeInputs([q.question for q in judged], [q.answer for q in judged],
                                   [bound] * len(judged),
                                   rubrics=([q.rubric for q in judged]
                                            if steps.judge(protocol).rubric else None),
                                   evidence=evidence, category_names=names)
        call = steps.JudgeCall(max_tokens=int(ev.judge_max_tokens), prompts=ev.prompts,
                               upstream_path=ev.upstream_path)
        judge = build_judge_requests(inputs, call, protocol=protocol)
        per = "one call per " + ("rubric item" if steps.judge(protocol).rubric else "question")
        left = f", category {skip[0]} left out" if skip else ""
        rows.append(_row(judge_column(ev, protocol), runs * len(judge),
                         runs * _prompt_tokens(judge, counter),
                         runs * sum(r.max_tokens for r in judge),
                         f"{runs} run{'s' if runs != 1 else ''} of the {protocol} judge, "
                         f"{per}{left}"))
        if protocol == "gaama" and ev.prompts == "upstream":  # its code's retries
            rows.append(_gaama_judge_retries(judge_column(ev, protocol), runs * len(judge),
                                             ev, counter))
    return rows


def _gaama_judge_retries(column: str, calls: int, ev: EvalSettings,
                         counter: HFTokenCounter) -> dict[str, Any]:
    """GAAMA's judge re-asks an unreadable reply up to twice with its retry prompt, which quotes
    the parse error and the reply's first 500 characters (at most ``GAAMA_JUDGE_MAX_TOKENS``
    tokens of it)."""
    from synapse_pt.data.upstream import fstring
    from synapse_pt.memory.gaama.judge import (
        GAAMA_JUDGE_ATTEMPTS,
        GAAMA_JUDGE_FILE,
        GAAMA_JUDGE_FUNCTION,
        GAAMA_JUDGE_MAX_TOKENS,
    )

    retry = fstring(GAAMA_JUDGE_FILE, GAAMA_JUDGE_FUNCTION, "retry_prompt", ev.upstream_path)
    text = retry.render(last_error="Expecting value: line 1 column 1 (char 0)", last_raw="")
    raw = min(500, GAAMA_JUDGE_MAX_TOKENS)  # 500 characters: at most that many tokens
    per = counter.count_many([text])[0] + MESSAGE_OVERHEAD_TOKENS + raw
    n = (GAAMA_JUDGE_ATTEMPTS - 1) * calls
    return _row(f"{column} retries", n, n * per, n * GAAMA_JUDGE_MAX_TOKENS,
                f"at most {GAAMA_JUDGE_ATTEMPTS - 1} retries of each call (its code's retry "
                "prompt, the reply's first 500 characters in it)")


def estimate(cfg: DictConfig) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The calls, tokens and price of the run ``cfg`` describes, per stage (rows) and in total.

    Returns:
        The per-stage frame (``calls``, ``prompt_tokens``, ``completion_tokens_max``, ``usd_max``,
        ``basis``) with a ``total`` row, and the facts behind it (questions, model, price,
        tokenizer, cost per 1,000 questions).
    """
    from synapse_pt.data.resolve import build_dataset  # the run's own loader

    dataset = build_dataset(cfg.dataset, smoke=bool(cfg.smoke))
    counter = HFTokenCounter(cfg.eval.get("context_tokenizer"))
    rows = _extraction_rows(cfg, dataset, counter) + _answer_rows(cfg, dataset, counter)
    frame = pd.DataFrame(rows).set_index("stage")
    model = str(cfg.llm.backend.get("model", cfg.llm.name)) if "backend" in cfg.llm else "none"
    price = price_for(model, price_table(cfg.llm.get("prices") or {}))
    if price is None:
        frame["usd_max"] = float("nan")
    else:
        frame["usd_max"] = [price.cost(math.ceil(p * (1 + TOKENIZER_MARGIN)), c) for p, c in
                            zip(frame["prompt_tokens"], frame["completion_tokens_max"],
                                strict=True)]
    total = frame[["calls", "prompt_tokens", "completion_tokens_max", "usd_max"]].sum(
        min_count=1)
    total_row = pd.DataFrame([{**total.to_dict(), "bound": total_bound(frame), "basis": ""}],
                             index=["total"])
    frame = pd.concat([frame, total_row[frame.columns]])
    frame.index.name = "stage"
    n = dataset.num_questions
    retries = int(cfg.llm.backend.get("max_retries", 0) or 0) if "backend" in cfg.llm else 0
    facts = {"dataset": dataset.name, "conversations": len(dataset), "questions": n,
             "model": model, "tokenizer": counter.name, "bound": total_bound(frame),
             "not_bounded": [f"{stage} ({basis})" for stage, basis, kind in
                             zip(frame.index, frame["basis"], frame["bound"], strict=True)
                             if kind != BOUND and stage != "total"],
             "max_retries": retries,
             "price_per_1m": None if price is None else {
                 "prompt": price.prompt_per_1m, "completion": price.completion_per_1m},
             "usd_max": None if price is None else float(total["usd_max"]),
             "usd_max_per_1000_questions": (None if price is None or n == 0
                                            else 1000 * float(total["usd_max"]) / n)}
    return frame, facts


def total_bound(frame: pd.DataFrame) -> str:
    """What the total is: :data:`BOUND` when every stage is bounded, else :data:`UNBOUNDED`
    (a stage not bounded) or :data:`ESTIMATE`."""
    kinds = set(frame["bound"].drop(index="total", errors="ignore"))
    return UNBOUNDED if UNBOUNDED in kinds else ESTIMATE if ESTIMATE in kinds else BOUND


def usd_line(usd: float, facts: Mapping[str, Any], what: str) -> str:
    """The total's dollars, said as what they are: "at most" only when every stage is
    bounded; otherwise the stages that are not are named."""
    if facts["bound"] == BOUND:
        return f"at most ${usd:,.4f} {what}"
    left = "; ".join(facts["not_bounded"])
    if facts["bound"] == UNBOUNDED:
        return (f"at most ${usd:,.4f} {what} for the stages it bounds; more is spent, by "
                f"at least what the stages not bounded cost: {left}")
    return f"about ${usd:,.4f} {what}, not a bound: {left}"


def retries_line(usd: float, retries: int) -> str:
    """What the backend's re-asks of empty replies could add (each is billed)."""
    return (f"each request may be re-asked up to llm.backend.max_retries={retries} times when "
            f"the server's reply is empty (each billed): ${usd * (retries + 1):,.4f} if every "
            "reply came back empty")


def format_estimate(frame: pd.DataFrame, facts: Mapping[str, Any]) -> str:
    """The estimate as console text: the stage table, then the totals and what they rest on."""
    shown = frame.copy()
    for col in ("calls", "prompt_tokens", "completion_tokens_max"):
        shown[col] = shown[col].map(lambda v: f"{int(v):,}")
    shown["usd_max"] = shown["usd_max"].map(lambda v: "n/a" if pd.isna(v) else f"{v:,.4f}")
    lines = [f"# Estimate: {facts['dataset']} ({facts['conversations']} conversations, "
             f"{facts['questions']:,} questions), model {facts['model']}", "",
             shown.to_markdown(), ""]
    if facts["usd_max"] is None:
        lines.append(f"no price for {facts['model']!r} in llm.prices: tokens only")
    else:
        p = facts["price_per_1m"]
        lines.append(usd_line(facts["usd_max"], facts, "for the run") + ", "
                     f"${facts['usd_max_per_1000_questions']:,.4f} per 1,000 questions "
                     f"(USD {p['prompt']:g} / {p['completion']:g} per 1M prompt / completion "
                     "tokens, completions at their max_tokens)")
        if facts["max_retries"]:
            lines.append(retries_line(facts["usd_max"], facts["max_retries"]))
    lines.append(f"tokens counted with {facts['tokenizer']} (offline); no model was called")
    lines.append(TOKENIZER_NOTE)
    return "\n".join(lines) + "\n"


@hydra.main(version_base="1.3", config_path=str(config_dir()), config_name="run")
def main(cfg: DictConfig) -> None:
    """CLI: print the estimate of the run the same overrides would make (the stamped run folder
    Hydra was given is removed: an estimate writes nothing)."""
    import sys

    from synapse_pt.common.errors import ConfigError
    from synapse_pt.data import DataFormatError, DatasetNotFoundError

    drop_unused_folder(cfg.paths.output_dir)
    if "backend" not in cfg.llm or str(cfg.llm.backend.get("_target_", "")).endswith(".NoLLM"):
        print(f"[estimate] llm={cfg.llm.get('name', 'none')}: this run sends no request to a "
              "model, $0 (price one that does with its overrides, e.g. llm=openai eval=qa)")
        return
    try:
        frame, facts = estimate(cfg)
    except (ConfigError, DataFormatError, DatasetNotFoundError) as err:
        print(f"[estimate] error: {err}", file=sys.stderr)
        sys.exit(1)
    print(format_estimate(frame, facts), end="")
    print(f"estimate_usd_max: {facts['usd_max'] if facts['usd_max'] is not None else 'n/a'} USD"
          f" ({facts['bound']})")

