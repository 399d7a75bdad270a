"""Structured output from chat models: parse JSON (or a list) out of a reply, with repair rounds.

Small models wrap JSON in code fences, add prose around it, or answer with a bulleted list; the
parsers here accept those forms. A reply that still does not parse gets a repair request: by
default one round of the original messages, the bad reply, and an instruction naming the error
(:func:`repair_in_context`); a caller may give its own rounds and requests (a related system's
code re-asks in its own way). A reply still failing after the last round is reported as
``ok=False`` with the error, never as an empty success.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .llm.base import LLM, ChatRequest, ChatResponse, LLMError

DEFAULT_REPAIR_INSTRUCTION = (
    "Your previous reply could not be parsed ({error}). Reply again with only the requested JSON: "
    "no explanation, no code fences."
)
_FENCE = re.compile(r"```[a-zA-Z0-9_-]*[ \t]*\n?(.*?)```", re.DOTALL)
_BULLET = re.compile(r"^\s*(?:[-*\u2022\u2023\u25e6]|\d{1,3}[.)])\s+(.+?)\s*$")
_MAX_WORDS_PER_COMMA_ITEM = 8  # longer pieces mean the line is prose, not a list
_EXCERPT = 200


class StructuredOutputError(ValueError):
    """A reply holds no value of the expected structure."""


@dataclass
class StructuredResult:
    """The outcome for one request of :func:`generate_structured`."""

    value: Any | None  # parsed value, None on failure
    ok: bool
    error: str | None  # why it failed (after the repair rounds)
    responses: list[ChatResponse]  # the first reply, then each repair reply
    #: each failed reply's parse error
    failures: list[Exception] = dataclasses.field(default_factory=list)


#: ``repair(original request, its result so far, round)`` -> the repair request of that round
#: (1 for the first); the result's last reply is ``responses[-1]``, its error ``failures[-1]``
Repair = Callable[[ChatRequest, StructuredResult, int], ChatRequest]


def recheck(result: StructuredResult, parse: Callable[..., Any], *args: Any,
            **kwargs: Any) -> Any | None:
    """A request's final reply parsed again by ``parse(text, *args, **kwargs)``: the checks that
    need the request itself (its ids, its number of items), which the batch's shape check could
    not make. The value, or ``None`` when the request failed or ``parse`` refuses the reply
    (``result`` then marked failed, its ``error`` saying why)."""
    if not result.ok:
        return None
    try:
        return parse(result.responses[-1].text, *args, **kwargs)
    except StructuredOutputError as err:
        result.ok, result.error = False, str(err)
        return None


def _excerpt(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _EXCERPT else text[:_EXCERPT] + "..."


def _balanced_end(text: str, start: int) -> int | None:
    """Index just past the bracket that closes ``text[start]`` (``[`` or ``{``), skipping
    brackets inside JSON strings; ``None`` if it never closes."""
    closer = {"[": "]", "{": "}"}
    stack = [closer[text[start]]]
    in_string = escaped = False
    for i in range(start + 1, len(text)):
        ch = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in closer:
            stack.append(closer[ch])
        elif ch in "]}":
            if ch != stack[-1]:
                return None
            stack.pop()
            if not stack:
                return i + 1
    return None


def _first_json_value(text: str) -> Any:
    """The first balanced ``[...]`` or ``{...}`` in ``text`` that is valid JSON."""
    for start, ch in enumerate(text):
        if ch not in "[{":
            continue
        end = _balanced_end(text, start)
        if end is None:
            continue
        try:
            return json.loads(text[start:end])
        except json.JSONDecodeError:
            continue
    raise StructuredOutputError(f"no JSON object or list in reply: {_excerpt(text)!r}")


def parse_json_reply(text: str) -> Any:
    """The JSON object or list in a model reply.

    Tries, in order: each fenced code block (```json ... ```), the whole reply, then the first
    balanced ``[...]`` or ``{...}`` that parses (so prose before or after is ignored).

    Raises:
        StructuredOutputError: nothing in the reply parses as a JSON object or list.
    """
    if not isinstance(text, str):
        raise StructuredOutputError(f"reply is {type(text).__name__}, not str")
    candidates = [m.group(1) for m in _FENCE.finditer(text)] + [text]
    for candidate in candidates:
        stripped = candidate.strip()
        try:
            value = json.loads(stripped)
        except json.JSONDecodeError:
            pass  # not bare JSON: look for an embedded object or list below
        else:
            if isinstance(value, (list, dict)):
                return value
    for candidate in candidates:
        try:
            return _first_json_value(candidate)
        except StructuredOutputError:
            continue
    raise StructuredOutputError(f"no JSON object or list in reply: {_excerpt(text)!r}")


def _clean_item(item: str) -> str:
    return item.strip().strip("\"'`").strip()


def _strings(values: list[Any], text: str) -> list[str]:
    out = []
    for i, v in enumerate(values):
        if isinstance(v, str):
            out.append(v.strip())
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out.append(str(v))
        else:
            raise StructuredOutputError(f"JSON list item {i} is {type(v).__name__}, not a string: "
                                        f"{_excerpt(text)!r}")
    return [s for s in out if s]


def parse_string_list(text: str) -> list[str]:
    """A list of strings from a model reply.

    Accepts a JSON list of strings (numbers are turned into strings), a JSON object with exactly one
    list-valued field (``{"concepts": [...]}``), and as fallbacks a bulleted or numbered list (one
    item per line) or a single line of comma-separated short items. An explicit JSON ``[]`` is a
    valid empty answer; a reply with none of these forms raises.

    Raises:
        StructuredOutputError: nothing usable in the reply.
    """
    try:
        value = parse_json_reply(text)
    except StructuredOutputError:
        value = None
    if isinstance(value, dict):
        lists = [v for v in value.values() if isinstance(v, list)]
        if len(lists) != 1:
            raise StructuredOutputError(f"JSON object with {len(lists)} list fields, expected a "
                                        f"list of strings: {_excerpt(text)!r}")
        value = lists[0]
    if isinstance(value, list):
        return _strings(value, text)
    body = "\n".join(m.group(1) for m in _FENCE.finditer(text)) or text
    bullets = [_clean_item(m.group(1)) for m in map(_BULLET.match, body.splitlines()) if m]
    bullets = [b for b in bullets if b]
    if bullets:
        return bullets
    lines = [ln.strip() for ln in body.strip().splitlines() if ln.strip()]
    if len(lines) == 1 and "," in lines[0]:
        items = [_clean_item(p) for p in lines[0].rstrip(".").split(",")]
        items = [p for p in items if p]
        if items and all(len(p.split()) <= _MAX_WORDS_PER_COMMA_ITEM for p in items):
            return items
    raise StructuredOutputError(f"no list of strings in reply: {_excerpt(text)!r}")


def _named(err: Exception) -> str:
    return f"{type(err).__name__}: {err}"


def _try_parse(parse: Callable[[str], Any], text: str) -> tuple[Any, Exception | None]:
    try:
        return parse(text), None
    except (StructuredOutputError, ValueError) as err:
        return None, err


def _generate(llm: LLM, requests: Sequence[ChatRequest]) -> list[ChatResponse]:
    responses = llm.generate(requests)
    if len(responses) != len(requests):
        raise LLMError(f"{llm.backend}/{llm.model} answered {len(responses)} of "
                       f"{len(requests)} requests")
    return responses


def repair_in_context(instruction: str = DEFAULT_REPAIR_INSTRUCTION) -> Repair:
    """Our repair: the original messages, the bad reply as the assistant turn, then
    ``instruction`` as a user turn (``{error}`` in it replaced by the parse error)."""

    def repair(request: ChatRequest, result: StructuredResult, round: int) -> ChatRequest:
        text = instruction.replace("{error}", _named(result.failures[-1]))
        messages = request.messages + (("assistant", result.responses[-1].text), ("user", text))
        return dataclasses.replace(request, messages=messages)

    return repair


def generate_structured(llm: LLM, requests: Sequence[ChatRequest], *,
                        parse: Callable[[str], Any] = parse_json_reply,
                        repair_instruction: str = DEFAULT_REPAIR_INSTRUCTION,
                        repair: Repair | None = None, rounds: int = 1,
                        repair_parse: Callable[[str], Any] | None = None
                        ) -> list[StructuredResult]:
    """Ask ``llm`` for every request in one batch and parse each reply with ``parse``.

    Replies that fail to parse get up to ``rounds`` repair rounds, each sent as one batch: by
    default (:func:`repair_in_context`) the original messages, the bad reply as the assistant
    turn, then ``repair_instruction`` as a user turn (``{error}`` in it is replaced by the parse
    error); ``repair`` builds each round's request instead. A repair reply is read with
    ``repair_parse`` (``parse`` when not given). Replies still failing give ``ok=False`` and
    the errors. ``parse`` signals failure with :class:`StructuredOutputError` (or any
    ``ValueError``). Backend failures (:class:`~synapse_pt.models.llm.base.LLMError`)
    propagate.
    """
    if not requests:
        return []
    build = repair or repair_in_context(repair_instruction)
    read_repair = repair_parse or parse
    results: list[StructuredResult] = []
    failed: list[int] = []
    for i, response in enumerate(_generate(llm, requests)):
        value, error = _try_parse(parse, response.text)
        results.append(StructuredResult(value, error is None, None if error is None
                                        else _named(error), [response],
                                        [] if error is None else [error]))
        if error is not None:
            failed.append(i)
    for round in range(1, rounds + 1):
        if not failed:
            break
        repairs = [build(requests[i], results[i], round) for i in failed]
        still: list[int] = []
        for i, response in zip(failed, _generate(llm, repairs), strict=True):
            value, error = _try_parse(read_repair, response.text)
            result = results[i]
            result.responses.append(response)
            if error is None:
                result.value, result.ok, result.error = value, True, None
            else:
                result.failures.append(error)
                label = "repair reply" if rounds == 1 else f"repair reply {round}"
                first = (f"first reply: {result.error}" if round == 1 else result.error)
                result.error = f"{first}; {label}: {_named(error)}"
                still.append(i)
        failed = still
    return results
