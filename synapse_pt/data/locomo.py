"""Loader for the official LoCoMo release format (``locomo10.json``).

The file is a JSON list of samples. Each sample has ``sample_id``, ``conversation`` (``speaker_a``,
``speaker_b``, ``session_<n>_date_time``, ``session_<n>``: a list of turns with ``speaker``,
``dia_id``, ``text`` and optionally ``blip_caption``/``img_url``), and ``qa`` (``question``,
``answer`` or ``adversarial_answer``, ``evidence``, ``category``). Malformed input raises
:class:`DataFormatError` naming the file, sample and field; the release's known quirks are handled
and reported (see :mod:`synapse_pt.data.evidence`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from synapse_pt.data.schema import Conversation, Dataset, Question, Session, Turn

from .audit import find_audit
from .benchmark import Benchmark
from .categories import OFFICIAL
from .errors import DataFormatError
from .evidence import parse_evidence
from .integrity import upstream_manifest
from .source import LOCOMO_FILENAME, sample_path
from .text import require_text

log = logging.getLogger(__name__)

DATE_TIME_FORMAT = "%I:%M %p on %d %B, %Y"  # "1:56 pm on 8 May, 2023"
#: upstream releases in this format whose manifest ships with the package (manifests/<name>.json)
KNOWN_RELEASES = ("locomo10",)
_SESSION_KEY = re.compile(r"session_(\d+)")


def content_sha256(value: Any) -> str:
    """sha256 of ``value`` as canonical JSON (sorted keys, no insignificant white space, UTF-8):
    equal for the same data however the file was serialised."""
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def parse_date_time(raw: str) -> datetime:
    """Parse a LoCoMo ``session_<n>_date_time`` string such as ``"1:56 pm on 8 May, 2023"``."""
    return datetime.strptime(raw.strip(), DATE_TIME_FORMAT)


def load_locomo(path: str | Path, *, turn_offset_seconds: float = 60.0,
                name: str | None = None) -> Dataset:
    """Load a dataset file in the official LoCoMo release format.

    Args:
        path: the JSON file.
        turn_offset_seconds: seconds added per turn index to the session time, so turns keep their
            order in time (SPEC §1.1 leaves the offset open; any small value works).
        name: dataset name recorded in results (default: the file stem).
    """
    path = Path(path)
    raw_bytes = path.read_bytes()
    try:
        text = raw_bytes.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw_bytes[:err.start].count(b"\n") + 1
        raise DataFormatError(str(path), "file", f"byte {err.start} (line {line})",
                              f"not UTF-8 ({err.reason}: {raw_bytes[err.start:err.end]!r}); "
                              "the LoCoMo release is UTF-8 JSON") from err
    try:
        samples = json.loads(text)
    except json.JSONDecodeError as err:
        raise DataFormatError(str(path), "file", f"line {err.lineno} column {err.colno}",
                              f"invalid JSON ({err.msg})") from err
    if not isinstance(samples, list):
        raise DataFormatError(str(path), "file", "<top level>",
                              f"expected a list of samples, got {type(samples).__name__}")
    require_text(str(path), text, samples, lambda where: _sample_record(samples, where))
    if not samples:
        raise DataFormatError(str(path), "file", "<top level>",
                              "the list of samples is empty: no conversation to evaluate")
    offset = timedelta(seconds=turn_offset_seconds)
    conversations = [_parse_sample(str(path), i, s, offset) for i, s in enumerate(samples)]
    seen: set[str] = set()
    for i, conv in enumerate(conversations):
        if conv.sample_id in seen:
            raise DataFormatError(str(path), f"sample {i}", "sample_id",
                                  f"duplicate sample_id {conv.sample_id!r}")
        seen.add(conv.sample_id)
    dataset = Dataset(conversations, str(path), name or path.stem,
                      hashlib.sha256(raw_bytes).hexdigest(),
                      content_sha256=content_sha256(samples),
                      field_sha256={c.sample_id: {k: content_sha256(v) for k, v in s.items()}
                                    for c, s in zip(conversations, samples, strict=True)},
                      source_order=[c.sample_id for c in conversations],
                      source_questions={c.sample_id: len(c.questions) for c in conversations},
                      content_notes=unresolved_note)
    for msg in unresolved_note(dataset):
        # the upstream release's own quirks (SPEC §3) are known: said, not warned about
        upstream = any(dataset.content_sha256 == (m or {}).get("content_sha256")
                       for m in (upstream_manifest(n) for n in KNOWN_RELEASES))
        log.log(logging.INFO if upstream else logging.WARNING, msg)
    return dataset.with_content_notes()


def _sample_record(samples: list[Any], where: list[str | int]) -> tuple[str, list[str | int]]:
    """``("sample <i> (<sample_id>)", the field's path in it)`` of a JSON path of the file."""
    if not where or not isinstance(where[0], int):
        return "file", where
    sample = samples[where[0]]
    sample_id = sample.get("sample_id") if isinstance(sample, dict) else None
    shown = isinstance(sample_id, (str, int)) and str(sample_id).isprintable()  # no surrogate
    return f"sample {where[0]}" + (f" ({sample_id})" if shown else ""), where[1:]


def unresolved_note(dataset: Dataset) -> list[str]:
    """The note on the evidence ids of ``dataset``'s questions that resolve to no turn (none
    when every one does): a function of the questions held, so a subset's note counts its own."""
    unresolved = dataset.unresolved_evidence()
    if not unresolved:
        return []
    shown = ", ".join(f"{s}/{i}:{p!r}" for s, i, p in unresolved[:8])
    more = "" if len(unresolved) <= 8 else f", ... ({len(unresolved) - 8} more)"
    return [f"{dataset.path}: {len(unresolved)} evidence id(s) could not be resolved to a turn "
            f"and are kept in Question.evidence_unresolved: {shown}{more}"]


def _require(path: str, record: str, obj: dict[str, Any], key: str, kind: type | tuple[type, ...],
             prefix: str = "") -> Any:
    if not isinstance(obj, dict):
        raise DataFormatError(path, record, prefix.rstrip(".") or "<record>",
                              f"expected an object, got {type(obj).__name__}")
    if key not in obj:
        raise DataFormatError(path, record, prefix + key, "missing")
    value = obj[key]
    if not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise DataFormatError(path, record, prefix + key,
                              f"expected {names}, got {type(value).__name__} ({value!r:.60})")
    return value


def _parse_sample(path: str, index: int, sample: Any, offset: timedelta) -> Conversation:
    record = f"sample {index}"
    if not isinstance(sample, dict):
        raise DataFormatError(path, record, "<sample>",
                              f"expected an object, got {type(sample).__name__}")
    sample_id = str(_require(path, record, sample, "sample_id", (str, int)))
    record = f"sample {index} ({sample_id})"
    conv = _require(path, record, sample, "conversation", dict)
    speaker_a = _require(path, record, conv, "speaker_a", str, "conversation.")
    speaker_b = _require(path, record, conv, "speaker_b", str, "conversation.")

    session_numbers = sorted(int(m.group(1)) for k in conv if (m := _SESSION_KEY.fullmatch(k)))
    if not session_numbers:
        raise DataFormatError(path, record, "conversation", "no session_<n> lists")
    sessions: list[Session] = []
    seen: dict[str, str] = {}  # dia_id -> where it first appeared
    for n in session_numbers:
        dt_key = f"session_{n}_date_time"
        dt_raw = _require(path, record, conv, dt_key, str, "conversation.")
        try:
            date_time = parse_date_time(dt_raw)
        except ValueError as err:
            raise DataFormatError(path, record, f"conversation.{dt_key}",
                                  f"bad date {dt_raw!r} (expected e.g. '1:56 pm on 8 May, 2023')"
                                  ) from err
        raw_turns = _require(path, record, conv, f"session_{n}", list, "conversation.")
        turns = []
        for j, t in enumerate(raw_turns):
            prefix = f"conversation.session_{n}[{j}]."
            speaker = _require(path, record, t, "speaker", str, prefix)
            dia_id = _require(path, record, t, "dia_id", str, prefix)
            if dia_id in seen:  # evidence and retrieved ids name turns by dia_id: it must be unique
                raise DataFormatError(path, record, prefix + "dia_id",
                                      f"repeated dia_id {dia_id!r} (first at {seen[dia_id]})")
            seen[dia_id] = prefix.rstrip(".")
            text = _require(path, record, t, "text", str, prefix)
            caption = t.get("blip_caption")
            if caption is not None and not isinstance(caption, str):
                raise DataFormatError(path, record, prefix + "blip_caption",
                                      f"expected str, got {type(caption).__name__}")
            urls = t.get("img_url") or ()
            turns.append(Turn(sample_id, dia_id, speaker, text, n, j, date_time + j * offset,
                              caption, tuple(urls) if isinstance(urls, list) else (str(urls),)))
        sessions.append(Session(n, date_time, dt_raw, tuple(turns)))

    known_ids = {t.dia_id for s in sessions for t in s.turns}
    raw_qa = _require(path, record, sample, "qa", list)
    questions = [_parse_question(path, record, sample_id, k, q, known_ids)
                 for k, q in enumerate(raw_qa)]
    return Conversation(sample_id, speaker_a, speaker_b, tuple(sessions), tuple(questions))


def _parse_question(path: str, record: str, sample_id: str, k: int, q: Any,
                    known_ids: set[str]) -> Question:
    prefix = f"qa[{k}]."
    question = _require(path, record, q, "question", str, prefix)
    category = _require(path, record, q, "category", int, prefix)
    if isinstance(category, bool) or category < 1:
        raise DataFormatError(path, record, prefix + "category", f"bad category {category!r}")
    evidence_raw = _require(path, record, q, "evidence", list, prefix)
    answer = q.get("answer")
    if answer is not None:
        if not isinstance(answer, (str, int, float)) or isinstance(answer, bool):
            raise DataFormatError(path, record, prefix + "answer",
                                  f"expected str or number, got {type(answer).__name__}")
        answer = str(answer)
    adversarial = q.get("adversarial_answer")
    if answer is None and adversarial is None:
        raise DataFormatError(path, record, prefix + "answer",
                              "missing (neither 'answer' nor 'adversarial_answer' is present)")
    resolved, unresolved = parse_evidence([str(e) for e in evidence_raw], known_ids)
    return Question(sample_id, k, question, answer, category, tuple(resolved),
                    tuple(str(e) for e in evidence_raw), tuple(unresolved),
                    None if adversarial is None else str(adversarial))


#: LoCoMo-10 (``dataset.format=locomo``): one file, downloaded when missing, with the shipped
#: sample conversation in its format and the LoCoMo audit's corrected gold
BENCHMARK = Benchmark(load_locomo, OFFICIAL, filename=LOCOMO_FILENAME, sample=sample_path(),
                      audit=find_audit)
