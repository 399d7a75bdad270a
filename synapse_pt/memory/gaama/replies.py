"""How GAAMA's code reads its fact and reflection replies and asks again (``memory.replies``).

``"code"`` (the default; ``services/llm_extractors.py`` at 2d992f7):

* a code fence is taken off only when it wraps the whole reply (:func:`strip_fence`, 22-29);
  prose around a fence leaves the reply as it is;
* the first reply (:func:`load_first`, 222-237 and 293-308): empty (an empty completion) reads as
  nothing extracted; a JSON object is the reply, with or without its ``facts`` key; anything else
  (not JSON, a JSON list) is asked again;
* asking again (:class:`RetryTexts`, 32-98): up to :data:`RETRIES` requests, each ONE user
  message without the original prompt, the file's ``retry_prompt`` filled with the last error (the
  first time the extractor's own words, after that the JSON error or the file's words for an empty
  reply or for a JSON value that is no non-empty object), the first 1,000 characters of the last
  output and the keys hint; a retry's reply counts only as a non-empty JSON object
  (:func:`load_retry`). After the last, the code goes on with empty lists: nothing extracted. Here
  that chunk is also counted in ``extraction_failures`` and named in the log.

The retry texts are read from the pinned ``llm_extractors.py`` (sha256-checked,
:mod:`synapse_pt.data.upstream`) when the first retry is needed, never pasted here.

``"repair"`` (ours, the SmolLM2 records of experiments/related_llm_builds.md): fenced JSON and
prose around it accepted, a reply without ``facts`` unreadable, ONE repair request with the
original prompt, the bad reply and our instruction, then a counted failure.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from synapse_pt.data.upstream import Template, UpstreamFile, fstring, resolve_upstream_file
from synapse_pt.models.llm.base import ChatRequest
from synapse_pt.models.structured import StructuredOutputError, StructuredResult

#: how replies are read and asked again (module docstring)
REPLIES = ("code", "repair")
RETRY_FILE = "gaama/services/llm_extractors.py"
RETRY_FUNCTION = "_retry_llm_for_json"
#: the code's retries after an unreadable first reply (``_MAX_JSON_RETRIES``, line 19)
RETRIES = 2
#: the extractor class of each request kind, whose ``_parse_response`` names the first error
#: and the keys (lines 232-236, 303-307)
EXTRACTORS = {"facts": "LLMFactExtractor", "reflections": "LLMReflectionExtractor"}
_FENCE = "```"


def strip_fence(text: str) -> str:
    """The reply stripped, without the code fence that wraps it whole (```` ``` ```` or
    ```` ```json ````, the inside stripped again); a reply with anything outside a fence is left
    as it is (``_strip_json_block``)."""
    text = (text or "").strip()
    if len(text) >= 2 * len(_FENCE) and text.startswith(_FENCE) and text.endswith(_FENCE):
        inner = text[len(_FENCE):-len(_FENCE)]
        return inner.removeprefix("json").strip()
    return text


def load_first(text: str) -> dict[str, Any]:
    """The first reply as the code reads it: ``{}`` (nothing extracted) when empty after
    :func:`strip_fence`, the JSON object it is; anything else is asked again.

    Raises:
        StructuredOutputError: not a JSON object (the code's retries follow).
    """
    stripped = strip_fence(text)
    if not stripped:
        return {}
    try:
        value = json.loads(stripped)
    except json.JSONDecodeError as err:
        raise StructuredOutputError(f"not JSON once a whole-reply fence is off: {err}") from err
    if not isinstance(value, dict):
        raise StructuredOutputError(f"a JSON {type(value).__name__}, not an object")
    return value


class RetryError(StructuredOutputError):
    """A retry reply the code does not take; ``kind``: ``"empty"``, ``"json"`` (its message the
    JSON error, as the code words it) or ``"not_dict"``."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def load_retry(text: str) -> dict[str, Any]:
    """A retry's reply as the code reads it: a non-empty JSON object after :func:`strip_fence`.

    Raises:
        RetryError: empty, not JSON, or not a non-empty object.
    """
    stripped = strip_fence(text)
    if not stripped:
        raise RetryError("empty", "empty reply")
    try:
        value = json.loads(stripped)
    except json.JSONDecodeError as err:
        raise RetryError("json", str(err)) from err
    if not isinstance(value, dict) or not value:
        raise RetryError("not_dict", "not a non-empty JSON object")
    return value


# ------------------------------------------------------------------------ the code's retry texts

#: the expression forms of the file's f-string fields (``last_error``,
#: ``(last_raw or '')[:1000]``, ``expected_keys``)
_FIELD_NODES = (ast.Expression, ast.Name, ast.Load, ast.Constant, ast.BoolOp, ast.Or,
                ast.Subscript, ast.Slice, ast.JoinedStr, ast.FormattedValue)


def _evaluate(node: ast.expr, values: Mapping[str, object], where: str) -> Any:
    """An f-string or field expression of the pinned file over ``values``: names, constants,
    ``or``, constant slices and f-strings only (anything else is refused, never run)."""
    tree = ast.Expression(body=node)
    bad = sorted({type(n).__name__ for n in ast.walk(tree) if not isinstance(n, _FIELD_NODES)})
    if bad:
        raise ValueError(f"{where}: an expression with {bad} (only names, constants, 'or' and "
                         "constant slices are read)")
    return eval(compile(tree, where, "eval"), {"__builtins__": {}}, dict(values))  # noqa: S307


@dataclass(frozen=True)
class RetryTexts:
    """The code's retry request, read from the pinned ``llm_extractors.py``: its
    ``retry_prompt`` (:attr:`prompt`), the keys hint of each request kind, the first error each
    extractor names, and the errors a retry's reply gets (empty; not a non-empty object; a JSON
    error is the decoder's own message)."""

    source: UpstreamFile
    prompt: Template
    keys_hint: Mapping[str, str]
    first_error: Mapping[str, str]
    expected_keys: Mapping[str, tuple[str, ...]]
    empty_error: str
    not_dict_error: str

    @classmethod
    def read(cls, root: str | os.PathLike | None = None) -> RetryTexts:
        prompt = fstring(RETRY_FILE, RETRY_FUNCTION, "retry_prompt", root)
        src = resolve_upstream_file(RETRY_FILE, root)
        tree = ast.parse(src.text(), filename=str(src.path))
        (retry,) = [n for n in ast.walk(tree)
                    if isinstance(n, ast.FunctionDef) and n.name == RETRY_FUNCTION]

        def assigned(name: str, kind: type) -> list[ast.expr]:
            return [n.value for n in sorted(
                (n for n in ast.walk(retry) if isinstance(n, ast.Assign)), key=lambda n: n.lineno)
                if any(isinstance(t, ast.Name) and t.id == name for t in n.targets)
                and isinstance(n.value, kind)]

        (hint,) = assigned("keys_hint", ast.JoinedStr)
        errors = [n.value for n in assigned("last_error", ast.Constant)]
        if len(errors) != 2 or not all(isinstance(e, str) for e in errors):
            raise ValueError(f"{src.path}: {RETRY_FUNCTION}: expected the two fixed texts of "
                             f"last_error (an empty reply, not an object), found {errors!r}")
        first, keys, hints = {}, {}, {}
        for kind, owner in EXTRACTORS.items():
            (cls_node,) = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)
                           and n.name == owner]
            (call,) = [n for n in ast.walk(cls_node) if isinstance(n, ast.Call)
                       and isinstance(n.func, ast.Name) and n.func.id == RETRY_FUNCTION]
            first[kind] = ast.literal_eval(call.args[2])
            keys[kind] = tuple(ast.literal_eval(next(
                k.value for k in call.keywords if k.arg == "expected_keys")))
            hints[kind] = _evaluate(hint, {"expected_keys": list(keys[kind])},
                                    f"{src.path}: keys_hint")
        return cls(src, prompt, hints, first, keys, errors[0], errors[1])

    def render(self, last_error: str, last_raw: str, kind: str) -> str:
        """The retry prompt as the f-string fills it."""
        values = {"last_error": last_error, "last_raw": last_raw,
                  "keys_hint": self.keys_hint[kind]}
        out = []
        for part in self.prompt.parts:
            if isinstance(part, str):
                out.append(part)
            else:
                node = ast.parse(part[1], mode="eval").body
                out.append(str(_evaluate(node, values, f"{self.source.path}: retry_prompt")))
        return "".join(out)

    def error_of(self, failure: Exception) -> str:
        """``last_error`` after a retry reply the code did not take."""
        if isinstance(failure, RetryError):
            return {"empty": self.empty_error, "not_dict": self.not_dict_error}.get(
                failure.kind, str(failure))
        return str(failure)


class CodeRetry:
    """The code's retries as a :data:`~synapse_pt.models.structured.Repair` of one request kind
    (``"facts"`` or ``"reflections"``): each retry ONE user message, the request's budget and
    sampling. The texts are read on the first retry (``upstream_path``: where to find them)."""

    def __init__(self, kind: str, upstream_path: str | None = None) -> None:
        self.kind, self.upstream_path = kind, upstream_path
        self.texts: RetryTexts | None = None

    def __call__(self, request: ChatRequest, result: StructuredResult, round: int
                 ) -> ChatRequest:
        if self.texts is None:
            self.texts = RetryTexts.read(self.upstream_path)
        error = (self.texts.first_error[self.kind] if round == 1
                 else self.texts.error_of(result.failures[-1]))
        # the code's adapter strips every completion (adapters/openai_llm.py 62)
        prompt = self.texts.render(error, result.responses[-1].text.strip(), self.kind)
        return dataclasses.replace(request, messages=(("user", prompt),))
