"""Typed records for a LoCoMo-style dataset: conversation -> sessions -> turns, and questions."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from synapse_pt.common.errors import ConfigError


def question_set_id(keys: Iterable[str]) -> str:
    """Which questions a run is scored on: sha256 (first 16 hex digits) of the question keys
    (``"<sample_id>/<qa_index>"``, :attr:`Question.key`), sorted, one a line. Two runs with the
    same id asked the same questions, in whatever order."""
    blob = "\n".join(sorted(keys)).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def gold_set_id(golds: Iterable[tuple[str, int, str, str | None, str | None, Sequence[str]]]
                ) -> str:
    """What a run's questions are scored against: sha256 (first 16 hex digits) of each
    question's ``(key, category, question, answer, adversarial answer, evidence turn ids)``
    (:meth:`Question.gold`), as canonical JSON, sorted by key, one a line. Two runs over the same
    questions (:func:`question_set_id`) of an edited file differ here where its gold was edited;
    a run's ``predictions.parquet`` holds the same fields (``sample_id``, ``qa_index``,
    ``category``, ``question``, ``gold``, ``adversarial_answer``, ``evidence``)."""
    lines = sorted((g[0], json.dumps([g[0], int(g[1]), g[2], g[3], g[4], [str(e) for e in g[5]]],
                                     ensure_ascii=True, separators=(",", ":")))
                   for g in golds)
    return hashlib.sha256("\n".join(line for _, line in lines).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Turn:
    """One dialogue turn (an episodic node of the memory graph).

    ``timestamp`` is the session's ``date_time`` plus ``turn_index`` times the loader's per-turn
    offset, so turns inside a session keep their order (SPEC §1.1).
    """

    sample_id: str
    dia_id: str
    speaker: str
    text: str
    session_index: int
    turn_index: int
    timestamp: datetime
    blip_caption: str | None = None
    img_url: tuple[str, ...] = ()

    @property
    def content(self) -> str:
        """The text a memory stores for this turn: the utterance plus the image caption, if any."""
        if self.blip_caption:
            return f"{self.text} [shares an image: {self.blip_caption}]"
        return self.text


@dataclass(frozen=True)
class Session:
    index: int
    date_time: datetime
    date_time_raw: str
    turns: tuple[Turn, ...]


@dataclass(frozen=True)
class Question:
    """One QA item.

    ``answer`` is the gold answer as a string (integers in the release are converted, ``None`` for
    the adversarial items that only carry ``adversarial_answer``). ``evidence`` holds canonical
    ids of existing turns; ``evidence_raw`` the release's strings; ``evidence_unresolved`` every
    raw piece that could not be resolved.
    """

    sample_id: str
    qa_index: int
    question: str
    answer: str | None
    category: int
    evidence: tuple[str, ...]
    evidence_raw: tuple[str, ...]
    evidence_unresolved: tuple[str, ...] = ()
    adversarial_answer: str | None = None
    #: the benchmark's own grading criteria where it has them (BEAM: one item per criterion the
    #: answer should meet), read only by a rubric judge
    rubric: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """Stable identifier: ``"<sample_id>/<qa_index>"``."""
        return f"{self.sample_id}/{self.qa_index}"

    @property
    def gold(self) -> tuple[str, int, str, str | None, str | None, tuple[str, ...]]:
        """What this question is scored against (:func:`gold_set_id`)."""
        return (self.key, self.category, self.question, self.answer, self.adversarial_answer,
                self.evidence)


@dataclass(frozen=True)
class Dialogue:
    """What a memory system may ingest: the speakers and the sessions of one conversation, and
    nothing about the questions asked of it (no label leakage, SPEC §3). It has no field that could
    carry a question, a gold answer or evidence; :class:`MemorySystem.ingest
    <synapse_pt.memory.base.MemorySystem.ingest>` hands its systems only this type."""

    sample_id: str
    speaker_a: str
    speaker_b: str
    sessions: tuple[Session, ...]

    def turns(self) -> Iterator[Turn]:
        for session in self.sessions:
            yield from session.turns

    @property
    def num_turns(self) -> int:
        return sum(len(s.turns) for s in self.sessions)


@dataclass(frozen=True)
class Conversation(Dialogue):
    """A dialogue with the questions asked of it, as the dataset holds it (the evaluation reads
    the questions; memories see only :attr:`dialogue`)."""

    questions: tuple[Question, ...] = ()

    @property
    def dialogue(self) -> Dialogue:
        """This conversation without its questions."""
        return Dialogue(self.sample_id, self.speaker_a, self.speaker_b, self.sessions)


@dataclass
class Dataset:
    """A loaded dataset: its conversations and where it came from.

    ``notes`` says what a reader of its numbers should know: notes on the file (its upstream
    check, a fallback to the sample) and the loader's notes on the conversations and questions
    held (:attr:`content_notes`: unresolved evidence, questions without evidence, truncated
    chats), which :meth:`subset` computes again on the subset."""

    conversations: list[Conversation]
    path: str
    name: str = "locomo"
    sha256: str | None = None
    notes: list[str] = field(default_factory=list)
    #: the loader's notes on the conversations and questions a dataset holds, a function of the
    #: dataset (``None``: none); :meth:`subset` replaces them with the subset's
    content_notes: Callable[[Dataset], list[str]] | None = None
    #: sha256 of the parsed content as canonical JSON (sorted keys, no spaces): the same data
    #: under another serialisation has the same content hash (:mod:`synapse_pt.data.integrity`)
    content_sha256: str | None = None
    #: the content hash of each top-level field of each sample, ``{sample_id: {field: sha256}}``
    field_sha256: dict[str, dict[str, str]] = field(default_factory=dict)
    #: every sample_id of the file, in file order (what ``locomo_<i>`` ids of the audit count),
    #: kept by :meth:`subset`
    source_order: list[str] = field(default_factory=list)
    #: the questions of each sample in the file (before any subset)
    source_questions: dict[str, int] = field(default_factory=dict)
    #: how the file compares with its upstream release (:class:`~synapse_pt.data.integrity.
    #: DataCheck` status: identical, same_content, different, no_manifest); ``None``: not checked
    upstream: str | None = None
    #: what differs from the upstream release where :attr:`upstream` is ``different`` (one line:
    #: conversations missing, added or reordered, content edited); ``None`` otherwise
    upstream_change: str | None = None
    #: the categories whose questions have an answer (what the summary means over "1-4" cover:
    #: LoCoMo's 1-4, REALTALK's 1-3, BEAM's abilities but abstention) and the one whose right
    #: answer is a refusal (LoCoMo's adversarial 5, BEAM's abstention; ``None``: none)
    answerable: tuple[int, ...] = (1, 2, 3, 4)
    unanswerable: int | None = 5
    #: how the official token-F1 scorer treats each category, where the benchmark's numbers are
    #: not LoCoMo's (``{category: "multi" | "plain" | "cut" | "refusal"}``; empty: LoCoMo's)
    f1_rules: dict[int, str] = field(default_factory=dict)
    #: the turn-id convention: ``"locomo"`` (``D<session>:<turn>``, what the peers' session
    #: rules read) or ``"messages"`` (ids that name no session)
    id_convention: str = "locomo"
    #: a dataset read from several files: each file's sha256, by its path below :attr:`path`
    #: (``sha256`` is then the sha256 of this listing)
    file_sha256: dict[str, str] = field(default_factory=dict)
    #: the category name an LLM judge's templates know each category by, where the benchmark's
    #: authors judge under another name than its categories' (LoCoMo-Plus: every relation type
    #: is their "Cognitive"); empty: the run's category names
    judge_categories: dict[int, str] = field(default_factory=dict)
    #: the benchmark's own LLM judge (a registered judge protocol), what
    #: ``eval.judge_protocol=system`` asks for on it before the memory's own (LoCoMo-Plus: its
    #: authors', the only one that needs no reference answer); ``None``: the memory's own
    judge: str | None = None

    def __len__(self) -> int:
        return len(self.conversations)

    def __iter__(self) -> Iterator[Conversation]:
        return iter(self.conversations)

    def questions(self) -> Iterator[Question]:
        for conv in self.conversations:
            yield from conv.questions

    def turns(self) -> Iterator[Turn]:
        for conv in self.conversations:
            yield from conv.turns()

    @property
    def num_turns(self) -> int:
        return sum(c.num_turns for c in self.conversations)

    @property
    def num_questions(self) -> int:
        return sum(len(c.questions) for c in self.conversations)

    @property
    def question_set(self) -> str:
        """:func:`question_set_id` of this dataset's questions."""
        return question_set_id(q.key for q in self.questions())

    @property
    def gold_set(self) -> str:
        """:func:`gold_set_id` of this dataset's questions."""
        return gold_set_id(q.gold for q in self.questions())

    def unresolved_evidence(self) -> list[tuple[str, int, str]]:
        """``(sample_id, qa_index, raw piece)`` for every evidence piece that was not resolved."""
        return [
            (q.sample_id, q.qa_index, piece)
            for q in self.questions()
            for piece in q.evidence_unresolved
        ]

    def subset(self, sample_ids: list[str] | None = None, max_conversations: int | None = None,
               max_questions: int | None = None,
               question_categories: Sequence[int] | None = None) -> Dataset:
        """A smaller dataset (for smoke runs and focused studies): chosen conversations, only the
        questions of ``question_categories`` (raw LoCoMo numbers), and/or the first questions.
        The memory still ingests whole conversations; only what is asked shrinks. A size that is
        not a positive integer is a :class:`~synapse_pt.common.errors.ConfigError` naming its
        key."""
        for key, size in (("max_conversations", max_conversations),
                          ("max_questions", max_questions)):
            if size is not None and (isinstance(size, bool) or not isinstance(size, int)
                                     or size < 1):
                raise ConfigError(f"dataset.{key} must be an integer >= 1 (null: all), got "
                                  f"{size!r}")
        convs = self.conversations
        if sample_ids is not None:
            known = {c.sample_id for c in convs}
            missing = [s for s in sample_ids if s not in known]
            if missing:
                ids = [c.sample_id for c in convs]
                shown = ids if len(ids) <= 20 else [*ids[:20], f"... ({len(ids)} in all)"]
                raise ConfigError(f"dataset.sample_ids: {self.path} has no conversation "
                                  f"{missing}; its sample ids: {shown}")
            convs = [c for c in convs if c.sample_id in set(sample_ids)]
        if max_conversations is not None:
            convs = convs[:max_conversations]
        if question_categories is not None:
            wanted = {int(c) for c in question_categories}
            known = {*self.answerable, *([self.unanswerable] if self.unanswerable else [])}
            unknown = sorted(wanted - known)
            if unknown:
                raise ConfigError(f"dataset.question_categories: {unknown} are not categories of "
                                  f"{self.name} ({sorted(known)})")
            convs = [Conversation(c.sample_id, c.speaker_a, c.speaker_b, c.sessions,
                                  [q for q in c.questions if q.category in wanted])
                     for c in convs]
        if max_questions is not None:
            convs = [
                Conversation(c.sample_id, c.speaker_a, c.speaker_b, c.sessions,
                             c.questions[:max_questions])
                for c in convs
            ]
        held = set(self.content_notes(self)) if self.content_notes is not None else set()
        smaller = dataclasses.replace(self, conversations=list(convs),
                                      notes=[n for n in self.notes if n not in held])
        return smaller.with_content_notes()

    def with_content_notes(self) -> Dataset:
        """This dataset with its :attr:`content_notes` appended to :attr:`notes` (what a loader
        calls once its dataset is built, and :meth:`subset` on the subset)."""
        if self.content_notes is not None:
            self.notes.extend(n for n in self.content_notes(self) if n not in self.notes)
        return self
