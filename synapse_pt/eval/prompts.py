"""Answer prompts (SPEC §1.2 step 7 and §3).

The answer prompt carries the retrieved context in time order (episodic items with their session
date, semantic items marked as such), the strict-evidence instruction, and two protocol
exceptions, each a flag that is off in the strict setting (the only places a prompt reads a
question's category or gold data, SPEC §3):

* ``category_date_instruction``: the LoCoMo/A-Mem date instruction for temporal questions;
* ``category5_options``: the official generation's category-5 prompt, a choice between the
  distractor and "Not mentioned in the conversation" in a random order
  (``snap-research/locomo`` branch ``code``, ``task_eval/evaluate_gpts.py``); a reply of the bare
  letter is mapped back to the option's text as that code's ``get_cat_5_answer`` does.

The related systems' answer steps (``eval.answer_style=gaama|membox``, the default for their
memories) send, under ``eval.prompts=upstream``, their code's own prompt read from its source file
(:mod:`synapse_pt.data.upstream`): one user message, no system message, the code's budget, and no
strict-evidence line (the file's prompt is the whole step); the two protocol exceptions, when on,
are appended to the question. ``eval.prompts=ours`` keeps our wordings of those steps.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from datetime import datetime

from synapse_pt.data.render import format_day
from synapse_pt.errors import ConfigError
from synapse_pt.memory.base import EPISODIC, SEMANTIC, RetrievedItem

NO_RECORD_REPLY = "Not mentioned"  # contains "not mentioned": scored as a refusal (SPEC §3)

SYSTEM_PROMPT = "You answer questions about a long conversation using only the memory given."

STRICT_EVIDENCE = "Is this EXPLICITLY mentioned? If not, output 'Not mentioned'."

ANSWER_TEMPLATE = """Memory of the conversation between {speakers} (in time order):
{context}

Question: {question}
{style} {strict}{date_instruction}
Answer:"""

# The answer instruction: the harness's shared one (every system on equal terms), or a related
# system's answer step (SPEC §2), as a flag. ``"gaama"`` and ``"membox"`` send, under
# ``eval.prompts=upstream`` (the default), their code's own prompts read from the files: gaama
# ``prompts/answer_from_memory.md`` (2d992f7) and Membox ``membox.py`` ``PROMPT_QA_ANSWER``
# (3d1fa84) (:func:`upstream_answer_messages`); under ``eval.prompts=ours``, whole prompts of our
# wording with their rules, sections and budget (GAAMA_TEMPLATE, MEMBOX_TEMPLATE). The one-line
# instructions we used before issue 30 stay as ``"gaama_line"`` / ``"membox_line"`` (ours: one
# line each from SPEC's description, never the code's prompt).
ANSWER_STYLES = {
    "shared": "Answer with a short phrase taken from the memory.",
    "gaama": "Answer in one or two short paragraphs, directly and specifically.",
    "membox": "Keep the answer under 5-6 words.",
    "gaama_line": "Answer in one or two short paragraphs; prefer a direct answer.",
    "membox_line": "Answer in less than 5-6 words.",
}

#: the answer budget a style brings (``eval.answer_budget=style``): ``(max tokens, stop
#: sequences)``. GAAMA's code allows 512 completion tokens and its answers run to paragraphs
#: (``services/answer_from_memory.py``), so no newline stop; our wording (``eval.prompts=ours``)
#: keeps that budget.
STYLE_BUDGETS: dict[str, tuple[int, tuple[str, ...]]] = {"gaama": (512, ())}
#: the budgets of the upstream answer steps (``eval.prompts=upstream``). Membox's
#: ``chat_completion`` (``membox.py``) sets no ``max_tokens`` and no stop, so the model's own
#: completion limit applies: 16,384 tokens for gpt-4o-mini, its answering model (its prompt asks
#: for step-by-step work before the answer, which a newline stop or 32 tokens would cut off).
UPSTREAM_BUDGETS: dict[str, tuple[int, tuple[str, ...]]] = {"gaama": (512, ()),
                                                            "membox": (16384, ())}

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

#: Membox's answer step (our wording of its mem0-style prompt): memories with their timestamps,
#: relative dates turned into dates for every question, the two speakers kept apart from names
#: in the text, an answer of less than 5-6 words.
MEMBOX_TEMPLATE = """Memories of a conversation between {speakers}, with their timestamps:

{context}

Question: {question}

How to answer:
1. Read every memory that bears on the question, with its timestamp.
2. Look for direct evidence of the event or fact the question asks about.
3. Turn every relative time ("last year", "two months ago") into a specific date, month or year,
   counted from the timestamp of the memory that mentions it (a memory of 4 May 2022 saying
   "last year" means 2021), and answer with that instead of the relative phrase.
4. Keep to what the two speakers said; a name mentioned in a memory is not one of the speakers.
5. {style}
{strict}{date_instruction}
Answer:"""

_SECTIONS = (("fact", "Facts"), ("reflection", "Reflections"),
             (EPISODIC, "Episodes (in time order)"))


def gaama_sections(items: Sequence[RetrievedItem]) -> str:
    """The memory in sections by type, as GAAMA's pack is shown: facts and reflections in rank
    order, episodes in time order, any other kind (another memory under this style) last, in
    rank order; empty sections left out."""
    blocks = []
    for kind, title in _SECTIONS:
        these = [it for it in items if it.kind == kind]
        if kind == EPISODIC:
            these = sorted(these, key=lambda it: (it.timestamp is None,
                                                  it.timestamp or datetime.min))
        if these:
            blocks.append(f"## {title}\n" + "\n".join(format_item(it) for it in these))
    rest = [it for it in items if it.kind not in {k for k, _ in _SECTIONS}]
    if rest:
        blocks.append("## Other memory\n" + "\n".join(format_item(it) for it in rest))
    return "\n\n".join(blocks) or "(empty)"


def rank_order_context(items: Sequence[RetrievedItem]) -> str:
    """The items in the order the memory returned them (Membox's contexts: each box followed by
    its trace), separated by blank lines; a trace's events under ``Events:``."""
    parts = [("Events:\n" + it.text) if it.kind == "trace" else format_item(it) for it in items]
    return "\n\n".join(parts) or "(empty)"


#: where the related systems' prompts come from (``eval.prompts``): ``upstream``, their code's own
#: files (:mod:`synapse_pt.data.upstream`, sha256-checked); ``ours``, our wordings in this module
PROMPT_SOURCES = ("upstream", "ours")
#: the answer styles that have an upstream prompt
UPSTREAM_STYLES = ("gaama", "membox")
#: the upstream files each style's answer step reads (recorded in a run's identity)
UPSTREAM_ANSWER_FILES = {"gaama": "gaama/prompts/answer_from_memory.md",
                         "membox": "membox/membox.py"}

#: MemoryPack.to_text (gaama ``core/types.py``, include_citations=False, as
#: ``services/answer_from_memory.py`` calls it from the LoCoMo evaluation): a section per kind
_PACK_SECTIONS = (("fact", "Facts"), ("reflection", "Reflections"), ("skill", "Skills"),
                  (EPISODIC, "Episodes (in temporal order)"))


def gaama_memory_text(items: Sequence[RetrievedItem]) -> str:
    """The pack as GAAMA's ``MemoryPack.to_text`` writes it: ``## <Section>`` then ``- <text>``
    lines and a blank line per non-empty kind (facts and reflections in rank order, episodes in
    time order as its evaluation re-sorts them), stripped. An episode whose text does not carry
    its date gets ``[<date>] `` in front (upstream's episode text is ``[<date>] speaker: text``).
    Items of another kind (another memory under this style) follow under ``## Other memory``."""
    lines: list[str] = []
    known = {k for k, _ in _PACK_SECTIONS}
    sections = [*_PACK_SECTIONS, ("", "Other memory")]
    for kind, title in sections:
        these = [it for it in items if (it.kind == kind if kind else it.kind not in known)]
        if kind == EPISODIC:
            these = sorted(these, key=lambda it: (it.timestamp is None,
                                                  it.timestamp or datetime.min))
        if not these:
            continue
        lines.append(f"## {title}")
        for it in these:
            dated = kind == EPISODIC and not it.dated and it.timestamp is not None
            lines.append(f"- [{format_timestamp(it.timestamp)}] {it.text}" if dated
                         else f"- {it.text}")
        lines.append("")
    return "\n".join(lines).strip()


def membox_memories(items: Sequence[RetrievedItem]) -> str:
    """Membox's ``{memories}`` (``membox.py``, ``_answer_one`` and ``_build_trace_contexts``):
    each box's stored text, followed under trace mode by ``Events:`` and its trace's event
    lines, contexts joined by blank lines, in rank order. Any other item: its text."""
    contexts: list[str] = []
    for it in items:
        if it.kind == "trace" and contexts:
            contexts[-1] = f"{contexts[-1]}\nEvents:\n{it.text}"
        elif it.kind == "trace":
            contexts.append(f"Events:\n{it.text}")
        else:
            contexts.append(it.text)
    return "\n\n".join(contexts)


def upstream_answer_messages(style: str, query: str, items: Sequence[RetrievedItem],
                             upstream_path: str | None = None) -> list[dict[str, str]]:
    """The answer request's messages as the related system's code sends them: one user message,
    no system message. GAAMA: ``prompts/answer_from_memory.md`` with ``{{query}}`` and
    ``{{memory_text}}`` filled (``services/answer_from_memory.py``); Membox: ``Config.
    PROMPT_QA_ANSWER`` with ``str.format(memories=..., question=...)`` (``membox.py``)."""
    from synapse_pt.data.upstream import gaama_prompt, membox_constant

    if style == "gaama":
        user = gaama_prompt("answer_from_memory", upstream_path).render(
            query=query, memory_text=gaama_memory_text(items))
    elif style == "membox":
        user = membox_constant("PROMPT_QA_ANSWER", upstream_path).render(
            memories=membox_memories(items), question=query)
    else:
        raise ValueError(f"answer style {style!r} has no upstream prompt ({UPSTREAM_STYLES})")
    return [{"role": "user", "content": user}]


# LoCoMo's own instruction for temporal (category 2) questions; used only when the flag is on.
DATE_INSTRUCTION = " Use the DATE of the memory entries to answer with an approximate date."


# The official category-5 options (used only when eval.category5_options is on).
NOT_MENTIONED_OPTION = "Not mentioned in the conversation"
OPTIONS_TEMPLATE = " Select the correct answer: (a) {} (b) {}."


def category5_options(distractor: str, key: str, seed: int) -> tuple[str, str]:
    """The two options ``(a, b)`` of the official category-5 prompt.

    The official code draws the order with an unseeded ``random.random() < 0.5``; here the draw is
    seeded by the run seed and the question key, so a rerun asks the same prompt (and the response
    cache answers it)."""
    if random.Random(f"{seed}:{key}").random() < 0.5:
        return NOT_MENTIONED_OPTION, distractor
    return distractor, NOT_MENTIONED_OPTION


def resolve_option_reply(reply: str, options: tuple[str, str]) -> str:
    """The official ``get_cat_5_answer``: a one-character reply (``"a"``) or a three-character
    one (``"(a)"``) is replaced by that option's text; any other reply is kept as it is."""
    text = reply.strip().lower()
    if len(text) == 1:
        return options[0] if "a" in text else options[1]
    if len(text) == 3:
        return options[0] if "(a)" in text else options[1]
    return reply.strip()


def format_timestamp(ts: datetime | None) -> str:
    """The session date of an item (``"8 May 2023"``). The clock time is left out: within a
    session it carries the loader's synthetic per-turn offset, not a time the speakers gave."""
    return "" if ts is None else format_day(ts)


def format_item(item: RetrievedItem) -> str:
    """One context line: ``- [date] <turn as the memory rendered it>`` for a turn (no date added
    when the turn template already carries it), ``- [concept] text`` for a semantic node (and
    ``- [<kind>] text`` for any other undated item a system returns)."""
    if item.kind == SEMANTIC:
        return f"- [concept] {item.text}"
    if item.timestamp is None and item.kind != EPISODIC:
        return f"- [{item.kind}] {item.text}"
    when = "" if item.dated else format_timestamp(item.timestamp)
    return f"- [{when}] {item.text}" if when else f"- {item.text}"


def format_context(items: Sequence[RetrievedItem]) -> str:
    """Items in time order (undated items, e.g. concepts, after the dated ones, by rank)."""
    dated = sorted((it for it in items if it.timestamp is not None), key=lambda it: it.timestamp)
    undated = [it for it in items if it.timestamp is None]
    return "\n".join(format_item(it) for it in [*dated, *undated])


def _time_ordered_context(items: Sequence[RetrievedItem]) -> str:
    return format_context(items) or "(empty)"


#: answer styles whose prompt lays the context out their own way: (template, context renderer);
#: every other style: ANSWER_TEMPLATE over the items in time order
_LAYOUTS = {"gaama": (GAAMA_TEMPLATE, gaama_sections),
            "membox": (MEMBOX_TEMPLATE, rank_order_context)}


def answer_messages(question: str, items: Sequence[RetrievedItem], speakers: str, *,
                    strict_evidence: bool = True, date_instruction: bool = False,
                    style: str = "shared",
                    options: tuple[str, str] | None = None, prompts: str = "upstream",
                    upstream_path: str | None = None) -> list[dict[str, str]]:
    """Chat messages of the answer prompt for one question.

    Reads no category and no gold: whether the date instruction or the category-5 options are
    added is decided by the caller (:func:`synapse_pt.eval.pipeline.wants_date_instruction`,
    :func:`synapse_pt.eval.pipeline.answer_options`), only under their protocol flags.

    ``prompts`` (:data:`PROMPT_SOURCES`): under ``"upstream"`` the ``gaama`` and ``membox``
    styles send their code's own prompt, read from its file (:func:`upstream_answer_messages`);
    under ``"ours"`` our wordings (:data:`GAAMA_TEMPLATE`, :data:`MEMBOX_TEMPLATE`).
    """
    if style not in ANSWER_STYLES:
        raise ConfigError(f"eval.answer_style must be one of {list(ANSWER_STYLES)}, got {style!r}")
    if prompts not in PROMPT_SOURCES:
        raise ConfigError(f"eval.prompts must be one of {list(PROMPT_SOURCES)}, got {prompts!r}")
    if prompts == "upstream" and style in UPSTREAM_STYLES:
        query = (question + (OPTIONS_TEMPLATE.format(*options) if options else "")
                 + (DATE_INSTRUCTION if date_instruction else ""))
        return upstream_answer_messages(style, query, items, upstream_path)
    fill = {"style": ANSWER_STYLES[style], "speakers": speakers,
            "question": question + (OPTIONS_TEMPLATE.format(*options) if options else ""),
            "strict": STRICT_EVIDENCE if strict_evidence else "",
            "date_instruction": DATE_INSTRUCTION if date_instruction else ""}
    template, render = _LAYOUTS.get(style, (ANSWER_TEMPLATE, _time_ordered_context))
    context = render(items)  # GAAMA's template names it {sections}, the others {context}
    user = template.format(context=context, sections=context, **fill)
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]
