"""GAAMA's answer step (SPEC §2; ``eval.answer_style=gaama``, its memory's own).

Under ``eval.prompts=upstream`` (the default) it is its code's: ``prompts/answer_from_memory.md``
(gaama 2d992f7) with ``{{query}}`` and ``{{memory_text}}`` filled as ``services/
answer_from_memory.py`` fills them, one user message, no system message, 512 completion tokens and
no stop; an empty pack asks no model (``services/answer_from_memory.py`` 36-38) and the answer
recorded is the fallback hypothesis of ``evals/locomo/locomo_eval.py`` 197-198, read from that
file. Under ``eval.prompts=ours``: our wording (:data:`GAAMA_TEMPLATE`), same budget.
"""

from __future__ import annotations

from collections.abc import Sequence

from synapse_pt.data.upstream import gaama_prompt
from synapse_pt.retrieval.items import EPISODIC, RetrievedItem
from synapse_pt.steps import (
    AnswerPrompt,
    AnswerStep,
    format_item,
    format_timestamp,
    register,
    time_ordered,
)

from .judge import GAAMA_JUDGE_FILE

#: the one-line style instruction of our wording
GAAMA_INSTRUCTION = "Answer in one or two short paragraphs, directly and specifically."

#: GAAMA's answer step (our wording): the question, the memory in sections by type (facts,
#: reflections, episodes in time order; the code's MemoryPack.to_text), and its rules: a direct
#: answer from scattered evidence, counting every distinct occurrence, exhaustive lists, a
#: best-effort answer over "the memory does not say".
GAAMA_TEMPLATE = """Question: {question}

Memory of the conversation between {speakers}:

{sections}

How to answer:
- {style}
- Put together evidence that is spread over several memory items.
- For "how many times" questions, go through every item and count each distinct occurrence.
- For questions asking which things, name every one the memory mentions, across all items.
- When the memory holds relevant clues, give your best direct answer rather than saying the
  memory does not specify it.
- Do not repeat the question and do not mention the section names.
{strict}{date_instruction}
Answer:"""

_SECTIONS = (("fact", "Facts"), ("reflection", "Reflections"),
             (EPISODIC, "Episodes (in time order)"))
#: MemoryPack.to_text (gaama ``core/types.py``, include_citations=False, as
#: ``services/answer_from_memory.py`` calls it from the LoCoMo evaluation): a section per kind
_PACK_SECTIONS = (("fact", "Facts"), ("reflection", "Reflections"), ("skill", "Skills"),
                  (EPISODIC, "Episodes (in temporal order)"))
ANSWER_FILE = "gaama/prompts/answer_from_memory.md"


def gaama_sections(items: Sequence[RetrievedItem]) -> str:
    """The memory in sections by type, as GAAMA's pack is shown: facts and reflections in rank
    order, episodes in time order, any other kind (another memory under this style) last, in
    rank order; empty sections left out."""
    blocks = []
    for kind, title in _SECTIONS:
        these = [it for it in items if it.kind == kind]
        if kind == EPISODIC:
            these = time_ordered(these)
        if these:
            blocks.append(f"## {title}\n" + "\n".join(format_item(it) for it in these))
    rest = [it for it in items if it.kind not in {k for k, _ in _SECTIONS}]
    if rest:
        blocks.append("## Other memory\n" + "\n".join(format_item(it) for it in rest))
    return "\n\n".join(blocks) or "(empty)"


def gaama_memory_text(items: Sequence[RetrievedItem]) -> str:
    """The pack as GAAMA's ``MemoryPack.to_text`` writes it: ``## <Section>`` then ``- <text>``
    lines and a blank line per non-empty kind (facts and reflections in rank order, episodes in
    time order as its evaluation re-sorts them), stripped. An episode whose text does not carry
    its date gets ``[<date>] `` in front (upstream's episode text is ``[<date>] speaker: text``).
    Items of another kind (another memory under this style) follow under ``## Other memory``."""
    lines: list[str] = []
    known = {k for k, _ in _PACK_SECTIONS}
    for kind, title in [*_PACK_SECTIONS, ("", "Other memory")]:
        these = [it for it in items if (it.kind == kind if kind else it.kind not in known)]
        if kind == EPISODIC:
            these = time_ordered(these)
        if not these:
            continue
        lines.append(f"## {title}")
        for it in these:
            dated = kind == EPISODIC and not it.dated and it.timestamp is not None
            lines.append(f"- [{format_timestamp(it.timestamp)}] {it.text}" if dated
                         else f"- {it.text}")
        lines.append("")
    return "\n".join(lines).strip()


def ours(p: AnswerPrompt) -> list[dict[str, str]]:
    user = GAAMA_TEMPLATE.format(question=p.question, speakers=p.speakers,
                                 sections=gaama_sections(p.items), style=GAAMA_INSTRUCTION,
                                 strict=p.strict, date_instruction=p.date_instruction)
    return [{"role": "system", "content": p.system}, {"role": "user", "content": user}]


def upstream(p: AnswerPrompt, upstream_path: str | None) -> list[dict[str, str]]:
    """``prompts/answer_from_memory.md`` with ``{{query}}`` (the question, with the protocol's
    date instruction where on) and ``{{memory_text}}`` (:func:`gaama_memory_text`) filled."""
    user = gaama_prompt("answer_from_memory", upstream_path).render(
        query=p.question + p.date_instruction, memory_text=gaama_memory_text(p.items))
    return [{"role": "user", "content": user}]


GAAMA_ANSWER = register(AnswerStep(
    "gaama", ours, upstream, budget=(512, ()), upstream_budget=(512, ()),
    upstream_files=(ANSWER_FILE,),
    empty_pack=(GAAMA_JUDGE_FILE, "answer_and_judge", "hypothesis"), rank=1))
