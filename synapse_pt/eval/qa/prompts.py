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

The shared answer step is registered here; a related system's own step lives in its package
(:mod:`synapse_pt.steps`): under ``eval.prompts=upstream`` its code's prompt read from its
source file (one user message, no system message, the code's budget, no strict-evidence line), the
two protocol exceptions, when on, appended to the question; ``eval.prompts=ours`` our wording.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from synapse_pt.common.errors import ConfigError
from synapse_pt.retrieval.items import RetrievedItem
from synapse_pt.steps import (
    AnswerPrompt,
    AnswerStep,
    answer_step,
    format_item,
    format_timestamp,
    register,
)

__all__ = ["answer_messages", "category5_options", "format_context", "format_item",
           "format_timestamp", "resolve_option_reply"]

NO_RECORD_REPLY = "Not mentioned"  # contains "not mentioned": scored as a refusal (SPEC §3)

SYSTEM_PROMPT = "You answer questions about a long conversation using only the memory given."

STRICT_EVIDENCE = "Is this EXPLICITLY mentioned? If not, output 'Not mentioned'."

ANSWER_TEMPLATE = """Memory of the conversation between {speakers} (in time order):
{context}

Question: {question}
{style} {strict}{date_instruction}
Answer:"""

#: the shared answer step's instruction (every system on equal terms)
SHARED_INSTRUCTION = "Answer with a short phrase taken from the memory."
#: where the related systems' prompts come from (``eval.prompts``): ``upstream``, their code's own
#: files (:mod:`synapse_pt.data.upstream`, sha256-checked); ``ours``, our wordings
PROMPT_SOURCES = ("upstream", "ours")


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


def format_context(items: Sequence[RetrievedItem]) -> str:
    """Items in time order (undated items, e.g. concepts, after the dated ones, by rank)."""
    dated = sorted((it for it in items if it.timestamp is not None), key=lambda it: it.timestamp)
    undated = [it for it in items if it.timestamp is None]
    return "\n".join(format_item(it) for it in [*dated, *undated])


def shared_messages(p: AnswerPrompt) -> list[dict[str, str]]:
    """The shared answer step: :data:`ANSWER_TEMPLATE` over the items in time order."""
    user = ANSWER_TEMPLATE.format(speakers=p.speakers, context=format_context(p.items) or "(empty)",
                                  question=p.question, style=SHARED_INSTRUCTION, strict=p.strict,
                                  date_instruction=p.date_instruction)
    return [{"role": "system", "content": p.system}, {"role": "user", "content": user}]


SHARED = register(AnswerStep("shared", shared_messages))


def answer_messages(question: str, items: Sequence[RetrievedItem], speakers: str, *,
                    strict_evidence: bool = True, date_instruction: bool = False,
                    style: str = "shared",
                    options: tuple[str, str] | None = None, prompts: str = "upstream",
                    upstream_path: str | None = None) -> list[dict[str, str]]:
    """Chat messages of the answer prompt for one question, in the answer step ``style``
    (:func:`~synapse_pt.steps.answer_step`; under ``prompts="upstream"`` a related
    system's step sends its code's own prompt, read from its file).

    Reads no category and no gold: whether the date instruction or the category-5 options are
    added is decided by the caller (:func:`synapse_pt.eval.qa.pipeline.wants_date_instruction`,
    :func:`synapse_pt.eval.qa.pipeline.answer_options`), only under their protocol flags.
    """
    step = answer_step(style)
    if prompts not in PROMPT_SOURCES:
        raise ConfigError(f"eval.prompts must be one of {list(PROMPT_SOURCES)}, got {prompts!r}")
    prompt = AnswerPrompt(
        question=question + (OPTIONS_TEMPLATE.format(*options) if options else ""), items=items,
        speakers=speakers, system=SYSTEM_PROMPT,
        strict=STRICT_EVIDENCE if strict_evidence else "",
        date_instruction=DATE_INSTRUCTION if date_instruction else "")
    return step.build(prompt, prompts, upstream_path)
