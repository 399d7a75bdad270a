"""Membox's answer step (SPEC §2; ``eval.answer_style=membox``, its memory's own).

Under ``eval.prompts=upstream`` (the default) it is its code's: ``Config.PROMPT_QA_ANSWER``
(``membox.py``, 3d1fa84) filled with ``str.format(memories=..., question=...)``, one user message,
no system message. Its ``chat_completion`` sets no ``max_tokens`` and no stop, so the model's own
completion limit applies: 16,384 tokens for gpt-4o-mini, its answering model (its prompt asks for
step-by-step work before the answer, which a newline stop or 32 tokens would cut off). Under
``eval.prompts=ours``: our wording of its mem0-style prompt (:data:`MEMBOX_TEMPLATE`).
"""

from __future__ import annotations

from collections.abc import Sequence

from synapse_pt.data.upstream import membox_constant
from synapse_pt.retrieval.items import RetrievedItem
from synapse_pt.steps import AnswerPrompt, AnswerStep, format_item, register

#: the one-line style instruction of our wording
MEMBOX_INSTRUCTION = "Keep the answer under 5-6 words."

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


def rank_order_context(items: Sequence[RetrievedItem]) -> str:
    """The items in the order the memory returned them (Membox's contexts: each box followed by
    its trace), separated by blank lines; a trace's events under ``Events:``."""
    parts = [("Events:\n" + it.text) if it.kind == "trace" else format_item(it) for it in items]
    return "\n\n".join(parts) or "(empty)"


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


def ours(p: AnswerPrompt) -> list[dict[str, str]]:
    user = MEMBOX_TEMPLATE.format(speakers=p.speakers, context=rank_order_context(p.items),
                                  question=p.question, style=MEMBOX_INSTRUCTION, strict=p.strict,
                                  date_instruction=p.date_instruction)
    return [{"role": "system", "content": p.system}, {"role": "user", "content": user}]


def upstream(p: AnswerPrompt, upstream_path: str | None) -> list[dict[str, str]]:
    """``Config.PROMPT_QA_ANSWER`` with ``{memories}`` (:func:`membox_memories`) and
    ``{question}`` (the date instruction appended where on) filled."""
    user = membox_constant("PROMPT_QA_ANSWER", upstream_path).render(
        memories=membox_memories(p.items), question=p.question + p.date_instruction)
    return [{"role": "user", "content": user}]


MEMBOX_ANSWER = register(AnswerStep("membox", ours, upstream, upstream_budget=(16384, ()),
                                    upstream_files=("membox/membox.py",), rank=2))
