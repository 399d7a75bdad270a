"""Membox's settings in two frozen groups, as GAAMA's (:mod:`synapse_pt.memory.gaama.settings`):
retrieval (:class:`Retrieval`) and build (:class:`Build`). The config keeps them flat
(``memory.k``, ``memory.boundary_threshold``): each key is a field of one group. Values are the
code's (``membox.py``) unless marked ours."""

from __future__ import annotations

from dataclasses import dataclass

from synapse_pt.common.declared import check_fields, setting

from .llm_build import BUDGET_PARAMS, PARSES, PROMPT_SOURCES, VERIFY_PARSES

MODES = ("compact", "trace")


@dataclass(frozen=True)
class Retrieval:
    """Boxes per question and what is shown of them: each field a declared setting
    ``memory.<name>`` (:mod:`synapse_pt.common.declared`; the table: docs/settings.md)."""

    mode: str = setting(
        "", "trace", "trace: boxes and the first trace of each (the code's default) | compact "
                     "(boxes only)",
        choices=MODES)
    k: int = setting(
        "", 5, "boxes per question (code)", low=1)

    def __post_init__(self) -> None:
        check_fields(self)


@dataclass(frozen=True)
class Build:
    """The LLM-free build (``boundary_threshold`` to ``min_event_words``) and the LLM build's
    requests (the rest): each field a declared setting ``memory.<name>``
    (:mod:`synapse_pt.common.declared`; the table: docs/settings.md)."""

    boundary_threshold: float = setting(
        "", 0.4, "LLM-free Topic Loom: cut where a turn's cosine to the two before it drops "
                 "below this (ours; the code asks an LLM)")
    trace_threshold: float = setting(
        "", 0.5, "Trace Weaver: an event joins a trace when its best cosine to it is >= this "
                 "(code)")
    min_keywords: int = setting(
        "", 3, "keywords per box at least, LLM-free build (the code's prompt: 3-8)", low=1)
    max_keywords: int = setting(
        "", 8, "keywords per box at most, LLM-free build (the code's prompt: 3-8)", low=1)
    min_event_words: int = setting(
        "", 4, "a sentence with fewer content words is no event (ours)", low=0)
    max_tokens: int | None = setting(
        "", None, "completion budget of a box extraction, verification or chain grouping; "
                  "null: the prompts' own (upstream 16,384, ours 512)", low=1)
    loom_max_tokens: int | None = setting(
        "", None, "completion budget of a Topic Loom decision; null: the prompts' own "
                  "(upstream 16,384, ours 8)", low=1)
    prompts: str = setting(
        "", "upstream", "the LLM build's prompts: upstream (the code's, read from membox.py) | "
                        "ours (our wordings with a system message)",
        choices=PROMPT_SOURCES)
    upstream_path: str | None = setting(
        "", None, "the folder holding membox/membox.py (null: found as eval.upstream_path)")
    verify_parse: str = setting(
        "", "strict", "a verification reply read strict (the code's json.loads, asked once) | "
                      "fenced (ours: fenced JSON, one repair round)",
        choices=VERIFY_PARSES)
    box_parse: str | None = setting(
        "", None, "a box reply read strict (the code's) | fenced (ours); null: strict under "
                  "prompts=upstream, fenced under ours",
        choices=PARSES)
    chain_parse: str | None = setting(
        "", None, "a chain reply read strict (the code's) | fenced (ours); null: strict under "
                  "prompts=upstream, fenced under ours",
        choices=PARSES)
    temperature: float | None = setting(
        "", 0.0, "sampling temperature of every build request (the code's 0); null: not sent")
    seed: int | None = setting(
        "", None, "sampling seed of every build request; null: not sent (the code's)", low=0)
    budget_param: str | None = setting(
        "", None, "the name the budget is sent under: max_tokens | max_completion_tokens; "
                  "null: none while the budgets are null (the code's), max_tokens once set",
        choices=tuple(b for b in BUDGET_PARAMS if b is not None))

    def __post_init__(self) -> None:
        check_fields(self)
        if not 1 <= self.min_keywords <= self.max_keywords:
            raise ValueError(f"memory.min_keywords / max_keywords: need 1 <= min <= max, got "
                             f"{self.min_keywords}, {self.max_keywords}")

