"""Settings declared once (issue 60): the mechanism every layer declares its settings with.

A setting is a dataclass field made by :func:`setting`: its type is the field's annotation (a kind
of :data:`KINDS`, ``| None`` where null is allowed), its default the field's, and the field's
metadata holds the rest, a :class:`Setting`: the config node it sits under, the allowed range
(``low``/``high`` inclusive, ``above``/``below`` exclusive) or ``choices``, the one-line
``meaning`` and, where a search varies it, its search :class:`Range` or :class:`Choice`. Everything
reads that declaration (:func:`settings_of`): the one check of a value (:func:`check`, one line
naming the key ``memory.<node>.<name>``), a frozen group's checks (:func:`check_fields`, called by
its ``__post_init__``), the searches, the YAML defaults and docs/settings.md
(``scripts/settings_doc.py``). SYNAPSE's retrieval settings (:mod:`synapse_pt.retrieval.settings`),
the graph builder's (:mod:`synapse_pt.graph.consolidation`), GAAMA's and Membox's are declared so.
"""

from __future__ import annotations

import numbers
import os
from dataclasses import dataclass, field, fields, is_dataclass, replace
from functools import cache
from typing import Any

import torch

from synapse_pt.common.errors import ConfigError

__all__ = ["KINDS", "Choice", "Range", "Setting", "check", "check_fields", "choice_sets",
           "int_minimums", "settings_of", "setting"]


@dataclass(frozen=True)
class Range:
    """A continuous hyperparameter's search range, drawn uniformly in ``[low, high]``."""

    low: float
    high: float
    meaning: str = ""


@dataclass(frozen=True)
class Choice:
    """A discrete setting's search values (in this order: a search's grid)."""

    values: tuple
    meaning: str = ""


#: the kinds of setting, by the annotation of their field (``| None`` aside): a number (a float,
#: or for SYNAPSE a ``[B]`` tensor of one value per query column in a batched sweep), an integer,
#: a flag, one of named choices (a ``str`` with ``choices``) or a free text (a ``str`` without)
KINDS = {"Scalar": "number", "float": "number", "int": "integer", "bool": "flag", "str": "choice"}
_NULL = " | None"


@dataclass(frozen=True)
class Setting:
    """One declared setting: ``memory.<node>.<name>`` (``memory.<name>`` where ``node`` is
    empty), its ``kind`` (:data:`KINDS`), ``default``, ``optional`` (null allowed), allowed values
    (``low``/``high`` inclusive and ``above``/``below`` exclusive bounds of a number or integer,
    ``None``: unbounded; ``choices`` of a choice), one-line ``meaning`` and the ``search`` entry of
    the searches that vary it (``None``: none does). ``name``, ``kind``, ``optional`` and
    ``default`` come from the field."""

    node: str
    meaning: str
    low: float | None = None
    high: float | None = None
    above: float | None = None
    below: float | None = None
    choices: tuple | None = None
    search: Range | Choice | None = None
    name: str = ""
    kind: str = ""
    optional: bool = False
    default: Any = None

    @property
    def key(self) -> str:
        """The key under ``memory`` (``params.S``, ``graph.window``, ``seeds``): what a search
        and a run override name."""
        return f"{self.node}.{self.name}" if self.node else self.name

    @property
    def config_key(self) -> str:
        """The key as the user writes it (``memory.params.S``)."""
        return f"memory.{self.key}"

    def allowed(self, null: bool = True) -> str:
        """The allowed values in words (``>= 0``, ``[0, 1]``, ``an integer >= 1``, ...), ``or
        null`` where null is allowed and ``null`` (an error about a value that is not null says
        what the value may be, as the checks before the declaration did)."""
        if self.kind == "choice":
            words = f"one of {list(self.choices or ())}"
        elif self.kind == "flag":
            words = "true or false"
        elif self.kind == "text":
            words = "a text"
        else:
            bounds = self.bounds()
            words = bounds if self.kind == "number" else f"an integer {bounds}"
        return f"{words} or null" if self.optional and null else words

    def bounds(self) -> str:
        """``[lo, hi]``, ``(lo, hi]``, ``>= lo``, ``> lo``, ``<= hi`` or ``any``."""
        lo = self.low if self.low is not None else self.above
        hi = self.high if self.high is not None else self.below
        left = "[" if self.low is not None else "("
        right = "]" if self.high is not None else ")"
        if lo is not None and hi is not None:
            return f"{left}{lo:g}, {hi:g}{right}"
        if lo is not None:
            return f"{'>=' if left == '[' else '>'} {lo:g}"
        return f"{'<=' if right == ']' else '<'} {hi:g}" if hi is not None else "any"

    def outside(self, lo: float, hi: float) -> bool:
        """Whether values spanning ``[lo, hi]`` leave the allowed bounds."""
        return ((self.low is not None and lo < self.low)
                or (self.above is not None and lo <= self.above)
                or (self.high is not None and hi > self.high)
                or (self.below is not None and hi >= self.below))


def setting(node: str, default: Any, meaning: str, *, low: float | None = None,
            high: float | None = None, above: float | None = None, below: float | None = None,
            choices: tuple | None = None, search: Range | Choice | None = None) -> Any:
    """The dataclass field of a :class:`Setting` of config node ``node`` (``"params"``,
    ``"graph"``; ``""`` for a flat ``memory.<name>``) with its ``default``."""
    return field(default=default, metadata={"setting": Setting(
        node=node, meaning=meaning, low=low, high=high, above=above, below=below,
        choices=choices, search=search)})


def check(declared: Setting, value: Any) -> None:
    """``value`` is allowed for ``declared``, else a :class:`ConfigError` of one line naming the
    key (``memory.params.beta must be >= 0, got -1``)."""
    key, kind = declared.config_key, declared.kind
    if value is None and declared.optional:
        return
    if kind == "choice":
        if isinstance(value, torch.Tensor) or value not in (declared.choices or ()):
            raise ConfigError(f"{key} must be {declared.allowed(False)}, got {value!r}")
    elif kind == "flag":
        if not isinstance(value, bool):
            raise ConfigError(f"{key} must be {declared.allowed(False)}, got {value!r}")
    elif kind == "text":
        if not isinstance(value, str | os.PathLike):
            raise ConfigError(f"{key} must be {declared.allowed(False)}, got {value!r}")
    elif kind == "integer":
        if (isinstance(value, bool) or not isinstance(value, numbers.Integral)
                or declared.outside(value, value)):
            raise ConfigError(f"{key} must be {declared.allowed(False)}, got {value!r}")
    else:
        _check_number(declared, value)


def _check_number(declared: Setting, value: Any) -> None:
    """A finite number, or a non-empty tensor of them, within the bounds."""
    key, null = declared.config_key, " or null" if declared.optional else ""
    t = None if isinstance(value, str | bool) or value is None else _float64(value)
    if t is None:
        raise ConfigError(f"{key} must be a number{null}, got {value!r}")
    if t.numel() == 0 or not torch.isfinite(t).all():
        raise ConfigError(f"{key} must be finite, got {value!r}")
    if declared.outside(float(t.min()), float(t.max())):
        shown = value if t.numel() == 1 else (f"values in [{float(t.min()):g}, "
                                              f"{float(t.max()):g}]")
        raise ConfigError(f"{key} must be {declared.allowed(False)}, got {shown}")


def _float64(value: Any) -> torch.Tensor | None:
    """``value`` as a float64 tensor, or ``None`` where it is not numbers (a list of words)."""
    try:
        return torch.as_tensor(value, dtype=torch.float64)
    except (TypeError, ValueError, RuntimeError):
        return None


def _complete(owner: str, f: Any) -> Setting:
    """The field's :class:`Setting` completed from the field (name, kind, optional, default) and
    checked: an annotation of :data:`KINDS`, choices only for a ``str``, an allowed default."""
    annotation = str(f.type)
    optional = annotation.endswith(_NULL)
    kind = KINDS.get(annotation.removesuffix(_NULL), "")
    meta = f.metadata["setting"]
    if kind == "choice" and not meta.choices:
        kind = "text"
    declared = replace(meta, name=f.name, kind=kind, optional=optional, default=f.default)
    if not kind or (meta.choices is not None and kind != "choice") or not meta.meaning.strip():
        raise TypeError(f"{owner}.{f.name}: a setting annotated one of {list(KINDS)} (or "
                        "null), with choices only when it is a str, and a meaning")
    check(declared, declared.default)
    return declared


@cache
def settings_of(cls: type) -> dict[str, Setting]:
    """Every declared setting of the dataclass ``cls`` by field name, in declared order (a field
    made otherwise is no setting)."""
    if not is_dataclass(cls):
        raise TypeError(f"{cls.__name__} is not a dataclass")
    return {f.name: _complete(cls.__name__, f) for f in fields(cls) if "setting" in f.metadata}


def check_fields(obj: Any) -> None:
    """Check every declared setting of the frozen dataclass ``obj`` (its ``__post_init__``
    calls this; the rules between settings stay its own), in declared order; a number is made a
    ``float`` and an integer an ``int``."""
    for name, declared in settings_of(type(obj)).items():
        value = getattr(obj, name)
        check(declared, value)
        if value is None or isinstance(value, torch.Tensor):
            continue
        if declared.kind == "number":
            object.__setattr__(obj, name, float(value))
        elif declared.kind == "integer":
            object.__setattr__(obj, name, int(value))


def int_minimums(*groups: type) -> dict[str, int]:
    """The least allowed value of each bounded integer setting of ``groups``, by name (what
    :meth:`~synapse_pt.memory.base.MemorySystem.configure_retrieval` checks)."""
    return {name: int(s.low) for g in groups for name, s in settings_of(g).items()
            if s.kind == "integer" and s.low is not None}


def choice_sets(*groups: type) -> dict[str, tuple]:
    """The allowed values of each choice setting of ``groups``, by name (``None`` among them
    where null is allowed)."""
    return {name: ((None,) if s.optional else ()) + tuple(s.choices or ())
            for g in groups for name, s in settings_of(g).items() if s.kind == "choice"}
