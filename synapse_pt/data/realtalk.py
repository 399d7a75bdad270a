"""Loader for REALTALK (Lee et al., arXiv 2502.13270): LoCoMo's real-world follow-up by its authors.

A folder of ``Chat_<k>_<A>_<B>.json`` files, one conversation each (github danny911kr/REALTALK
``data/``): ``name`` (``speaker_1``, ``speaker_2``), ``session_<n>`` (messages with ``clean_text``,
``speaker``, ``date_time`` ``"29.12.2023, 22:42:04"``, ``dia_id``, and ``blip_caption`` on image
messages), ``session_<n>_date_time``, placeholder ``events_session_<n>`` (ignored) and ``qa``
(``question``, ``answer``, ``evidence``, ``category`` 1-3). The records are the ones LoCoMo's
loader produces, so every memory and scorer reads them unchanged; what differs:

* a turn's timestamp is its own message time (sessions last hours to days), ties broken by order;
* ``dia_id`` is kept verbatim: its ``D<a>`` prefix is *not* the session (five files split a day
  block over several sessions) and its numbers have gaps (dropped photo messages);
* evidence strings are messier than LoCoMo's: ``"D1:11; D3:18"``, ``"D12:3-D12:5"`` (a range),
  ``"D20:17."``, ``"D13:45:D20:19"``; :func:`parse_realtalk_evidence` reads them, and every piece
  that names no message of the conversation is kept as unresolved, never dropped silently;
* categories 1 multi-hop, 2 temporal, 3 open-domain (LoCoMo's numbering and scorer routing; no
  unanswerable category).
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from synapse_pt.data.schema import Conversation, Dataset, Question, Session, Turn

from .benchmark import Benchmark
from .categories import REALTALK as REALTALK_CATEGORIES
from .errors import DataFormatError
from .evidence import canonical_dia_id
from .text import require_text

__all__ = ["REALTALK_CATEGORIES", "load_realtalk", "parse_realtalk_evidence"]

MESSAGE_TIME = "%d.%m.%Y, %H:%M:%S"
_SESSION = re.compile(r"session_(\d+)")
_PIECES = re.compile(r"[;,]+|\.\s+|\s+|(?<=\d):(?=D)")
_RANGE = re.compile(r"D(\d+):(\d+)-D(\d+):(\d+)")


def parse_realtalk_evidence(raw: list[str], known: list[str]) -> tuple[list[str], list[str]]:
    """``(resolved, unresolved)`` evidence of one question: strings split on ``;``, ``,``,
    ``". "``, white space and ``":D"``; a trailing period dropped; a same-prefix range
    ``Dk:i-Dk:j`` expanded to the conversation's messages between them. ``known``: the
    conversation's dia_ids in order."""
    known_set = set(known)
    order = {d: i for i, d in enumerate(known)}
    resolved: list[str] = []
    unresolved: list[str] = []
    for entry in raw:
        text = str(entry).strip()
        if not text:
            unresolved.append(text)
            continue
        for piece in (p.strip().rstrip(".") for p in _PIECES.split(text) if p and p.strip()):
            m = _RANGE.fullmatch(piece)
            if m and m.group(1) == m.group(3):
                lo, hi = (canonical_dia_id(f"D{m.group(1)}:{m.group(k)}") for k in (2, 4))
                if lo in known_set and hi in known_set:
                    ids = known[order[lo]:order[hi] + 1]
                    resolved.extend(d for d in ids if d not in resolved)
                    continue
            dia_id = canonical_dia_id(piece)
            if dia_id is None or dia_id not in known_set:
                unresolved.append(piece)
            elif dia_id not in resolved:
                resolved.append(dia_id)
    return resolved, unresolved


def _require(path: str, record: str, obj: Any, key: str, kind: type | tuple[type, ...]) -> Any:
    if not isinstance(obj, dict) or key not in obj:
        raise DataFormatError(path, record, key, "missing")
    if not isinstance(obj[key], kind) or isinstance(obj[key], bool):
        raise DataFormatError(path, record, key,
                              f"unexpected type {type(obj[key]).__name__} ({obj[key]!r:.60})")
    return obj[key]


def _conversation(path: Path) -> tuple[Conversation, bytes]:
    raw = path.read_bytes()
    name = str(path)
    try:
        text = raw.decode("utf-8")
        data = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise DataFormatError(name, "file", "<top level>", f"not UTF-8 JSON ({err})") from err
    sample_id = path.stem
    require_text(name, text, data, lambda where: (sample_id, where))
    names = _require(name, sample_id, data, "name", dict)
    speaker_a = str(_require(name, sample_id, names, "speaker_1", str))
    speaker_b = str(_require(name, sample_id, names, "speaker_2", str))
    numbers = sorted(int(m.group(1)) for k in data if (m := _SESSION.fullmatch(k)))
    if not numbers:
        raise DataFormatError(name, sample_id, "session_<n>", "no sessions")
    sessions, previous = [], None
    for n in numbers:
        messages = _require(name, sample_id, data, f"session_{n}", list)
        raw_date = str(_require(name, sample_id, data, f"session_{n}_date_time", str))
        turns = []
        for j, msg in enumerate(messages):
            record = f"{sample_id} session_{n}[{j}]"
            when_raw = _require(name, record, msg, "date_time", str)
            try:
                when = datetime.strptime(when_raw.strip(), MESSAGE_TIME)
            except ValueError as err:
                raise DataFormatError(name, record, "date_time",
                                      f"bad time {when_raw!r} (expected e.g. "
                                      "'29.12.2023, 22:42:04')") from err
            if previous is not None and when <= previous:  # equal times keep their order
                when = previous + timedelta(microseconds=1)
            previous = when
            caption = msg.get("blip_caption")
            turns.append(Turn(sample_id, str(_require(name, record, msg, "dia_id", str)),
                              str(_require(name, record, msg, "speaker", str)),
                              str(_require(name, record, msg, "clean_text", str)), n, j, when,
                              str(caption) if caption else None))
        try:
            date = datetime.strptime(raw_date.strip(), MESSAGE_TIME)
        except ValueError as err:
            raise DataFormatError(name, sample_id, f"session_{n}_date_time",
                                  f"bad time {raw_date!r}") from err
        sessions.append(Session(n, date, raw_date, tuple(turns)))
    known = [t.dia_id for s in sessions for t in s.turns]
    dupes = sorted({d for d in known if known.count(d) > 1})
    if dupes:
        raise DataFormatError(name, sample_id, "dia_id", f"repeated ids {dupes[:5]}")
    questions = []
    for k, qa in enumerate(_require(name, sample_id, data, "qa", list)):
        record = f"{sample_id} qa[{k}]"
        category = _require(name, record, qa, "category", int)
        if category not in REALTALK_CATEGORIES:
            raise DataFormatError(name, record, "category", f"{category!r} is none of "
                                  f"REALTALK's {sorted(REALTALK_CATEGORIES)}")
        evidence_raw = [str(e) for e in _require(name, record, qa, "evidence", list)]
        resolved, unresolved = parse_realtalk_evidence(evidence_raw, known)
        questions.append(Question(sample_id, k, str(_require(name, record, qa, "question", str)),
                                  str(_require(name, record, qa, "answer", (str, int, float))),
                                  category, tuple(resolved), tuple(evidence_raw),
                                  tuple(unresolved)))
    return Conversation(sample_id, speaker_a, speaker_b, tuple(sessions), tuple(questions)), raw


def load_realtalk(folder: str | Path, *, name: str = "realtalk",
                  turn_offset_seconds: float | None = None) -> Dataset:
    """Every ``Chat_*.json`` of ``folder``, in the order of their number ``k``
    (``turn_offset_seconds`` is not read: a message carries its own time)."""
    folder = Path(folder)
    files = sorted(folder.glob("Chat_*.json"),
                   key=lambda p: int(m.group(1)) if (m := re.match(r"Chat_(\d+)", p.name)) else 0)
    if not files:
        raise DataFormatError(str(folder), "folder", "Chat_*.json", "no REALTALK conversation")
    loaded = [_conversation(p) for p in files]
    hashes = {p.name: hashlib.sha256(raw).hexdigest() for p, (_, raw) in zip(files, loaded,
                                                                              strict=True)}
    listing = "".join(f"{h}  {n}\n" for n, h in sorted(hashes.items()))
    conversations = [c for c, _ in loaded]
    dataset = Dataset(conversations, str(folder), name,
                      hashlib.sha256(listing.encode()).hexdigest(),
                      source_order=[c.sample_id for c in conversations],
                      source_questions={c.sample_id: len(c.questions) for c in conversations},
                      answerable=(1, 2, 3), unanswerable=None, id_convention="messages",
                      file_sha256=hashes, content_notes=_notes)
    return dataset.with_content_notes()


#: REALTALK (``dataset.format=realtalk``): a folder of ``Chat_*.json`` files
BENCHMARK = Benchmark(load_realtalk, REALTALK_CATEGORIES, folder=True)


def _notes(dataset: Dataset) -> list[str]:
    """The note on the evidence pieces of ``dataset``'s questions that name no message (none when
    every one does), counted over the questions held."""
    unresolved = dataset.unresolved_evidence()
    if not unresolved:
        return []
    return [f"{dataset.path}: {len(unresolved)} evidence piece(s) name no message and are kept "
            "in Question.evidence_unresolved (REALTALK's own: ids of removed photo messages, "
            "malformed strings)"]
