"""Loader for BEAM (Tavakoli et al., arXiv 2510.27246): user-assistant conversations of ~100K and
~500K tokens with probing questions over ten memory abilities.

A scale folder (``100K/`` or ``500K/`` of github mohammadtavakoli78/BEAM ``chats/``) holds one
folder per conversation: ``chat.json`` (batches of turns of messages with ``role``, a global int
``id``, ``content``; the batch's first message carries ``time_anchor``, ``"March-15-2024"``),
``chat_trunecated.json`` where upstream has one (its spelling; a prefix of the chat that upstream's
answer generation reads whenever it exists) and ``probing_questions/probing_questions.json`` (two
questions for each of ten abilities, each with a gold field that depends on the ability, a
``rubric`` and, for every ability but abstention, ``source_chat_ids``). The records are LoCoMo's:

* a conversation's sessions are its batches, each dated by its ``time_anchor`` (turns follow in
  order, ``turn_offset_seconds`` apart); a turn is a message, its speaker the role (``user`` or
  ``assistant``: both are stored, assistant text is 93 % of BEAM), its id ``M<id>``;
* the truncated chat is read where it exists, as upstream's evaluation does (the notes say which);
* a question's category is its ability (:data:`BEAM_ABILITIES`: 1 abstention, the unanswerable
  class whose right answer is a refusal, 2-10 the answerable ones), its answer the ability's gold
  field (``answer``, ``ideal_answer``, ``ideal_response``, ``ideal_summary`` or
  ``expected_compliance``), its rubric kept for the rubric judge, its evidence the messages of
  ``source_chat_ids`` however nested (a list, nested lists, or a dict of lists); a question without
  them has no evidence: retrieval metrics leave it out, never score it as a miss.
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

from synapse_pt.data.schema import Conversation, Dataset, Question, Session, Turn

from .benchmark import Benchmark
from .categories import BEAM as BEAM_ABILITIES
from .errors import DataFormatError
from .text import require_text

__all__ = ["BEAM_ABILITIES", "GOLD_FIELDS", "load_beam"]

GOLD_FIELDS = ("answer", "ideal_answer", "ideal_response", "ideal_summary", "expected_compliance")
TIME_ANCHOR = "%B-%d-%Y"
CHAT, TRUNCATED = "chat.json", "chat_trunecated.json"
QUESTIONS = "probing_questions/probing_questions.json"


def _ids(value: Any) -> list[int]:
    """The message ids of a ``source_chat_ids`` value, flattened in order."""
    if value is None:
        return []
    if isinstance(value, bool):
        raise TypeError("a boolean is not a message id")
    if isinstance(value, int):
        return [value]
    if isinstance(value, list):
        return [i for v in value for i in _ids(v)]
    if isinstance(value, dict):
        return [i for v in value.values() for i in _ids(v)]
    raise TypeError(f"{type(value).__name__} is not a message id")


def _read(path: Path) -> tuple[Any, bytes]:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise DataFormatError(str(path), "file", "<top level>",
                              f"missing (every BEAM conversation folder holds {CHAT} and "
                              f"{QUESTIONS})") from None
    try:
        text = raw.decode("utf-8")
        value = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise DataFormatError(str(path), "file", "<top level>", f"not UTF-8 JSON ({err})") from err
    require_text(str(path), text, value)
    return value, raw


def _conversation(folder: Path, sample_id: str, offset: timedelta, hashes: dict[str, str],
                  root: Path) -> tuple[Conversation, bool]:
    truncated = (folder / TRUNCATED).is_file()
    chat_path = folder / (TRUNCATED if truncated else CHAT)
    batches, raw = _read(chat_path)
    hashes[str(chat_path.relative_to(root))] = hashlib.sha256(raw).hexdigest()
    name = str(chat_path)
    if not isinstance(batches, list) or not batches:
        raise DataFormatError(name, sample_id, "<top level>",
                              "expected a non-empty list of batches")
    sessions, seen = [], set()
    date: datetime | None = None
    for b, batch in enumerate(batches):
        record = f"{sample_id} batch {b}"
        if not isinstance(batch, dict) or not isinstance(batch.get("turns"), list):
            raise DataFormatError(name, record, "turns", "missing or not a list")
        messages = [m for turn in batch["turns"] for m in (turn if isinstance(turn, list) else [])]
        if not messages:
            raise DataFormatError(name, record, "turns", "no messages")
        anchor = messages[0].get("time_anchor")
        if anchor is not None:
            try:
                date = datetime.strptime(str(anchor), TIME_ANCHOR)
            except ValueError as err:
                raise DataFormatError(name, record, "turns[0][0].time_anchor",
                                      f"bad date {anchor!r} (expected e.g. 'March-15-2024')"
                                      ) from err
        if date is None:
            raise DataFormatError(name, record, "turns[0][0].time_anchor",
                                  "missing: the first batch has no date")
        turns = []
        for j, msg in enumerate(messages):
            where = f"{record} message {j}"
            if not isinstance(msg, dict):
                raise DataFormatError(name, where, "<message>", "not an object")
            for key, kind in (("id", int), ("role", str), ("content", str)):
                if not isinstance(msg.get(key), kind) or isinstance(msg.get(key), bool):
                    raise DataFormatError(name, where, key, f"missing or not {kind.__name__}")
            if msg["id"] in seen:
                raise DataFormatError(name, where, "id", f"repeated message id {msg['id']}")
            seen.add(msg["id"])
            turns.append(Turn(sample_id, f"M{msg['id']}", msg["role"], msg["content"],
                              int(batch.get("batch_number") or b + 1), j, date + j * offset))
        sessions.append(Session(int(batch.get("batch_number") or b + 1), date,
                                str(anchor or date.strftime(TIME_ANCHOR)), tuple(turns)))
    probing, raw = _read(folder / QUESTIONS)
    hashes[str((folder / QUESTIONS).relative_to(root))] = hashlib.sha256(raw).hexdigest()
    name = str(folder / QUESTIONS)
    if not isinstance(probing, dict):
        raise DataFormatError(name, sample_id, "<top level>", "expected {ability: [questions]}")
    number = {v: k for k, v in BEAM_ABILITIES.items()}
    unknown = sorted(set(probing) - set(number))
    if unknown:
        raise DataFormatError(name, sample_id, "<top level>", f"unknown abilities {unknown}")
    questions = []
    for ability in BEAM_ABILITIES.values():
        for i, q in enumerate(probing.get(ability, [])):
            record = f"{sample_id} {ability}[{i}]"
            if not isinstance(q, dict) or not isinstance(q.get("question"), str):
                raise DataFormatError(name, record, "question", "missing or not a string")
            gold = next((q[f] for f in GOLD_FIELDS if q.get(f) is not None), None)
            if gold is None:
                raise DataFormatError(name, record, "/".join(GOLD_FIELDS), "no gold answer")
            rubric = q.get("rubric") or []
            if not isinstance(rubric, list) or not all(isinstance(r, str) for r in rubric):
                raise DataFormatError(name, record, "rubric", "expected a list of strings")
            try:
                ids = _ids(q.get("source_chat_ids"))
            except TypeError as err:
                raise DataFormatError(name, record, "source_chat_ids", str(err)) from err
            raw_ids = [f"M{i}" for i in ids]
            evidence = [e for e in dict.fromkeys(raw_ids) if int(e[1:]) in seen]
            unresolved = [e for e in dict.fromkeys(raw_ids) if int(e[1:]) not in seen]
            questions.append(Question(sample_id, len(questions), q["question"],
                                      gold if isinstance(gold, str) else json.dumps(gold),
                                      number[ability], tuple(evidence), tuple(raw_ids),
                                      tuple(unresolved), rubric=tuple(rubric)))
    return Conversation(sample_id, "user", "assistant", tuple(sessions), tuple(questions)), \
        truncated


def load_beam(folder: str | Path, *, name: str | None = None,
              turn_offset_seconds: float = 60.0) -> Dataset:
    """Every conversation of a BEAM scale folder (``.../beam/100K``), in numeric order."""
    folder = Path(folder)
    dirs = sorted((p for p in folder.iterdir() if p.is_dir() and re.fullmatch(r"\d+", p.name)),
                  key=lambda p: int(p.name)) if folder.is_dir() else []
    if not dirs:
        raise DataFormatError(str(folder), "folder", "<n>/chat.json", "no BEAM conversation")
    scale = folder.name.lower()
    name = name or f"beam_{scale}"
    hashes: dict[str, str] = {}
    root = folder.parent
    offset = timedelta(seconds=turn_offset_seconds)
    loaded = [_conversation(d, f"beam{scale}-{d.name}", offset, hashes, root) for d in dirs]
    conversations = [c for c, _ in loaded]
    listing = "".join(f"{h}  {n}\n" for n, h in sorted(hashes.items()))
    dataset = Dataset(conversations, str(folder), name,
                      hashlib.sha256(listing.encode()).hexdigest(),
                      source_order=[c.sample_id for c in conversations],
                      source_questions={c.sample_id: len(c.questions) for c in conversations},
                      answerable=tuple(k for k in BEAM_ABILITIES if k != 1), unanswerable=1,
                      f1_rules={k: ("refusal" if k == 1 else "plain") for k in BEAM_ABILITIES},
                      id_convention="messages", file_sha256=hashes,
                      content_notes=partial(_notes, truncated=frozenset(
                          c.sample_id for c, t in loaded if t)))
    return dataset.with_content_notes()


#: BEAM (``dataset.format=beam``): a scale folder of conversation folders
BENCHMARK = Benchmark(load_beam, BEAM_ABILITIES, folder=True)


def _notes(dataset: Dataset, truncated: frozenset[str]) -> list[str]:
    """The notes on the conversations and questions ``dataset`` holds: which of them were read
    from the truncated chat (of ``truncated``, every one that was), and the questions without
    evidence."""
    notes = []
    held = [c.sample_id for c in dataset if c.sample_id in truncated]
    if held:
        notes.append(f"{dataset.path}: {TRUNCATED} read for {len(held)} conversations "
                     f"({', '.join(held)}), as upstream's evaluation reads it")
    no_evidence = [q.key for q in dataset.questions() if not q.evidence]
    if no_evidence:
        notes.append(f"{len(no_evidence)} question(s) carry no evidence (left out of retrieval "
                     f"metrics): {', '.join(no_evidence[:12])}"
                     + (" ..." if len(no_evidence) > 12 else ""))
    return notes
