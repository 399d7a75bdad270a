"""Answer prompts (SPEC §1.2 step 7 and §3).

The answer prompt carries the retrieved context in time order (episodic items with their session
date, semantic items marked as such), the strict-evidence instruction, and — only when the
``category_date_instruction`` flag is on — the LoCoMo/A-Mem date instruction for temporal questions
(the one place a protocol reads a question's category; off in the strict setting).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from synapse_pt.memory.base import EPISODIC, SEMANTIC, RetrievedItem

NO_RECORD_REPLY = "Not mentioned"  # contains "not mentioned": scored as a refusal (SPEC §3)

SYSTEM_PROMPT = "You answer questions about a long conversation using only the memory given."

STRICT_EVIDENCE = "Is this EXPLICITLY mentioned? If not, output 'Not mentioned'."

ANSWER_TEMPLATE = """Memory of the conversation between {speakers} (in time order):
{context}

Question: {question}
{style} {strict}{date_instruction}
Answer:"""

# The answer instruction: the harness's shared one (every system on equal terms, the default), or
# the one each related system's public code gives its answer model (SPEC §2), as a flag.
ANSWER_STYLES = {
    "shared": "Answer with a short phrase taken from the memory.",
    "gaama": "Answer in one or two short paragraphs; prefer a direct answer.",
    "membox": "Answer in less than 5-6 words.",
}

# LoCoMo's own instruction for temporal (category 2) questions; used only when the flag is on.
DATE_INSTRUCTION = " Use the DATE of the memory entries to answer with an approximate date."


def format_timestamp(ts: datetime | None) -> str:
    """The session date of an item (``"8 May 2023"``). The clock time is left out: within a
    session it carries the loader's synthetic per-turn offset, not a time the speakers gave."""
    return "" if ts is None else f"{ts.day} {ts:%B %Y}"


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


def answer_messages(question: str, items: Sequence[RetrievedItem], speakers: str, *,
                    strict_evidence: bool = True, date_instruction: bool = False,
                    style: str = "shared") -> list[dict[str, str]]:
    """Chat messages of the answer prompt for one question.

    Reads no category and no gold: whether the date instruction is added is decided by the caller
    (:func:`synapse_pt.eval.pipeline.wants_date_instruction`).
    """
    if style not in ANSWER_STYLES:
        raise ValueError(f"eval.answer_style must be one of {list(ANSWER_STYLES)}, got {style!r}")
    user = ANSWER_TEMPLATE.format(
        style=ANSWER_STYLES[style],
        speakers=speakers,
        context=format_context(items) or "(empty)",
        question=question,
        strict=STRICT_EVIDENCE if strict_evidence else "",
        date_instruction=DATE_INSTRUCTION if date_instruction else "",
    )
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]
