"""The text a memory indexes for a turn: one template shared by every memory system (SPEC §1.1).

Every memory (SYNAPSE, the baselines, GAAMA, Membox) embeds, BM25-tokenises and shows the answer
model the same rendering of a turn, so a comparison never hinges on one system seeing the speaker's
name and another not. LoCoMo questions name the person they ask about ("What did Caroline ..."),
which an utterance indexed without its speaker cannot match.

Template fields (``str.format`` names):

* ``{speaker}``: the speaker's name;
* ``{text}``: the utterance;
* ``{caption}``: ``" [shares an image: <blip_caption>]"`` for a turn with an image, else ``""``;
* ``{date}``: the session's date, ``"8 May 2023"``;
* ``{dia_id}``: the turn's id (``"D1:3"``).

Defaults and variants (``turn_template`` in ``configs/run.yaml``):

* ``"{speaker}: {text}{caption}"`` (default; what every public LoCoMo harness indexes);
* ``"[{date}] {speaker}: {text}{caption}"`` (dated, as GAAMA stores episodes);
* ``"{text}{caption}"`` (the utterance alone: the landed code before the fidelity fix).
"""

from __future__ import annotations

import string
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from synapse_pt.data.schema import Turn

__all__ = ["DEFAULT_TURN_TEMPLATE", "TURN_FIELDS", "TurnRenderer", "format_date"]

DEFAULT_TURN_TEMPLATE = "{speaker}: {text}{caption}"
TURN_FIELDS = ("speaker", "text", "caption", "date", "dia_id")
CAPTION = " [shares an image: {}]"


def format_day(ts: datetime) -> str:
    """A date as the prompts show it (``"8 May 2023"``); the clock time is left out, as within a
    session it carries the loader's synthetic per-turn offset."""
    return f"{ts.day} {ts:%B %Y}"


def format_date(turn: Turn) -> str:
    """The session date of a turn (:func:`format_day`)."""
    return format_day(turn.timestamp)


@dataclass(frozen=True)
class TurnRenderer:
    """Renders turns with one ``str.format`` template (fields: see the module docstring).

    Args:
        template: the template; an unknown field, a positional field or a template without
            ``{text}`` is an error naming the config key ``turn_template``.
    """

    template: str = DEFAULT_TURN_TEMPLATE

    def __post_init__(self) -> None:
        if not isinstance(self.template, str):
            raise TypeError(f"turn_template must be a string, got {type(self.template).__name__}")
        try:
            fields = [f for _, f, _, _ in string.Formatter().parse(self.template) if f is not None]
        except ValueError as e:
            raise ValueError(f"turn_template {self.template!r} is not a valid format string: "
                             f"{e}") from e
        unknown = sorted({f for f in fields if f not in TURN_FIELDS})
        if unknown:
            raise ValueError(f"turn_template {self.template!r}: unknown field(s) {unknown}; "
                             f"allowed: {list(TURN_FIELDS)}")
        if "text" not in fields:
            raise ValueError(f"turn_template {self.template!r} must contain {{text}}")

    @property
    def fields(self) -> frozenset[str]:
        return frozenset(f for _, f, _, _ in string.Formatter().parse(self.template) if f)

    @property
    def dated(self) -> bool:
        """True when the rendering carries the session date (the prompt then adds none)."""
        return "date" in self.fields

    def __call__(self, turn: Turn) -> str:
        caption = CAPTION.format(turn.blip_caption) if turn.blip_caption else ""
        return self.template.format(speaker=turn.speaker, text=turn.text, caption=caption,
                                    date=format_date(turn), dia_id=turn.dia_id)

    def render(self, turns: Iterable[Turn]) -> list[str]:
        """Renderings of many turns, in order."""
        return [self(t) for t in turns]

