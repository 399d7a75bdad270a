"""Write what the settings' declarations say into the two files that show them (issue 60).

    python scripts/settings_doc.py            # rewrite both files from the declaration
    python scripts/settings_doc.py --check    # exit 1 naming each file that is stale

The declarations are :data:`synapse_pt.retrieval.settings.SETTINGS` (each field of
``SynapseParams``: type, default, allowed values, meaning, search entry) and those of the other
settings groups (:data:`GROUPS`: the graph builder's, GAAMA's, Membox's). It writes:

* the ``params:`` and ``readings:`` blocks of ``configs/memory/synapse.yaml`` (between the two
  marker lines; the rest of that file is hand-written): each default with its meaning;
* ``docs/settings.md``: the table of every SYNAPSE retrieval setting (key, type, default,
  allowed, searched, meaning), the rules between settings and who searches what; then one table
  per group of :data:`GROUPS` (key, type, default, allowed, meaning). Their YAML defaults are
  hand-written and checked equal to the declarations by the test.

``tests/retrieval/test_settings.py`` fails while either file differs from what this writes now.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path

import yaml

from synapse_pt.common.declared import settings_of
from synapse_pt.graph.consolidation import Consolidation, Maintenance
from synapse_pt.memory.gaama import settings as gaama
from synapse_pt.memory.membox import settings as membox
from synapse_pt.retrieval.search_space import SPACE
from synapse_pt.retrieval.settings import CROSS_RULES, SETTINGS, Choice, Range, Setting

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "memory" / "synapse.yaml"
DOC = ROOT / "docs" / "settings.md"
BEGIN = ("# >>> memory.params and memory.readings: written by scripts/settings_doc.py from their "
         "declaration")
END = "# <<< end of the written block"
COMMENT_COLUMN = 27  # where an inline comment starts, as in the hand-written rest of the file
WIDTH = 100

NODE_HEADERS = {
    "params": ("Retrieval: the paper's hyperparameters at the paper's values (SPEC §1.2; the "
               "paper's implementation table)"),
    "readings": ("Retrieval: what the paper leaves open (SPEC §1.5), each default the literal "
                 "reading or ours where the paper is silent (study: experiments/readings.md)"),
}
TYPES = {"number": "float", "integer": "int", "flag": "bool", "choice": "str", "text": "str"}

#: the other settings groups, each a table of docs/settings.md: (heading, the config file whose
#: YAML sets their defaults, the node of that file holding them (``None``: its top level), the
#: groups, what the table says of them, the rules between their settings)
GROUPS = (
    ("The graph builder (`memory=synapse`)", "synapse.yaml", "graph",
     (Consolidation, Maintenance),
     "`Consolidation` and `Maintenance` in `synapse_pt/graph/consolidation.py` (SPEC §1.1).",
     ()),
    ("GAAMA (`memory=gaama`)", "gaama.yaml", None, (gaama.Retrieval, gaama.Build),
     "`Retrieval` and `Build` in `synapse_pt/memory/gaama/settings.py`; values the public "
     "code's (gaama `2d992f7`) unless marked ours.",
     ("`memory.replies=code` needs `memory.prompts=upstream` (it reads GAAMA's own reply "
      "form)",)),
    ("Membox (`memory=membox`)", "membox.yaml", None, (membox.Retrieval, membox.Build),
     "`Retrieval` and `Build` in `synapse_pt/memory/membox/settings.py`; values the code's "
     "(`membox.py`) unless marked ours.",
     ("`1 <= memory.min_keywords <= memory.max_keywords`",)),
)


def yaml_value(value: object) -> str:
    """``value`` as YAML writes it in flow style (``0.8``, ``true``, ``cosine``)."""
    return yaml.safe_dump(value, default_flow_style=True).split("\n", 1)[0]


def wrap(text: str, prefix: str) -> list[str]:
    """``text`` as comment lines of at most :data:`WIDTH` characters, each starting ``prefix``
    (words kept whole, hyphenated ones too)."""
    return textwrap.wrap(text, WIDTH, initial_indent=prefix, subsequent_indent=prefix,
                         break_on_hyphens=False)


def yaml_entry(declared: Setting) -> list[str]:
    """One setting's lines: ``key: default`` with its meaning as the comment, inline where it
    fits in :data:`WIDTH`, else wrapped above."""
    entry = f"  {declared.name}: {yaml_value(declared.default)}"
    inline = f"{entry:<{COMMENT_COLUMN}}# {declared.meaning}"
    if len(inline) <= WIDTH:
        return [inline]
    return [*wrap(declared.meaning, "  # "), entry]


def yaml_block() -> str:
    """The marked block of ``configs/memory/synapse.yaml``, markers included."""
    lines = [f"{BEGIN}", "# (synapse_pt/retrieval/settings.py): edit there and rerun it. Types, "
             "allowed values and", "# search ranges: docs/settings.md"]
    for node, header in NODE_HEADERS.items():
        lines += wrap(header, "# ")
        lines.append(f"{node}:")
        for declared in SETTINGS.values():
            if declared.node == node:
                lines += yaml_entry(declared)
    lines.append(END)
    return "\n".join(lines) + "\n"


def config_text(current: str) -> str:
    """``current`` (the config file's text) with its marked block written anew."""
    start, stop = current.find(BEGIN), current.find(END)
    if start < 0 or stop < start:
        raise SystemExit(f"{CONFIG}: no block between the lines {BEGIN!r} and {END!r}")
    stop = current.index("\n", stop) + 1
    return current[:start] + yaml_block() + current[stop:]


def cell(text: str) -> str:
    """``text`` in a Markdown table cell (a ``|`` escaped)."""
    return text.replace("|", "\\|")


def searched(declared: Setting) -> str:
    """How the searches vary the setting, in words."""
    entry = SPACE.get(declared.key)
    if isinstance(entry, Range):
        return f"uniform [{entry.low:g}, {entry.high:g}]"
    if isinstance(entry, Choice):
        return ", ".join(f"`{yaml_value(v)}`" for v in entry.values)
    return ""


def allowed(declared: Setting) -> str:
    """The allowed values in a table cell."""
    null = ", `null`" if declared.optional else ""
    if declared.kind == "choice":
        return ", ".join(f"`{v}`" for v in declared.choices or ()) + null
    if declared.kind == "flag":
        return "`true`, `false`"
    if declared.kind == "text":
        return "a text" + (" or `null`" if declared.optional else "")
    return declared.allowed().removeprefix("an integer ")


DOC_TEMPLATE = """# Settings

<!-- written by scripts/settings_doc.py from the declarations (synapse_pt/retrieval/settings.py,
synapse_pt/graph/consolidation.py, synapse_pt/memory/gaama/settings.py,
synapse_pt/memory/membox/settings.py): edit there and rerun it -->

Every setting below is declared once, with `setting(...)` of `synapse_pt/common/declared.py`:
its type, default, allowed values and meaning; the tables are read from there, and a test checks
each YAML default equal to its declaration.

## SYNAPSE's retrieval settings

Every setting of SYNAPSE's retrieval (SPEC §1.2, and the readings of §1.5) is declared once, as a
field of `SynapseParams` in `synapse_pt/retrieval/settings.py`; this table, the defaults in
`configs/memory/synapse.yaml` and the search space are read from there. A run sets one on the
command line (`python -m synapse_pt.run memory.params.beta=0.3 memory.readings.energy=max`); a
wrong type or value stops the run before it starts, with one line naming the key
(`memory.params.beta must be >= 0, got -1`). Inside a batched sweep a float may be a tensor of one
value per query column.

| key | type | default | allowed | searched | meaning |
|---|---|---|---|---|---|
{rows}

Rules between settings, checked after each setting's own:

{rules}

**Searched**: the one search space (`synapse_pt/retrieval/search_space.py`). The batched sweep
(`python -m synapse_pt.sweep`) draws the uniform ranges; the held-out search
(`scripts/tune_heldout.py`) combines the choices and draws the ranges but `tau_gate`, which it
calibrates per fold; Optuna (`-m hparams_search=synapse_optuna`) searches every entry.
{groups}"""


def doc_text() -> str:
    """``docs/settings.md``."""
    rows = [f"| `memory.{s.key}` | {TYPES[s.kind]} | `{yaml_value(s.default)}` | "
            f"{cell(allowed(s))} | {cell(searched(s))} | {cell(s.meaning)} |"
            for s in SETTINGS.values()]
    rules = [f"- {rule}" for rule in CROSS_RULES]
    return DOC_TEMPLATE.format(rows="\n".join(rows), rules="\n".join(rules),
                               groups="".join(group_table(*g) for g in GROUPS))


def type_of(declared: Setting) -> str:
    """The setting's type in a table cell (``int or null``)."""
    return TYPES[declared.kind] + (" or null" if declared.optional else "")


def group_table(heading: str, config: str, node: str | None, classes: Sequence[type],
                about: str, rules: Sequence[str]) -> str:
    """One settings group's section of ``docs/settings.md``: its table and its rules."""
    rows = [f"| `{s.config_key}` | {type_of(s)} | `{yaml_value(s.default)}` | "
            f"{cell(allowed(s))} | {cell(s.meaning)} |"
            for cls in classes for s in settings_of(cls).values()]
    where = f"the `{node}:` node of " if node else ""
    text = (f"\n## {heading}\n\n{about} Defaults set in {where}`configs/memory/{config}`.\n\n"
            "| key | type | default | allowed | meaning |\n|---|---|---|---|---|\n"
            + "\n".join(rows) + "\n")
    if rules:
        text += "\nRules between settings:\n\n" + "\n".join(f"- {r}" for r in rules) + "\n"
    return text


def stale() -> list[Path]:
    """The files that differ from what the declaration writes now."""
    return [path for path, text in ((CONFIG, config_text(CONFIG.read_text())), (DOC, doc_text()))
            if not path.is_file() or path.read_text() != text]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if stale")
    args = parser.parse_args(argv)
    if args.check:
        for path in stale():
            print(f"{path}: stale; run python scripts/settings_doc.py")
        return 1 if stale() else 0
    CONFIG.write_text(config_text(CONFIG.read_text()))
    DOC.write_text(doc_text())
    print(f"wrote {CONFIG} and {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
