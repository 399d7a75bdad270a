r"""The audited gold: an independent audit's corrections of LoCoMo-10, as a second gold (SPEC §3).

The LoCoMo audit (github dial481/locomo-audit, ``errors.json``) lists 156 flawed questions of
categories 1-4 by ``question_id`` ``locomo_<index of the conversation in the file>_qa<index in its
qa list>``: 57 wrong citations and 99 wrong gold answers (hallucinated, temporal, attribution,
ambiguous, incomplete), each with ``correct_evidence`` and ``correct_answer``. The official gold
stays the default; ``dataset.gold=audited`` scores against the audit's, ``both`` against each.

Some ``correct_answer`` texts carry the auditor's commentary ("2022 (but the book title ... is
fabricated ...)", "Uncertain; ..."). The audited gold of an entry is decided by a written rule,
the same for every entry, so it can be checked (every entry and what the rule made of it:
experiments/audited_gold.md):

* **Evidence** (every error type): ``correct_evidence``, resolved to the conversation's turns as
  the loader resolves the release's ids.
* **Unanswerable as asked** (any error type): the audit says the conversation holds no answer to
  the question *as asked*: its correct answer begins with a refusal (:data:`REFUSAL`: "Cannot be
  determined", "Unknown", "Uncertain", "Unclear", "Contradictory evidence", "The transcript /
  evidence does not", "There is no"), or denies the question's premise (:data:`PREMISE`: the
  statement or event belongs to another person, "not Melanie's", "(not Tim)", "happened to Evan";
  another date than the question's, "not October", "as stated in the question"; a fabricated
  title; "did not"), or says the asked detail is not described (:data:`UNDESCRIBED`). These are
  reported apart, never scored as if answerable.
* **The answer** (the others): the answering part of ``correct_answer``: parentheticals of
  commentary removed (:data:`COMMENTARY`: dia-id citations, "but ...", "answer is correct",
  "per ...", "from D...", the transcript or the evidence named), then anything after a ``"; "``
  or after the first sentence that comments on the evidence rather than answers. Where the
  audit's correct answer is the golden answer, or says the golden answer is correct and only the
  citation is wrong, the official answer stays as it is.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from synapse_pt.common.errors import ConfigError
from synapse_pt.data.schema import Dataset, Question

from .errors import DataFormatError
from .evidence import parse_evidence
from .source import DatasetFile, resolve_dataset_path, sha256_file
from .text import require_text

log = logging.getLogger(__name__)

__all__ = ["AUDIT_FILENAME", "AUDIT_SHA256", "AUDIT_URL", "ANSWERABLE", "UNANSWERABLE",
           "AuditedGold", "GoldAudit", "answering_part", "find_audit", "load_audit",
           "unanswerable_reason"]

#: which gold a run scores against (``dataset.gold``): the release's, the audit's, or both
GOLDS = ("official", "audited", "both")
AUDIT_FILENAME = "locomo_audit_errors.json"
AUDIT_URL = "https://raw.githubusercontent.com/dial481/locomo-audit/main/errors.json"
AUDIT_SHA256 = "f298ef46263fada20688a1d672be37d4f488c6da3b19343eea55ae5c1b5fe55e"
ERROR_TYPES = ("WRONG_CITATION", "HALLUCINATION", "TEMPORAL_ERROR", "ATTRIBUTION_ERROR",
               "AMBIGUOUS", "INCOMPLETE")
ANSWERABLE, UNANSWERABLE = "answerable", "unanswerable_as_asked"

_MONTHS = ("January|February|March|April|May|June|July|August|September|October|November|"
           "December|spring|summer|autumn|fall|winter")
#: a correct answer that begins so says the conversation holds no answer
REFUSAL = re.compile(r"^(?:cannot be|unknown|uncertain|unclear|contradictory evidence|"
                     r"the transcript does not|the evidence does not|there is no)\b", re.I)
#: a correct answer that says so denies the question's premise (person, date or title)
PREMISE = re.compile(
    r"as stated in the question|as the question states|question says|question should|"
    r"should ask about|,\s*not (?:by )?[A-Z]|\(not [A-Z]|\bnot (?:in |on )?(?:" + _MONTHS + r")\b|"
    r"\bhappened to\b|\bdid not\b|attribution is reversed|\bfabricated\b|^this is \w+'s statement")
#: the asked detail is not in the conversation
UNDESCRIBED = re.compile(r"\bunspecified\b|evidence does not describe", re.I)
#: a parenthetical that comments rather than answers
COMMENTARY = re.compile(r"D\d+:\d+|^(?:but|answer is|correct answer|as stated|per|from|the "
                        r"specific|exact date|defensible)\b|\bsays\b|transcript|evidence|"
                        r"not confirmed|aspirational", re.I)
#: a tail (after "; " or a sentence end) that comments on the evidence
COMMENT_TAIL = re.compile(r"evidence|cited|transcript|golden|unresolvable|never named|"
                          r"cannot be determined|not stated|\bnot on\b", re.I)
_GOLD_CORRECT = re.compile(r"^the golden answer is (?:factually )?correct", re.I)
_QUESTION_ID = re.compile(r"locomo_(\d+)_qa(\d+)")


def unanswerable_reason(correct_answer: str) -> str | None:
    """Why the audit's correct answer makes the question unanswerable as asked, or ``None``."""
    text = correct_answer.strip()
    if REFUSAL.search(text):
        return "refusal"
    if PREMISE.search(text):
        return "premise"
    if UNDESCRIBED.search(text):
        return "undescribed"
    return None


def _drop_commentary(text: str) -> str:
    out, depth, start = [], 0, 0
    pieces: list[tuple[str, bool]] = []  # (text, is a top-level parenthetical)
    for i, ch in enumerate(text):
        if ch == "(":
            if depth == 0:
                pieces.append((text[start:i], False))
                start = i
            depth += 1
        elif ch == ")" and depth:
            depth -= 1
            if depth == 0:
                pieces.append((text[start:i + 1], True))
                start = i + 1
    pieces.append((text[start:], depth > 0))
    for piece, paren in pieces:
        if paren and COMMENTARY.search(piece[1:-1]):
            continue
        out.append(piece)
    return re.sub(r"\s+([,.;:])", r"\1", re.sub(r"\s{2,}", " ", "".join(out))).strip()


def answering_part(correct_answer: str) -> str | None:
    """The answer in the audit's ``correct_answer`` (the module's rule); ``None`` where the
    audit says the golden answer is correct (the official answer stays)."""
    text = correct_answer.strip()
    if _GOLD_CORRECT.search(text):
        return None
    text = _drop_commentary(text)
    head, sep, tail = text.partition("; ")
    if sep and COMMENT_TAIL.search(tail):
        text = head
    sentences = re.split(r"(?<=[.!?])\s+(?=[A-Z])", text)
    if len(sentences) > 1 and all(COMMENT_TAIL.search(s) for s in sentences[1:]):
        text = sentences[0]
    return text.strip().rstrip(".").strip()


@dataclass(frozen=True)
class AuditedGold:
    """One audited question: its key, what the audit flags, and the gold the rule derives."""

    key: str
    question_id: str
    error_type: str
    status: str  # ANSWERABLE or UNANSWERABLE
    reason: str | None  # why unanswerable (refusal, premise, undescribed)
    evidence: tuple[str, ...]
    evidence_raw: tuple[str, ...]
    evidence_unresolved: tuple[str, ...]
    answer: str | None  # the audited answer (None where unanswerable)
    official_answer: str | None
    correct_answer: str


@dataclass
class GoldAudit:
    """The audit applied to one dataset: an :class:`AuditedGold` per listed question of it."""

    path: str
    sha256: str
    entries: dict[str, AuditedGold]  # by Question.key
    outside: int  # listed questions not in this (subset of the) dataset

    def questions(self, questions: Sequence[Question]) -> list[Question]:
        """``questions`` under the audited gold: the listed ones take the audited evidence and
        answer (an unanswerable one keeps its official answer; scorers leave it out)."""
        out = []
        for q in questions:
            e = self.entries.get(q.key)
            if e is None:
                out.append(q)
                continue
            out.append(replace(q, evidence=e.evidence, evidence_raw=e.evidence_raw,
                               evidence_unresolved=e.evidence_unresolved,
                               answer=e.answer if e.answer is not None else q.answer))
        return out

    def status(self, question: Question) -> str:
        """``official`` (not listed), ``answerable`` or ``unanswerable_as_asked``."""
        e = self.entries.get(question.key)
        return "official" if e is None else e.status

    def describe(self) -> dict[str, object]:
        """What a run records of the audit it was scored with."""
        statuses = [e.status for e in self.entries.values()]
        return {"path": self.path, "sha256": self.sha256, "entries": len(self.entries),
                "unanswerable_as_asked": statuses.count(UNANSWERABLE),
                "outside_subset": self.outside}


def _entry(path: str, i: int, raw: object) -> Mapping[str, object]:
    if not isinstance(raw, dict):
        raise DataFormatError(path, f"entry {i}", "<entry>",
                              f"expected an object, got {type(raw).__name__}")
    for key, kind in (("question_id", str), ("question", str), ("category", int),
                      ("error_type", str), ("correct_evidence", list),
                      ("correct_answer", (str, int, float))):
        if key not in raw:
            raise DataFormatError(path, f"entry {i}", key, "missing")
        if not isinstance(raw[key], kind) or isinstance(raw[key], bool):
            raise DataFormatError(path, f"entry {i}", key,
                                  f"unexpected type {type(raw[key]).__name__}")
    if raw["error_type"] not in ERROR_TYPES:
        raise DataFormatError(path, f"entry {i} ({raw['question_id']})", "error_type",
                              f"{raw['error_type']!r} is none of {list(ERROR_TYPES)}")
    return raw


def load_audit(path: str | Path, dataset: Dataset, sha256: str) -> GoldAudit:
    """Read the audit file at ``path`` and derive the audited gold of ``dataset``'s questions.

    ``question_id``s count conversations in the file's order (``dataset.source_order``), so they
    resolve in a subset too; an id that names no conversation or question of the file, or whose
    question text is not the dataset's, is an error naming it."""
    path = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
        raw = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise DataFormatError(path, "file", "<top level>", f"not UTF-8 JSON ({err})") from err
    require_text(path, text, raw, lambda where: (f"entry {where[0]}", where[1:]) if where
                 and isinstance(where[0], int) else ("file", where))
    if not isinstance(raw, list):
        raise DataFormatError(path, "file", "<top level>",
                              f"expected a list of entries, got {type(raw).__name__}")
    order = dataset.source_order or [c.sample_id for c in dataset]
    loaded = {c.sample_id: c for c in dataset}
    entries: dict[str, AuditedGold] = {}
    outside = 0
    for i, item in enumerate(raw):
        e = _entry(path, i, item)
        qid = str(e["question_id"])
        record = f"entry {i} ({qid})"
        m = _QUESTION_ID.fullmatch(qid)
        if m is None or int(m.group(1)) >= len(order):
            raise DataFormatError(path, record, "question_id",
                                  f"{qid!r} names no conversation of {dataset.path} "
                                  f"({len(order)} conversations; ids are locomo_<i>_qa<j>)")
        sample_id, qa_index = order[int(m.group(1))], int(m.group(2))
        size = dataset.source_questions.get(sample_id)
        if size is not None and qa_index >= size:
            raise DataFormatError(path, record, "question_id",
                                  f"{qid!r}: {sample_id} has {size} questions in "
                                  f"{dataset.path}")
        conv = loaded.get(sample_id)
        question = next((q for q in conv.questions if q.qa_index == qa_index), None) if conv \
            else None
        if question is None:
            outside += 1  # a conversation or question the subset leaves out
            continue
        if question.question.strip() != str(e["question"]).strip():
            raise DataFormatError(path, record, "question",
                                  f"{e['question']!r} is not {sample_id} qa {qa_index} of "
                                  f"{dataset.path} ({question.question!r})")
        known = {t.dia_id for t in conv.turns()}
        raw_evidence = tuple(str(x) for x in e["correct_evidence"])
        resolved, unresolved = parse_evidence(raw_evidence, known)
        correct = str(e["correct_answer"])
        reason = unanswerable_reason(correct)
        if reason:
            answer = None
        elif correct.strip() == (question.answer or "").strip():
            answer = question.answer  # the audit confirms the answer: the official text stays
        else:
            answer = answering_part(correct) or question.answer
        entries[question.key] = AuditedGold(
            question.key, qid, str(e["error_type"]), UNANSWERABLE if reason else ANSWERABLE,
            reason, tuple(resolved), raw_evidence, tuple(unresolved), answer, question.answer,
            correct)
    return GoldAudit(path, sha256, entries, outside)


def find_audit(cfg: Mapping[str, Any], dataset: Dataset) -> GoldAudit:
    """LoCoMo-10's audited gold (its declared ``audit``): the errata file found as the data file
    is (``dataset.audit``: an explicit path, ``$SYNAPSE_AUDIT``, beside the checkout, the cache,
    a download) and loaded. The audit corrects the upstream release: another file is an error, as
    is an audit entry that does not resolve (:func:`load_audit`)."""
    gold = cfg.get("gold")
    if dataset.upstream not in ("identical", "same_content"):
        raise ConfigError(f"dataset.gold={gold}: the audit corrects the upstream LoCoMo-10 "
                          f"release, and {dataset.path} is not it (upstream check: "
                          f"{dataset.upstream}); use dataset.gold=official")
    a = cfg.get("audit") or {}
    file = DatasetFile(filename=AUDIT_FILENAME, url=a.get("url"),
                       expected_sha256=a.get("sha256", AUDIT_SHA256), env_var="SYNAPSE_AUDIT",
                       key="dataset.audit.path")
    source = resolve_dataset_path(a.get("path"), candidates=a.get("candidates") or (),
                                  cache_dir=a.get("cache_dir"),
                                  allow_download=bool(cfg.get("allow_download", True)), file=file)
    digest = sha256_file(source.path)
    expected = a.get("sha256", AUDIT_SHA256)
    if expected and digest != expected:
        log.warning("%s: sha256 %s is not the audit file's %s (recorded in the run's identity)",
                    source.path, digest, expected)
    audit = load_audit(source.path, dataset, digest)
    log.info("audited gold: %s (%d of its entries in this dataset, %d unanswerable as asked)",
             source.path, len(audit.entries), audit.describe()["unanswerable_as_asked"])
    return audit
