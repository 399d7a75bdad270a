"""The package's layering (synapse_pt/__init__.py): every import points down, and no module imports
itself back through a chain of others.

Imports are read with ``ast`` from every module of the package, at module level and inside
functions alike (a function-level import that closes a cycle is still a cycle)."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "synapse_pt"

#: each room (subpackage or top-level module) and its layer: a module may import its own room
#: and rooms of strictly lower layers
LAYERS = {
    "common": -1,  # what every layer may use: ConfigError, progress, resources, groups, threads
    "cache": -1,  # the on-disk caches (one SQLite key-value store): models/ and above use them
    "data": 0, "models": 0, "nn": 0,
    "graph": 1,
    "retrieval": 2,
    "steps": 3,  # the QA steps a memory's package registers and eval/ reads
    "memory": 4,
    "eval": 5,
    "commands": 6,  # the entry points and their plumbing
    "run": 7, "sweep": 7, "study": 7, "estimate": 7,  # `python -m synapse_pt.<command>`
    "__init__": 8,
}

#: the systems of memory/, each in its own module or package: one imports none of the others, and
#: memory's shared modules (base, declare, episodic, gate, baselines, fused) import none of them
SYSTEMS = ("synapse_pt.memory.synapse", "synapse_pt.memory.gaama", "synapse_pt.memory.membox")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def imports_of(path: Path) -> set[str]:
    """The ``synapse_pt`` modules ``path`` imports (``from a import b`` counts ``a.b`` where it
    is a module, else ``a``)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.add(sub if module_path(sub) else target)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {t for t in found if t == "synapse_pt" or t.startswith("synapse_pt.")}


def module_path(name: str) -> Path | None:
    base = PACKAGE.parent / Path(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def room(name: str) -> str:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def import_graph() -> dict[str, set[str]]:
    return {module_name(p): imports_of(p) for p in PACKAGE.rglob("*.py")}


def test_every_room_has_a_layer() -> None:
    rooms = {room(m) for m in import_graph()}
    assert rooms <= set(LAYERS), f"rooms without a layer in LAYERS: {sorted(rooms - set(LAYERS))}"


def test_the_package_docstring_lists_every_room_in_its_layer() -> None:
    """synapse_pt/__init__.py's layer list (top down, one layer per line) names every room once,
    each line's rooms share a layer, and no line sits below one of a lower layer."""
    doc = (PACKAGE / "__init__.py").read_text().split("::\n", 1)[1].split('"""', 1)[0]
    lines = []  # the rooms each line of the list starts with, top down
    for line in doc.splitlines():
        rooms = []
        for token in line.split():
            named = re.fullmatch(r"([a-z_]+)(?:\.py|/)", token)
            if named is None:
                break
            rooms.append(named.group(1))
        if rooms:
            lines.append(rooms)
    listed = [r for rooms in lines for r in rooms]
    assert sorted(listed) == sorted(set(LAYERS) - {"__init__"}), listed
    layers = [{LAYERS[r] for r in rooms} for rooms in lines]
    assert all(len(on_line) == 1 for on_line in layers), lines
    order = [on_line.pop() for on_line in layers]
    assert order == sorted(order, reverse=True), lines


def test_no_import_points_up_or_sideways() -> None:
    wrong = sorted((m, t) for m, targets in import_graph().items() for t in targets
                   if room(m) != room(t) and room(t) != "__init__"
                   and LAYERS[room(t)] >= LAYERS[room(m)])
    assert not wrong, "imports that do not point down: " + ", ".join(f"{m} -> {t}"
                                                                     for m, t in wrong)


#: commands/' modules bottom up: the plumbing, the commands, the study over the run
COMMAND_ROOMS = {"build": 0, "hydra_app": 0, "preflight": 0, "run_log": 0, "study_key": 0,
                 "tracking": 0, "run": 1, "sweep": 1, "estimate": 1, "study": 2}


def test_command_modules_import_down() -> None:
    """Every module of commands/ has a place in :data:`COMMAND_ROOMS`, and imports only modules of
    lower places there (the plumbing imports no command; a command imports no other command but
    the study, which runs every variant through run())."""
    graph = import_graph()
    inside = {m.split(".")[2] for m in graph if room(m) == "commands" and m.count(".") == 2}
    assert inside == set(COMMAND_ROOMS), sorted(inside ^ set(COMMAND_ROOMS))
    wrong = sorted((m, t) for m, targets in graph.items() if room(m) == "commands"
                   and m.count(".") == 2 for t in targets
                   if room(t) == "commands" and t.count(".") == 2
                   and COMMAND_ROOMS[t.split(".")[2]] >= COMMAND_ROOMS[m.split(".")[2]] and t != m)
    assert not wrong, "commands imports that do not point down: " + ", ".join(
        f"{m} -> {t}" for m, t in wrong)


#: eval/'s rooms by job, bottom up: answering and scoring; tables, plots and reports; run records
#: (a run's folder and files, and folders collected into tables); tuning and studies
EVAL_ROOMS = {"qa": 0, "reports": 1, "records": 2, "tuning": 3}


def eval_room(name: str) -> str | None:
    parts = name.split(".")
    return parts[2] if len(parts) > 3 and parts[1] == "eval" else None


def test_eval_rooms_import_down() -> None:
    """Every module of eval/ lives in one of its rooms, and imports only its own room and lower
    ones."""
    graph = import_graph()
    loose = sorted(m for m in graph if room(m) == "eval" and m != "synapse_pt.eval"
                   and eval_room(m) not in EVAL_ROOMS and not m.endswith(tuple(EVAL_ROOMS)))
    assert not loose, f"eval modules outside its rooms: {loose}"
    wrong = sorted((m, t) for m, targets in graph.items() for t in targets
                   if eval_room(m) in EVAL_ROOMS and eval_room(t) in EVAL_ROOMS
                   and EVAL_ROOMS[eval_room(t)] > EVAL_ROOMS[eval_room(m)])
    assert not wrong, "eval imports that point up: " + ", ".join(f"{m} -> {t}" for m, t in wrong)


def system_of(name: str) -> str | None:
    return next((s for s in SYSTEMS if name == s or name.startswith(s + ".")), None)


def test_each_memory_system_keeps_to_its_own_room() -> None:
    wrong = sorted((m, t) for m, targets in import_graph().items() if room(m) == "memory"
                   for t in targets if room(t) == "memory" and system_of(t) is not None
                   and system_of(t) != system_of(m) and m != "synapse_pt.memory")
    assert not wrong, "imports of another memory system: " + ", ".join(f"{m} -> {t}"
                                                                       for m, t in wrong)
    assert all(module_path(s) is not None for s in SYSTEMS), SYSTEMS


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def without_package_inits(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """A package's ``__init__`` re-exporting its modules is not a cycle: drop the edges from a
    package to its own submodules."""
    return {m: {t for t in ts if not t.startswith(m + ".")} for m, ts in graph.items()}


def test_no_import_cycle() -> None:
    found = cycles(without_package_inits(import_graph()))
    assert not found, f"import cycles: {found}"


def test_the_checks_catch_what_they_claim() -> None:
    """The cycle finder and the direction rule on a made-up graph (so a green test means
    something)."""
    graph = defaultdict(set, {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}})
    assert cycles(graph) == [["a", "b", "c"]]
    assert LAYERS[room("synapse_pt.eval.qa.pipeline")] > LAYERS[room("synapse_pt.memory.base")]
    assert eval_room("synapse_pt.eval.qa.scorers.judge") == "qa"
    assert eval_room("synapse_pt.eval.qa") is None
    assert system_of("synapse_pt.memory.gaama.llm_build") == "synapse_pt.memory.gaama"
    assert system_of("synapse_pt.memory.synapse_extra") is None
    assert system_of("synapse_pt.memory.fused") is None
    with pytest.raises(KeyError):
        LAYERS[room("synapse_pt.no_such_room.x")]
