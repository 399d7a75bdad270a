"""LoCoMo-Plus (Li et al., arXiv 2602.10715): implicit recall, stitched into LoCoMo-10.

The items file (``locomo_plus.json`` of github xjtuleeyf/Locomo-Plus at 143cdeb, byte for byte)
holds 401 items of a sixth LoCoMo category, *Cognitive*: a two-turn ``cue_dialogue``
(``"A: ...\\nB: ..."``), a one-turn ``trigger_query`` (``"A: ..."``) said later that depends on
it, the ``time_gap`` between them (``"two weeks later"``) and the ``relation_type`` of the link
(causal, state, goal, value). The items carry no conversation: the authors stitch each into a
LoCoMo-10 conversation. Their protocol, as ``../shared/data/README.md`` states it, written here
from that description:

* item ``i`` goes into conversation ``i mod 10`` of ``locomo10.json``; ``A`` and ``B`` become
  that conversation's ``speaker_a`` and ``speaker_b``;
* the query is dated 7 days after the conversation's *last* session (its ``date_time``, clock
  time included), the cue ``time_gap`` before the query: weeks 7 days, months 30, years 365,
  ``a`` / ``an`` and the number words one to twelve read as numbers (:func:`parse_time_gap`);
  a gap in which no count and unit are found gives 0 days;
* the cue becomes a new session placed after the last session dated at or before it (the
  sessions sorted by date, ties kept in order: a cue dated as a session comes after it), and the
  query a new session after every other.

What is built here for retrieval:

* the **trigger is not inserted** into the memory (it would retrieve itself): it is the question,
  written as the turn it is in the stitched conversation, ``"<speaker>: <text>"`` (``A`` mapped
  to ``speaker_a``);
* the cue's turns are the question's evidence, its relation type the category (1 causal,
  2 state, 3 goal, 4 value); there is no reference answer (``answer`` is ``None``; the token-F1
  scorers leave the questions out, an LLM judge scores a reply against the cue);
* the cue session of item ``i`` is session ``1000 + i`` (turn ids ``D<1000+i>:1``, ``:2``), dated
  as above, so it never collides with a LoCoMo session and every base turn keeps its LoCoMo id;
* ``variant="faithful"`` (the authors' stitching without the query session): one conversation
  per item, ``<base sample_id>-plus<iii>`` (401 memories, each a LoCoMo conversation plus one
  cue); ``variant="packed"``: every item of conversation ``k`` inserted into that one
  conversation at its own date (10 memories, whose other cues are distractors). Question ``i``
  has ``qa_index`` ``i`` in both;
* ``variant="placebo"``, a control, not the benchmark: as ``faithful``, but the memory of item
  ``i`` holds the cue of *another* item of the same conversation (the next one whose cue text
  differs, at that item's date), and that unrelated cue is the evidence: how often a system
  ranks an inserted session high for being inserted rather than for what the trigger recalls
  (its any-hit beside the faithful one).

Readings the data needs (each chosen, counted in the dataset's notes, and documented in
experiments/locomo_plus.md):

* ``cue_reading="split"`` (ours, the default): 31 cues write their line break as the two
  characters ``\\n`` and 13 put ``B:`` inline on the ``A:`` line (``"A: ... B: ..."``); both are
  read as two turns, as the other 357 cues are. ``"authors"``: the authors' parser (lines split
  on real line breaks, each line starting ``A:`` or ``B:`` a turn, other lines dropped), which
  reads those 44 cues as one ``A`` turn holding the ``B`` line too;
* ``gap_reading="authors"`` (the default): 15 gaps name no count (``"several months later"``
  11, ``"several years later"``, ``"several weeks later"``, ``"a couple of months later"``,
  ``"a few weeks later"``) and parse to 0 days, so their cue is dated 7 days after the last
  session, the last session of the memory. ``"read"``: ``several`` and ``few`` read as 3,
  ``couple`` as 2;
* repeated cues: 7 cue texts occur in two items each; two pairs fall into the same conversation
  (items 124 and 134 in conv-44, 352 and 362 in conv-42): under ``packed`` both copies are
  inserted, each at its item's date, and each item's evidence is its own copy (the other copy is
  an identical distractor); under ``faithful`` each memory holds one copy.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from synapse_pt.common.errors import ConfigError
from synapse_pt.data.schema import Conversation, Dataset, Question, Session, Turn

from .benchmark import Benchmark
from .errors import DataFormatError, DatasetNotFoundError
from .integrity import check_upstream, upstream_manifest
from .locomo import content_sha256, load_locomo
from .source import (
    DEFAULT_CACHE_DIR,
    LOCOMO_FILENAME,
    DatasetFile,
    resolve_dataset_path,
    sha256_file,
)

__all__ = ["CATEGORIES", "CUE_READINGS", "GAP_READINGS", "JUDGE_CATEGORY", "VARIANTS",
           "PlusItem", "judge_templates", "load_locomo_plus", "parse_cue", "parse_time_gap",
           "prompts_path", "stitch"]

#: the relation types, numbered in the order the paper lists them
CATEGORIES = {1: "causal", 2: "state", 3: "goal", 4: "value"}
#: the authors' name of the category every item belongs to (the key of its judge template)
JUDGE_CATEGORY = "Cognitive"
#: the judge protocol of the authors (registered in :mod:`synapse_pt.eval.qa.scorers.judge`)
JUDGE_PROTOCOL = "locomo_plus"
VARIANTS = ("faithful", "packed", "placebo")
CUE_READINGS = ("split", "authors")
GAP_READINGS = ("authors", "read")
ITEMS_FILE = "locomo_plus.json"
PROMPTS_FILE = "prompts.json"
#: the session number of item i's cue is CUE_SESSION + i (LoCoMo-10 has at most 35 sessions)
CUE_SESSION = 1000
#: the query is dated this many days after the base conversation's last session
QUERY_DELAY_DAYS = 7
UNIT_DAYS = {"week": 7, "month": 30, "year": 365}
NUMBER_WORDS = {w: n for n, w in enumerate(
    ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
     "twelve"], start=1)}
#: ``gap_reading="read"``: the counts the authors' parse leaves out
VAGUE_WORDS = {"several": 3, "few": 3, "couple": 2}
_COUNT = "|".join([r"\d+", *NUMBER_WORDS, "an", "a"])
_GAP = re.compile(rf"\b({_COUNT})\b\s*(week|month|year)s?\b")
_VAGUE_GAP = re.compile(rf"\b({'|'.join(VAGUE_WORDS)})\b\s*(?:of\s+)?(week|month|year)s?\b")
_ROLE = re.compile(r"([AB]):")
_LITERAL_NEWLINE = "\\n"
ENV_VAR = "SYNAPSE_LOCOMO_PLUS"


def parse_time_gap(text: str, reading: str = "authors") -> int:
    """Days between a cue and its trigger from the item's ``time_gap``.

    The first ``<count> <unit>`` in the lower-cased text, where a count is digits, ``a``/``an``
    (1) or a number word one to twelve, and a unit ``week(s)`` (7 days), ``month(s)`` (30) or
    ``year(s)`` (365): ``"about six weeks later"`` is 42. No match gives 0 days (the authors'
    rule), unless ``reading="read"``, which then reads ``several``/``few`` as 3 and ``couple``
    as 2 (``"a couple of months later"`` is 60)."""
    if reading not in GAP_READINGS:
        raise ValueError(f"gap reading must be one of {GAP_READINGS}, got {reading!r}")
    s = text.lower().strip()
    m = _GAP.search(s)
    if m is not None:
        count, unit = m.groups()
        n = int(count) if count.isdigit() else 1 if count in ("a", "an") else NUMBER_WORDS[count]
        return n * UNIT_DAYS[unit]
    if reading == "read" and (m := _VAGUE_GAP.search(s)) is not None:
        return VAGUE_WORDS[m.group(1)] * UNIT_DAYS[m.group(2)]
    return 0


def parse_cue(text: str, reading: str = "split") -> tuple[list[tuple[str, str]], list[str]]:
    """The turns of a dialogue written ``"A: ...\\nB: ..."``: ``[(role, text)]`` with role
    ``"A"`` or ``"B"``, and the repairs the reading made (``"literal_newline"``,
    ``"inline_role"``).

    ``reading="authors"``: split on line breaks; each stripped line starting ``A:`` or ``B:`` is a
    turn, any other line is dropped. ``reading="split"`` first turns a literal two-character
    ``\\n`` into a line break and splits a line where the *other* speaker's marker follows white
    space (``"A: x. B: y"`` is two turns); a marker of the same speaker inside a line is text."""
    if reading not in CUE_READINGS:
        raise ValueError(f"cue reading must be one of {CUE_READINGS}, got {reading!r}")
    repairs: list[str] = []
    if reading == "split" and _LITERAL_NEWLINE in text:
        text = text.replace(_LITERAL_NEWLINE, "\n")
        repairs.append("literal_newline")
    turns: list[tuple[str, str]] = []
    for raw_line in text.split("\n"):
        line = raw_line.strip()
        m = _ROLE.match(line)
        if m is None:
            continue
        role, rest = m.group(1), line[2:].strip()
        if reading == "split":
            other = "B" if role == "A" else "A"
            inline = re.search(rf"\s{other}:\s", rest)
            while inline is not None:
                turns.append((role, rest[:inline.start()].strip()))
                repairs.append("inline_role")
                role, other = other, role
                rest = rest[inline.end():].strip()
                inline = re.search(rf"\s{other}:\s", rest)
        turns.append((role, rest))
    return turns, repairs


@dataclass(frozen=True)
class PlusItem:
    """One item as read: its index in the file, relation type (category number), cue turns
    (``(role, text)``), trigger ``(role, text)``, gap text and days, and the repairs its cue
    needed."""

    index: int
    category: int
    cue: tuple[tuple[str, str], ...]
    trigger: tuple[str, str]
    time_gap: str
    gap_days: int
    repairs: tuple[str, ...] = ()


def _read_items(path: Path, raw: bytes, cue_reading: str, gap_reading: str) -> list[PlusItem]:
    try:
        items = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise DataFormatError(str(path), "file", "<top level>", f"not UTF-8 JSON ({err})") from err
    if not isinstance(items, list) or not items:
        raise DataFormatError(str(path), "file", "<top level>", "expected a non-empty list of "
                                                                "items")
    by_name = {v: k for k, v in CATEGORIES.items()}
    out = []
    for i, item in enumerate(items):
        record = f"item {i}"
        if not isinstance(item, dict):
            raise DataFormatError(str(path), record, "<item>",
                                  f"expected an object, got {type(item).__name__}")
        for key in ("relation_type", "cue_dialogue", "trigger_query", "time_gap"):
            if not isinstance(item.get(key), str):
                raise DataFormatError(str(path), record, key, "missing or not a string")
        if item["relation_type"] not in by_name:
            raise DataFormatError(str(path), record, "relation_type",
                                  f"{item['relation_type']!r} is none of {sorted(by_name)}")
        cue, repairs = parse_cue(item["cue_dialogue"], cue_reading)
        if not cue or any(not text for _, text in cue):
            raise DataFormatError(str(path), record, "cue_dialogue",
                                  f"no 'A:'/'B:' turn with text in {item['cue_dialogue']!r:.80}")
        trigger, _ = parse_cue(item["trigger_query"], "authors")
        if len(trigger) != 1 or not trigger[0][1]:
            raise DataFormatError(str(path), record, "trigger_query",
                                  f"expected one 'A:' or 'B:' turn, got {len(trigger)} in "
                                  f"{item['trigger_query']!r:.80}")
        out.append(PlusItem(i, by_name[item["relation_type"]], tuple(cue), trigger[0],
                            item["time_gap"], parse_time_gap(item["time_gap"], gap_reading),
                            tuple(repairs)))
    return out


def format_date_time(dt: datetime) -> str:
    """A date in LoCoMo's ``session_<n>_date_time`` form: ``"1:56 pm on 8 May, 2023"``."""
    hour = dt.hour % 12 or 12
    return f"{hour}:{dt.minute:02d} {'am' if dt.hour < 12 else 'pm'} on {dt.day} {dt:%B}, {dt.year}"


def query_time(base: Conversation) -> datetime:
    """The trigger's date: 7 days after the base conversation's last session."""
    return base.sessions[-1].date_time + timedelta(days=QUERY_DELAY_DAYS)


def cue_session(item: PlusItem, base: Conversation, sample_id: str,
                offset: timedelta) -> Session:
    """Item ``item``'s cue as session ``1000 + index`` of ``sample_id``, dated ``gap_days``
    before the query; ``A`` speaks as ``speaker_a``, ``B`` as ``speaker_b``."""
    when = query_time(base) - timedelta(days=item.gap_days)
    number = CUE_SESSION + item.index
    speakers = {"A": base.speaker_a, "B": base.speaker_b}
    turns = tuple(Turn(sample_id, f"D{number}:{j + 1}", speakers[role], text, number, j,
                       when + j * offset) for j, (role, text) in enumerate(item.cue))
    return Session(number, when, format_date_time(when), turns)


def stitch(base: Conversation, items: Sequence[PlusItem], sample_id: str,
           offset: timedelta = timedelta(seconds=60),
           cued: Sequence[PlusItem] | None = None) -> Conversation:
    """``base`` with the cue of every item of ``items`` inserted as a new session, renamed
    ``sample_id``; one question per item (its trigger, its cue turns as evidence).

    The sessions are sorted by date, ties kept in order (the base's sessions in theirs, then the
    cues in the order of ``items``): a cue lands after the last session dated at or before it.
    ``cued``: the items whose cues are inserted instead, one per item of ``items`` (the placebo
    control: each trigger's evidence is then the cue inserted in its place)."""
    renamed = [Session(s.index, s.date_time, s.date_time_raw,
                       tuple(dataclasses.replace(t, sample_id=sample_id) for t in s.turns))
               for s in base.sessions] if sample_id != base.sample_id else list(base.sessions)
    cues = [cue_session(item, base, sample_id, offset) for item in (cued or items)]
    sessions = sorted([*renamed, *cues], key=lambda s: s.date_time)  # stable: ties in order
    speakers = {"A": base.speaker_a, "B": base.speaker_b}
    questions = tuple(
        Question(sample_id, item.index, f"{speakers[item.trigger[0]]}: {item.trigger[1]}", None,
                 item.category, ids, ids)
        for item, ids in ((item, tuple(t.dia_id for t in cue.turns))
                          for item, cue in zip(items, cues, strict=True)))
    return Conversation(sample_id, base.speaker_a, base.speaker_b, tuple(sessions), questions)


def placebo_pairs(groups: Mapping[int, Sequence[PlusItem]]) -> dict[int, PlusItem]:
    """Per item, the item whose cue the placebo control inserts instead: the next item of the
    same conversation (cyclically) whose cue text differs from its own."""
    out = {}
    for group in groups.values():
        for j, item in enumerate(group):
            for step in range(1, len(group)):
                other = group[(j + step) % len(group)]
                if other.cue != item.cue:
                    out[item.index] = other
                    break
            else:
                raise ValueError(f"placebo: item {item.index}'s conversation has no other cue")
    return out


def faithful_id(base_id: str, index: int) -> str:
    """The sample id of item ``index``'s own conversation (``conv-26-plus000``)."""
    return f"{base_id}-plus{index:03d}"


def load_locomo_plus(path: str | Path, *, name: str | None = None,
                     turn_offset_seconds: float = 60.0, base_path: str | Path | None = None,
                     variant: str = "faithful", cue_reading: str = "split",
                     gap_reading: str = "authors", base_sha256: str | None = None) -> Dataset:
    """LoCoMo-Plus stitched into LoCoMo-10 (see the module docstring).

    Args:
        path: the folder holding ``locomo_plus.json`` (or that file itself).
        base_path: LoCoMo-10 (``locomo10.json``), read by :func:`~synapse_pt.data.locomo.
            load_locomo`; a file that is not the release (neither its bytes nor its content)
            is refused where ``base_sha256`` is given.
        variant: ``"faithful"`` (one conversation per item), ``"packed"`` (ten) or
            ``"placebo"`` (the control: faithful with another item's cue).
        cue_reading, gap_reading: the readings of the module docstring.
    """
    for key, value, allowed in (("variant", variant, VARIANTS),
                                ("cue_reading", cue_reading, CUE_READINGS),
                                ("gap_reading", gap_reading, GAP_READINGS)):
        if value not in allowed:
            raise ConfigError(f"dataset.{key} must be one of {list(allowed)}, got {value!r}")
    path = Path(path)
    items_path = path / ITEMS_FILE if path.is_dir() else path
    if not items_path.is_file():
        raise DatasetNotFoundError(f"{path}: no {ITEMS_FILE} (the LoCoMo-Plus items file)")
    if base_path is None:
        raise DatasetNotFoundError("LoCoMo-Plus needs LoCoMo-10 (dataset.base.path)")
    raw = items_path.read_bytes()
    items = _read_items(items_path, raw, cue_reading, gap_reading)
    base = load_locomo(base_path, turn_offset_seconds=turn_offset_seconds)
    base_check = check_upstream(base, upstream_manifest("locomo10"))
    if base_sha256 and base_check.status not in ("identical", "same_content") \
            and base.sha256 != base_sha256:
        raise DataFormatError(str(base_path), "file", "sha256",
                              f"{base.sha256}, not dataset.base.sha256={base_sha256}: not the "
                              f"LoCoMo-10 release ({base_check.describe()}); to stitch into it "
                              "anyway pass dataset.base.sha256=null")
    convs = base.conversations
    offset = timedelta(seconds=turn_offset_seconds)
    groups: dict[int, list[PlusItem]] = {}
    for item in items:
        groups.setdefault(item.index % len(convs), []).append(item)
    if variant in ("faithful", "placebo"):
        other = placebo_pairs(groups) if variant == "placebo" else {}
        conversations = [stitch(convs[item.index % len(convs)], [item],
                                faithful_id(convs[item.index % len(convs)].sample_id, item.index),
                                offset, [other[item.index]] if other else None)
                         for item in items]
    else:
        conversations = [stitch(conv, groups.get(k, []), conv.sample_id, offset)
                         for k, conv in enumerate(convs)]
    hashes = {ITEMS_FILE: hashlib.sha256(raw).hexdigest(), LOCOMO_FILENAME: base.sha256 or ""}
    listing = "".join(f"{h}  {n}\n" for n, h in sorted(hashes.items()))
    dataset = Dataset(conversations, str(path), name or "locomo_plus",
                      hashlib.sha256(listing.encode()).hexdigest(),
                      notes=reading_notes(items, convs, variant, cue_reading, gap_reading,
                                          str(base_path), base_check.describe()),
                      content_sha256=content_sha256(json.loads(raw)),
                      source_order=[c.sample_id for c in conversations],
                      source_questions={c.sample_id: len(c.questions) for c in conversations},
                      answerable=tuple(CATEGORIES), unanswerable=None,
                      f1_rules={c: "none" for c in CATEGORIES},
                      judge_categories={c: JUDGE_CATEGORY for c in CATEGORIES},
                      judge=JUDGE_PROTOCOL,
                      file_sha256=hashes)
    return dataset


def reading_notes(items: Sequence[PlusItem], convs: Sequence[Conversation], variant: str,
                  cue_reading: str, gap_reading: str, base_path: str, base_check: str
                  ) -> list[str]:
    """The dataset's notes: the variant, the base file, and what each reading changed."""
    repairs = Counter(r for item in items for r in set(item.repairs))
    zero = Counter(item.time_gap for item in items if item.gap_days == 0)
    texts = Counter(item.cue for item in items)
    repeated = [[i.index for i in items if i.cue == cue] for cue, n in texts.items() if n > 1]
    same_conv = [pair for pair in repeated if len({i % len(convs) for i in pair}) < len(pair)]
    per_conv = Counter(item.index % len(convs) for item in items)
    early = sum(1 for item in items
                if query_time(convs[item.index % len(convs)]) - timedelta(days=item.gap_days)
                < convs[item.index % len(convs)].sessions[0].date_time)
    return [
        f"LoCoMo-Plus variant {variant}: {len(items)} items stitched into {base_path} "
        f"({base_check}); items per conversation "
        + ", ".join(f"{convs[k].sample_id} {n}" for k, n in sorted(per_conv.items())),
        f"cue_reading={cue_reading}: {repairs['literal_newline']} cue(s) with a literal '\\n' "
        f"and {repairs['inline_role']} with an inline speaker marker split into turns"
        if cue_reading == "split" else
        "cue_reading=authors: cues with a literal '\\n' or an inline 'B:' read as one A turn",
        f"gap_reading={gap_reading}: {sum(zero.values())} gap(s) parse to 0 days "
        f"({', '.join(f'{g!r} x{n}' for g, n in zero.most_common())})",
        f"repeated cues: {len(repeated)} texts in several items {repeated}; in one conversation: "
        f"{same_conv} (packed: both copies inserted, each item's evidence its own)",
        f"cues dated before their conversation's first session: {early}",
    ]


# ------------------------------------------------------------------------------ the judge's file

def pinned_prompts_sha256() -> str:
    """The pinned sha256 of ``prompts.json`` (``manifests/locomo_plus_prompts.sha256``, the line
    of the data folder's SHA256SUMS)."""
    from importlib import resources

    text = resources.files("synapse_pt.data").joinpath(
        "manifests/locomo_plus_prompts.sha256").read_text()
    digest, rel = text.split(maxsplit=1)
    if rel.strip() != f"locomo_plus/{PROMPTS_FILE}":
        raise ValueError(f"manifests/locomo_plus_prompts.sha256 names {rel.strip()!r}")
    return digest


def prompts_path(folder: str | Path | None = None) -> Path:
    """``prompts.json`` (the authors' judge templates as data), sha256-checked: in ``folder``,
    else in ``$SYNAPSE_LOCOMO_PLUS``, else ``../shared/data/locomo_plus`` beside the checkout,
    else the cache (``<cache>/data/locomo_plus``). Never downloaded (it is data extracted from
    the authors' ``prompt.py``)."""
    import os

    if folder is not None:
        places = [Path(folder)]
    elif os.environ.get(ENV_VAR):
        places = [Path(os.environ[ENV_VAR])]
    else:
        places = [Path(__file__).resolve().parents[2].parent / "shared" / "data" / "locomo_plus",
                  DEFAULT_CACHE_DIR / "data" / "locomo_plus"]
    for place in places:
        found = place / PROMPTS_FILE if place.is_dir() else place
        if found.is_file():
            digest, want = sha256_file(found), pinned_prompts_sha256()
            if digest != want:
                raise DataFormatError(str(found), "file", "sha256",
                                      f"{digest} is not the pinned {want} (the LoCoMo-Plus "
                                      "judge templates of 143cdeb)")
            return found
    raise DatasetNotFoundError(
        f"LoCoMo-Plus judge templates: no {PROMPTS_FILE} in {', '.join(map(str, places))}; set "
        f"{ENV_VAR}=/folder/holding/{PROMPTS_FILE} (../shared/data/locomo_plus)")


def judge_templates(folder: str | Path | None = None) -> tuple[dict[str, str], Path]:
    """``({category: template}, file)``: the authors' judge templates read from
    ``prompts.json`` (:func:`prompts_path`), ``default`` included."""
    found = prompts_path(folder)
    data = json.loads(found.read_text(encoding="utf-8"))
    templates = data.get("judge_templates")
    if not isinstance(templates, dict) or "default" not in templates \
            or JUDGE_CATEGORY not in templates:
        raise DataFormatError(str(found), "file", "judge_templates",
                              f"expected an object with 'default' and '{JUDGE_CATEGORY}'")
    return dict(templates), found


# ------------------------------------------------------------------------------ the declaration

def loader_options(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The loader's arguments from the ``dataset`` config: LoCoMo-10 found as LoCoMo-10 is
    (``dataset.base``: an explicit path, ``$SYNAPSE_DATA``, beside the checkout, the cache, a
    download), the variant and the readings."""
    base = cfg.get("base") or {}
    file = DatasetFile(filename=LOCOMO_FILENAME, url=base.get("url"),
                       expected_sha256=base.get("sha256"),
                       env_var=str(base.get("env_var") or "SYNAPSE_DATA"), key="dataset.base.path")
    source = resolve_dataset_path(
        base.get("path"), candidates=base.get("candidates") or (),
        cache_dir=base.get("cache_dir"), allow_download=bool(base.get("allow_download", True)),
        file=file)
    return {"base_path": source.path, "variant": str(cfg.get("variant", "faithful")),
            "cue_reading": str(cfg.get("cue_reading", "split")),
            "gap_reading": str(cfg.get("gap_reading", "authors")),
            "base_sha256": base.get("sha256")}


#: LoCoMo-Plus (``dataset.format=locomo_plus``): the items folder, stitched into LoCoMo-10
BENCHMARK = Benchmark(load_locomo_plus, CATEGORIES, folder=True, filename="locomo_plus",
                      options=loader_options)
