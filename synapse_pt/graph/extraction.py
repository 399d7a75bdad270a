"""Concept extraction: a consolidation window of turns -> short concept strings (SPEC §1.1).

The paper has an LLM extract the window's abstract concepts (entities, people, places, preferences,
events, topics): :class:`LLMConceptExtractor`. :class:`KeywordConceptExtractor` is the LLM-free
stand-in (named ``"llm-free-keyword"`` in configs and result rows, SPEC §2).
Every extractor takes all windows at once, so a backend can batch them.
"""

from __future__ import annotations

import logging
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from synapse_pt.common.errors import ConfigError
from synapse_pt.data.schema import Turn

from ..models.base import TextEncoder
from ..models.llm.base import LLM, ChatRequest
from ..models.structured import generate_structured, parse_string_list

log = logging.getLogger(__name__)

_STRIP = " \t\r\n\"'`.,;:!?()[]{}<>*#-_"
_SPACES = re.compile(r"\s+")


def clean_concepts(concepts: Sequence[str], *, max_chars: int = 80) -> list[str]:
    """Strip whitespace and surrounding quotes/punctuation, squeeze spaces, drop empty strings and
    strings longer than ``max_chars``, de-duplicate case-insensitively (first spelling wins)."""
    out: dict[str, str] = {}
    for concept in concepts:
        text = _SPACES.sub(" ", str(concept)).strip(_STRIP)
        if text and len(text) <= max_chars:
            out.setdefault(text.casefold(), text)
    return list(out.values())


def describe_window(window: Sequence[Turn]) -> str:
    """``"<sample_id> <first dia_id>..<last dia_id>"``, for error messages."""
    if not window:
        return "<empty window>"
    return f"{window[0].sample_id} {window[0].dia_id}..{window[-1].dia_id}"


def format_window(window: Sequence[Turn]) -> str:
    """The window as prompt text: one ``Speaker: utterance`` line per turn (image captions
    included), with the date of each session the window touches."""
    lines: list[str] = []
    session = None
    for turn in window:
        if turn.session_index != session:
            session = turn.session_index
            lines.append(f"[{turn.timestamp:%d %B %Y}]")
        lines.append(f"{turn.speaker}: {turn.content}")
    return "\n".join(lines)


class ConceptExtractor(ABC):
    """Maps windows of turns to concept strings, one list per window, in order.

    Attributes:
        name: identifies the extractor in configs and result rows.
        llm_free: True when no LLM is involved.
        include_speakers: whether the two speakers of a conversation may be concepts. They are in
            every window, so as concepts they become hubs joined to every turn (SPEC §1.1);
            default False for every extractor (:func:`drop_speakers`).
    """

    name: str = "base"
    llm_free: bool = True
    include_speakers: bool = False

    @abstractmethod
    def extract(self, windows: Sequence[Sequence[Turn]]) -> list[list[str]]: ...


def window_speakers(window: Sequence[Turn]) -> set[str]:
    """Case-folded names of the speakers of a window's turns."""
    return {t.speaker.casefold() for t in window}


def drop_speakers(concepts: Sequence[str], speakers: set[str]) -> list[str]:
    """``concepts`` without those that are a speaker's name (case-insensitive; a possessive
    ``"Caroline's"`` counts as the name)."""
    def name(c: str) -> str:
        c = c.casefold().replace("\u2019", "'")
        return c[:-2] if c.endswith("'s") else c
    return [c for c in concepts if name(c) not in speakers]


def extractor_llm(extractor: ConceptExtractor, system: str) -> LLM | None:
    """The chat model behind an LLM extractor (``None`` for an LLM-free one): a memory with an
    LLM build (GAAMA, Membox) writes with it. An extractor that is not LLM-free but holds no model
    is an error naming ``memory=<system>``."""
    if getattr(extractor, "llm_free", False):
        return None
    llm = getattr(extractor, "llm", None)
    if llm is None:
        raise ConfigError(f"memory={system}: an LLM build needs an LLM extractor with a model "
                          "(extractor=llm llm=...); LLM-free extractors give the LLM-free build")
    return llm


class ConceptExtractionError(RuntimeError):
    """An extractor could not produce concepts for a window."""


@dataclass(frozen=True)
class ExtractionFailure:
    """A window skipped by :class:`LLMConceptExtractor` with ``on_failure="skip_window"``."""

    window_index: int
    window: str
    error: str


EXTRACTION_SYSTEM_PROMPT = (
    "You maintain the long-term memory of a conversational agent. You read an excerpt of a "
    "conversation and list the abstract concepts worth remembering."
)
EXTRACTION_USER_PROMPT = (
    "List at most {max_concepts} concepts from the conversation excerpt below: entities, people, "
    "places, preferences, events and topics. Each concept is a short noun phrase of one to four "
    "words (for example \"Caroline\", \"adoption agency\", \"pottery class\", \"camping trip\"). "
    "Answer with a JSON list of strings and nothing else.\n\nExcerpt:\n{window}"
)


class LLMConceptExtractor(ConceptExtractor):
    """The paper's extractor: an LLM lists each window's concepts as a JSON list of strings.

    All windows go to :func:`~synapse_pt.models.structured.generate_structured` in one batch (which
    repairs malformed replies). A window whose reply still fails is handled by ``on_failure``:
    ``"raise"`` (default) raises :class:`ConceptExtractionError` naming the windows;
    ``"skip_window"`` gives that window no concepts, logs a warning, and records it in
    ``failures`` / ``num_failed_windows`` (never silently). A valid empty list ``[]`` is not a
    failure.

    Args:
        llm: the chat backend.
        max_concepts: concepts kept per window (the prompt asks for at most this many).
        max_tokens: completion budget per window.
        on_failure: ``"raise"`` or ``"skip_window"``.
        include_speakers: keep concepts that are a speaker's name (default False, SPEC §1.1).
    """

    llm_free = False

    def __init__(self, llm: LLM, max_concepts: int = 8, max_tokens: int = 128, *,
                 on_failure: str = "raise", include_speakers: bool = False) -> None:
        if on_failure not in ("raise", "skip_window"):
            raise ValueError(f"LLMConceptExtractor: on_failure must be 'raise' or 'skip_window', "
                             f"got {on_failure!r}")
        if max_concepts < 1:
            raise ValueError(f"LLMConceptExtractor: max_concepts must be >= 1, got {max_concepts}")
        self.llm = llm
        self.max_concepts = max_concepts
        self.max_tokens = max_tokens
        self.on_failure = on_failure
        self.include_speakers = include_speakers
        self.failures: list[ExtractionFailure] = []
        self.num_windows = 0  # windows asked for, failed ones included (the failures' share)
        self.name = f"llm:{getattr(llm, 'model', '') or getattr(llm, 'backend', 'llm')}"

    @property
    def num_failed_windows(self) -> int:
        return len(self.failures)

    def request(self, window: Sequence[Turn]) -> ChatRequest:
        """The chat request for one window."""
        user = EXTRACTION_USER_PROMPT.format(max_concepts=self.max_concepts,
                                             window=format_window(window))
        return ChatRequest(messages=(("system", EXTRACTION_SYSTEM_PROMPT), ("user", user)),
                           max_tokens=self.max_tokens)

    def extract(self, windows: Sequence[Sequence[Turn]]) -> list[list[str]]:
        if not windows:
            return []
        results = generate_structured(self.llm, [self.request(w) for w in windows],
                                      parse=parse_string_list)
        self.num_windows += len(windows)
        if len(results) != len(windows):
            raise ConceptExtractionError(f"{self.name}: generate_structured returned "
                                         f"{len(results)} results for {len(windows)} windows")
        out: list[list[str]] = []
        failed: list[ExtractionFailure] = []
        for i, (window, res) in enumerate(zip(windows, results, strict=True)):
            if res.ok:
                concepts = clean_concepts(res.value)
                if not self.include_speakers:
                    concepts = drop_speakers(concepts, window_speakers(window))
                out.append(concepts[: self.max_concepts])
            else:
                failed.append(ExtractionFailure(i, describe_window(window), str(res.error)))
                out.append([])
        if failed:
            shown = "; ".join(f"window {f.window_index} ({f.window}): {f.error}"
                              for f in failed[:3])
            more = "" if len(failed) <= 3 else f" (+{len(failed) - 3} more)"
            if self.on_failure == "raise":
                raise ConceptExtractionError(f"{self.name}: no valid concept list for "
                                             f"{len(failed)} of {len(windows)} windows: "
                                             f"{shown}{more}")
            self.failures.extend(failed)
            log.warning("%s: skipped %d of %d windows with no valid concept list: %s%s",
                        self.name, len(failed), len(windows), shown, more)
        return out


# --------------------------------------------------------------------------------- LLM-free
# English stopwords (NLTK's list) plus chat fillers and light verbs, embedded so no data download
# is needed.
_STOPWORD_TEXT = """
a about above after again against ain all am an and any are aren't as at be because been before
being below between both but by can couldn't could did didn't do does doesn't doing don't down
during each few for from further had hadn't has hasn't have haven't having he he's her here here's
hers herself him himself his how how's i i'd i'll i'm i've if in into is isn't it it's its itself
just let's me more most mustn't my myself no nor not now of off on once only or other our ours
ourselves out over own same shan't she she'd she'll she's should shouldn't so some such than that
that's the their theirs them themselves then there there's these they they'd they'll they're
they've this those through to too under until up very was wasn't we we'd we'll we're we've were
weren't what what's when when's where where's which while who who's whom why why's will with won't
would wouldn't you you'd you'll you're you've your yours yourself yourselves also always anyway
yeah yes yep hey hi hello oh ok okay wow lol haha thanks thank please sure really totally
definitely absolutely actually maybe probably pretty quite super so much many lot lots bit kind
sort thing things stuff something anything everything nothing someone anyone everyone everybody
somebody nobody one ones way time times day days today tonight tomorrow yesterday week weeks year
years month months ago lately recently soon still even ever never just like love loved loving good
great awesome amazing cool nice glad happy fun wonderful fantastic incredible awesome sounds sound
seems seem feel feels felt feeling know knew think thought thinking going gonna wanna gotta get
gets got getting make makes made making take takes took taking see saw seen seeing look looks
looked looking want wants wanted say says said saying tell told talk talked talking go goes went
gone come came coming give gave keep kept try tried trying need needs needed let lets put use used
doing done mean means meant hope hoped hoping wish glad enjoy enjoyed enjoying appreciate glad
lately new old big little last first next other another every much more most well better best right
left hard sure true real totally such own same able can't cannot could've would've should've mine
yours hers ours theirs kinda sorta wanna anyways though although however yet since monday tuesday
wednesday thursday friday saturday sunday weekend bye goodbye congrats congratulations welcome
sorry dear omg aww yay woah whoa hmm cheers
"""
STOPWORDS: frozenset[str] = frozenset(_STOPWORD_TEXT.split())

_WORD = re.compile(r"[A-Za-z][A-Za-z'\-]*")
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_ACTIVITY_SUFFIXES = ("ing", "tion", "sion", "ment", "ness", "ship", "ery", "ism", "ure", "ity")
_KIND_PRIOR = {"entity": 1.0, "bigram": 0.8, "activity": 0.6, "speaker": 0.5, "word": 0.4}


@dataclass
class KeywordCandidate:
    text: str
    kind: str
    count: int
    first: int


def _norm_token(token: str) -> str:
    token = token.strip("'-")
    for suffix in ("'s", "'S"):
        if token.endswith(suffix):
            token = token[: -len(suffix)]
    return token


def _is_content(word: str, min_chars: int) -> bool:
    low = word.lower()
    return len(low) >= min_chars and low not in STOPWORDS and "'" not in low


def keyword_candidates(window: Sequence[Turn], *, min_chars: int = 3,
                       include_speakers: bool = True) -> list[KeywordCandidate]:
    """Candidate phrases of one window with their kind, mention count and first position.

    * ``entity``: runs of capitalised tokens that are not stopwords (``"Mount Rainier"``); a
      capitalised word at the start of a sentence counts as (part of) a name only if it also
      appears capitalised elsewhere in the window or is a speaker's name, else a lone one is read
      as an ordinary word and one before a name is dropped (``"Congrats Caroline"``);
    * ``speaker``: the speakers' names (count = mentions in the text, at least 1);
    * ``bigram``: two adjacent lowercase content words (``"pottery class"``);
    * ``activity``/``word``: lowercase content words; ``activity`` for nouns ending in -ing, -tion,
      -ment, ... (a cheap suffix heuristic).
    """
    speakers = list(dict.fromkeys(t.speaker for t in window))
    speaker_set = {s.casefold() for s in speakers}
    sentences = _sentences(window)
    mid_capitalised = {t for toks in sentences for t in toks[1:] if t[0].isupper()}

    def _name_like(token: str) -> bool:
        return token in mid_capitalised or token.casefold() in speaker_set

    found = _Candidates()
    for toks in sentences:
        _scan_sentence(toks, _name_like, min_chars, found)
    if include_speakers:
        found.add_speakers(speakers)
    return list(found.by_key.values())


def _sentences(window: Sequence[Turn]) -> list[list[str]]:
    """The window's sentences as lists of normalised word tokens (curly apostrophes made
    straight, possessive ``'s`` dropped), empty sentences left out."""
    sentences: list[list[str]] = []
    for turn in window:
        text = turn.content.replace("\u2019", "'")
        for sent in _SENTENCE.split(text):
            toks = [_norm_token(m.group()) for m in _WORD.finditer(sent)]
            toks = [t for t in toks if t]
            if toks:
                sentences.append(toks)
    return sentences


class _Candidates:
    """A window's candidates by case-folded text, each with its first position among all
    mentions."""

    def __init__(self) -> None:
        self.by_key: dict[str, KeywordCandidate] = {}
        self.pos = 0

    def add(self, text: str, kind: str) -> None:
        """One mention of ``text`` read as ``kind``."""
        key = text.casefold()
        if key in self.by_key:
            self.by_key[key].count += 1
            # An entity or bigram reading beats a plain word reading of the same text.
            if _KIND_PRIOR[kind] > _KIND_PRIOR[self.by_key[key].kind]:
                self.by_key[key].kind = kind
                self.by_key[key].text = text
        else:
            self.by_key[key] = KeywordCandidate(text, kind, 1, self.pos)
        self.pos += 1

    def add_speakers(self, speakers: Sequence[str]) -> None:
        """The speakers' names: a name already found becomes a ``speaker`` (an ``entity``
        stays one), one not mentioned is added with count 1."""
        for name in speakers:
            key = name.casefold()
            if key in self.by_key:
                self.by_key[key].kind = "speaker" if self.by_key[key].kind != "entity" else "entity"
            else:
                self.by_key[key] = KeywordCandidate(name, "speaker", 1, self.pos)
                self.pos += 1


def _scan_sentence(toks: list[str], name_like: Callable[[str], bool], min_chars: int,
                   found: _Candidates) -> None:
    """The candidates of one sentence's tokens into ``found``: runs of capitalised
    non-stopwords read as entities (a sentence-initial word only when ``name_like``), else
    lowercase content words (activity or word) and bigrams of two adjacent ones."""
    i = 0
    prev_content: str | None = None
    while i < len(toks):
        tok = toks[i]
        capital = tok[0].isupper() and tok.lower() not in STOPWORDS and len(tok) > 1
        if capital:
            j = i
            while (j < len(toks) and toks[j][0].isupper() and len(toks[j]) > 1
                   and toks[j].lower() not in STOPWORDS):
                j += 1
            run = toks[i:j]
            if i == 0 and len(run) > 1 and not name_like(tok):
                run = run[1:]  # "Congrats Caroline": the sentence-initial word is no name
            is_entity = len(run) > 1 or i > 0 or name_like(run[0])
            if is_entity:
                found.add(" ".join(run), "entity")
                prev_content = None
                i = j
                continue
        low = tok.lower()
        if _is_content(low, min_chars) and low.isalpha():
            kind = "activity" if low.endswith(_ACTIVITY_SUFFIXES) else "word"
            found.add(low, kind)
            if prev_content is not None:
                found.add(f"{prev_content} {low}", "bigram")
            prev_content = low
        else:
            prev_content = None
        i += 1


class NoConceptExtractor(ConceptExtractor):
    """Extracts nothing: the ``no_graph`` ablation keeps episodic nodes only."""

    llm_free = True
    name = "none"

    def extract(self, windows: Sequence[Sequence[Turn]]) -> list[list[str]]:
        return [[] for _ in windows]


class KeywordConceptExtractor(ConceptExtractor):
    r"""LLM-free concept extractor (``name = "llm-free-keyword"``).

    Candidates come from :func:`keyword_candidates`. Each is scored

    .. math::
        s(c) = \pi_{kind(c)} + \frac{n(c)}{\max_{c'} n(c')}
               \;[+\; \cos(\mathbf{h}_c, \mathbf{h}_{window})\ \text{with an encoder}]

    with kind priors :math:`\pi` = entity 1.0, bigram 0.8, activity noun 0.6, speaker 0.5, word 0.4
    and :math:`n` the mention count in the window. The top ``max_concepts`` are kept, highest score
    first (ties: first mention), case-insensitively unique; a single word inside a kept phrase is
    dropped in favour of the phrase. With an encoder, all candidates and all window texts are
    embedded in one call each (each distinct phrase once).

    Args:
        encoder: optional text encoder for the cosine term.
        max_concepts: concepts per window (default 6).
        min_chars: shortest content word kept (default 3).
        include_speakers: add the window's speaker names as candidates (default False: speakers
            are not concepts, SPEC §1.1; with False a speaker's name found in the text is dropped
            too).
    """

    llm_free = True

    def __init__(self, encoder: TextEncoder | None = None, max_concepts: int = 6, *,
                 min_chars: int = 3, include_speakers: bool = False) -> None:
        if max_concepts < 1:
            raise ValueError(f"KeywordConceptExtractor: max_concepts must be >= 1, "
                             f"got {max_concepts}")
        if min_chars < 1:
            raise ValueError(f"KeywordConceptExtractor: min_chars must be >= 1, got {min_chars}")
        self.encoder = encoder
        self.max_concepts = max_concepts
        self.min_chars = min_chars
        self.include_speakers = include_speakers
        self.name = "llm-free-keyword"

    def extract(self, windows: Sequence[Sequence[Turn]]) -> list[list[str]]:
        cands = [keyword_candidates(w, min_chars=self.min_chars,
                                    include_speakers=self.include_speakers) for w in windows]
        if not self.include_speakers:
            cands = [[c for c in cs if drop_speakers([c.text], window_speakers(w))]
                     for cs, w in zip(cands, windows, strict=True)]
        cos: list[list[float]] = [[0.0] * len(c) for c in cands]
        if self.encoder is not None and any(cands):
            vocab = list(dict.fromkeys(c.text for cs in cands for c in cs))
            row = {t: i for i, t in enumerate(vocab)}
            cand_emb = self.encoder.encode(vocab)  # each distinct phrase once
            win_emb = self.encoder.encode([" ".join(t.content for t in w) for w in windows])
            owner = torch.tensor([k for k, cs in enumerate(cands) for _ in cs], dtype=torch.long)
            rows = torch.tensor([row[c.text] for cs in cands for c in cs], dtype=torch.long)
            flat = (cand_emb[rows] * win_emb[owner]).sum(-1).tolist()
            pos = 0
            for k, cs in enumerate(cands):
                cos[k] = flat[pos:pos + len(cs)]
                pos += len(cs)
        return [self._select(cs, cs_cos) for cs, cs_cos in zip(cands, cos, strict=True)]

    def _select(self, cands: list[KeywordCandidate], cos: list[float]) -> list[str]:
        if not cands:
            return []
        top = max(c.count for c in cands)
        scored = sorted(
            range(len(cands)),
            key=lambda k: (-(_KIND_PRIOR[cands[k].kind] + cands[k].count / top + cos[k]),
                           cands[k].first),
        )
        chosen: list[str] = []
        for k in scored:
            text = cands[k].text
            words = text.casefold().split()
            if len(words) == 1 and any(words[0] in c.casefold().split() for c in chosen):
                continue
            if len(words) > 1:  # a phrase replaces the single words it contains
                chosen = [c for c in chosen if " " in c or c.casefold() not in words]
            chosen.append(text)
            if len(chosen) == self.max_concepts:
                break
        return chosen
