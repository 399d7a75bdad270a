"""The related systems' own prompts: read from their source files or their data, never pasted.

GAAMA (``swarna-kpaul/gaama`` at :data:`COMMITS` ``["gaama"]``) keeps its prompts as markdown files
(``prompts/<name>.md``, ``{{key}}`` placeholders, filled by its ``infra/prompt_loader.py`` with
``str.replace``) and its LoCoMo judge as an f-string inside ``evals/locomo/locomo_eval.py``. Membox
(``nnnoidea/Membox``) keeps every prompt as a string constant of ``class Config`` in ``membox.py``.
This module finds those files, checks each one's sha256 against the pinned list shipped with the
package (``manifests/upstream.sha256``), and reads a template by *name*: a GAAMA prompt by its file
name (:func:`gaama_prompt`), a Membox string by its attribute name (:func:`membox_constant`), an
f-string by the function and variable it is assigned to (:func:`fstring`); never by line number.

A template inside a Python source has two routes, which give the same :class:`Template`:

- the source file itself, read with :mod:`ast`;
- ``templates.json`` (the shared data's ``upstream/templates.json``: each template as data, with
  its source file's sha256 at the pinned commit), where the source is not at hand. The file's own
  sha256 is pinned too, and every entry's ``file_sha256`` must be the pinned sha256 of its source.

Where the files come from (first hit wins; :func:`resolve_upstream_file`):

1. an explicit folder (config ``eval.upstream_path``), else
2. the ``SYNAPSE_UPSTREAM`` environment variable, else
3. ``../shared/data/upstream`` beside the checkout: in that folder the file itself, else (for a
   Python source) its ``templates.json``;
4. the cache folder (``~/.cache/synapse_pt/upstream``), likewise, where
5. a file is downloaded from ``raw.githubusercontent.com`` at the pinned commit when allowed
   (``allow_download``), sha256-checked before it is used.

A file that is missing everywhere stops the run with one :class:`UpstreamNotFoundError` line that
says where to put it; a file whose sha256 is not the pinned one stops it with
:class:`UpstreamMismatchError` (its prompts would not be the ones the published numbers used).
"""

from __future__ import annotations

import ast
import functools
import json
import os
import urllib.error
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from synapse_pt.common.resources import checkout_root

from .errors import DatasetNotFoundError
from .source import DEFAULT_CACHE_DIR, download, sha256_file

ENV_VAR = "SYNAPSE_UPSTREAM"
KEY = "eval.upstream_path"

#: ``{system: (GitHub repository, full commit)}``: the commits SPEC §2 names (gaama 2d992f7,
#: Membox 3d1fa84).
COMMITS: dict[str, tuple[str, str]] = {
    "gaama": ("swarna-kpaul/gaama", "2d992f7f7b97c802bfe4c799878a5477cac1b6ff"),
    "membox": ("nnnoidea/Membox", "3d1fa84916fae6a41b884a48a7b01cc8c4c0aa9b"),
}


class UpstreamNotFoundError(DatasetNotFoundError):
    """A related system's source file the run needs is in none of the places looked at."""


class UpstreamMismatchError(DatasetNotFoundError):
    """A related system's source file is there but is not the pinned version (sha256 differs)."""


#: the templates of the Python sources, as data (the shared ``upstream/templates.json``)
TEMPLATES = "templates.json"


@functools.cache
def pinned_sha256() -> dict[str, str]:
    """``{"gaama/prompts/answer_from_memory.md": sha256, ..., "templates.json": sha256}``: the
    upstream files at their pinned commits, and the templates' data file."""
    text = resources.files("synapse_pt.data").joinpath("manifests/upstream.sha256").read_text()
    out = {}
    for line in text.splitlines():
        if line.strip():
            digest, rel = line.split(maxsplit=1)
            out[rel.strip().removeprefix("./")] = digest
    return out


def default_root() -> Path | None:
    """``../shared/data/upstream`` beside the checkout (``None`` for an installed package)."""
    root = checkout_root()
    return None if root is None else root.parent / "shared" / "data" / "upstream"


def cache_root() -> Path:
    return DEFAULT_CACHE_DIR / "upstream"


def url_of(rel: str) -> str:
    """The raw GitHub address of ``rel`` (``"<system>/<path in its repository>"``) at the pinned
    commit."""
    system, path = rel.split("/", 1)
    repo, commit = COMMITS[system]
    return f"https://raw.githubusercontent.com/{repo}/{commit}/{path}"


@dataclass(frozen=True)
class UpstreamFile:
    """One source file: ``rel`` (``gaama/prompts/answer_from_memory.md``), where it was read, its
    sha256 (the pinned one), where it came from (``path``, ``env``, ``beside``, ``cache``,
    ``download``) and how: the file itself (``read_from="source"``), or ``templates.json``
    standing in for a Python source (``path`` is then that file, ``data_sha256`` its sha256)."""

    rel: str
    path: Path
    sha256: str
    origin: str
    read_from: str = "source"
    data_sha256: str | None = None

    def text(self) -> str:
        return self.path.read_text(encoding="utf-8")

    def describe(self) -> dict[str, str]:
        """What a run's identity records of the file: its sha256 at the pinned commit and where
        its templates were read (the source, or ``templates.json`` with that file's sha256)."""
        system = self.rel.split("/", 1)[0]
        out = {"file": self.rel, "sha256": self.sha256, "commit": COMMITS[system][1][:7],
               "read_from": self.read_from}
        if self.data_sha256 is not None:
            out["templates_sha256"] = self.data_sha256
        return out


def resolve_upstream_file(rel: str, root: str | os.PathLike | None = None, *,
                          allow_download: bool = True) -> UpstreamFile:
    """Find ``rel`` (see the module docstring for the order) and check its sha256; a Python
    source not at hand in a folder is read from that folder's ``templates.json`` instead.

    Raises:
        KeyError: ``rel`` is not one of the pinned files.
        UpstreamNotFoundError: nowhere to be found (and no download allowed or possible).
        UpstreamMismatchError: found, but not the pinned version (or ``templates.json`` is not
            the pinned one, or one of its entries names another sha256 of its source).
    """
    pinned = pinned_sha256()
    if rel not in pinned or rel == TEMPLATES:
        raise KeyError(f"{rel}: not a pinned upstream file (known: {sorted(pinned)})")
    places: list[tuple[Path, str]] = []
    if root is not None and str(root) != "":
        places.append((Path(root).expanduser(), "path"))
    elif os.environ.get(ENV_VAR):
        places.append((Path(os.environ[ENV_VAR]).expanduser(), "env"))
    elif default_root() is not None:
        places.append((default_root(), "beside"))
    places.append((cache_root(), "cache"))
    for folder, origin in places:
        path = folder / rel
        if path.is_file():
            return _checked(rel, path, origin)
        if rel.endswith(".py") and (folder / TEMPLATES).is_file():
            data = _templates_file(folder / TEMPLATES)
            if any(e.get("file") == rel for e in data.entries):  # it holds this file's templates
                return UpstreamFile(rel, data.path, pinned[rel], origin, TEMPLATES, data.sha256)
        if origin in ("path", "env"):
            break  # an explicit folder that lacks the file is an error, not a hint to look on
    problem = "downloads are disabled"
    if allow_download and places[0][1] not in ("path", "env"):
        dest = cache_root() / rel
        try:
            return _checked(rel, download(url_of(rel), dest, expected_sha256=pinned[rel]),
                            "download")
        except (urllib.error.URLError, OSError, TimeoutError) as err:
            problem = f"downloading {url_of(rel)} failed: {err}"
    where = places[0][0]
    data = f" or its {TEMPLATES}" if rel.endswith(".py") else ""
    raise UpstreamNotFoundError(
        f"{rel}{data}: not found in {where} ({problem}); put the upstream files (gaama 2d992f7, "
        f"Membox 3d1fa84; shared/data/upstream) in a folder and pass {KEY}=/that/folder or set "
        f"{ENV_VAR}=/that/folder (expected: /that/folder/{rel}{data and ' or /that/folder/'}"
        f"{data and TEMPLATES}), or copy them to {cache_root()}; or run with eval.prompts=ours")


def _checked(rel: str, path: Path, origin: str) -> UpstreamFile:
    digest = sha256_file(path)
    want = pinned_sha256()[rel]
    if digest != want:
        raise UpstreamMismatchError(f"{path}: sha256 {digest} is not the pinned {want} of {rel} "
                                    f"at {COMMITS[rel.split('/', 1)[0]][1][:7]}")
    return UpstreamFile(rel, path, digest, origin)


@dataclass(frozen=True)
class _TemplatesData:
    path: Path
    sha256: str
    entries: tuple[Mapping[str, object], ...]


def _templates_file(path: Path) -> _TemplatesData:
    """``templates.json`` at ``path``, its sha256 checked against the pinned one and every
    entry's ``file_sha256`` against the pinned sha256 of its ``file``."""
    digest = sha256_file(path)
    want = pinned_sha256()[TEMPLATES]
    if digest != want:
        raise UpstreamMismatchError(f"{path}: sha256 {digest} is not the pinned {want} of "
                                    f"{TEMPLATES}")
    return _parse_templates(path, digest)


@functools.cache
def _parse_templates(path: Path, sha256: str) -> _TemplatesData:  # sha256 keys the content
    entries = json.loads(path.read_text(encoding="utf-8"))["templates"]
    pinned = pinned_sha256()
    for i, entry in enumerate(entries):
        rel, digest = entry.get("file"), entry.get("file_sha256")
        if rel not in pinned or rel == TEMPLATES or digest != pinned[rel]:
            raise UpstreamMismatchError(
                f"{path}: templates[{i}] ({entry.get('name')!r}): file_sha256 {digest} is not "
                f"the pinned sha256 of {rel} ({pinned.get(rel, 'not a pinned file')})")
    return _TemplatesData(path, sha256, tuple(entries))


# ------------------------------------------------------------------------------------- readers

@dataclass(frozen=True)
class Template:
    """A prompt read from an upstream file, with where it came from.

    ``parts`` alternates literal text and fields: a field is the source text of the expression
    the upstream code puts there (``"query"``, ``"last_raw[:500]"``), filled by :meth:`render`
    as the code fills it (GAAMA's markdown: ``{{key}}`` replaced; Membox's constants:
    ``str.format``; an f-string: its expressions over the given names).
    """

    name: str
    source: UpstreamFile
    text: str  # the template as written in the file
    kind: str  # "markdown" ({{key}}), "format" (str.format), "fstring"
    parts: tuple[str | tuple[str, str], ...] = ()

    def render(self, **values: object) -> str:
        if self.kind == "markdown":  # gaama infra/prompt_loader.py: {{key}} -> value
            text = self.text
            for key, value in values.items():
                text = text.replace("{{" + key + "}}", str(value))
            return text
        if self.kind == "format":
            return self.text.format(**values)
        out = []
        for part in self.parts:
            out.append(part if isinstance(part, str) else _eval_field(part[1], values))
        return "".join(out)

    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(p[0] for p in self.parts if not isinstance(p, str))


def _eval_field(expr: str, values: Mapping[str, object]) -> str:
    """An f-string field of the forms the upstream templates use: a name, or a name sliced by
    constants (``last_raw[:500]``)."""
    node = ast.parse(expr, mode="eval").body
    if isinstance(node, ast.Name):
        return str(values[node.id])
    if (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)
            and isinstance(node.slice, ast.Slice)):
        bounds = [None if b is None else ast.literal_eval(b)
                  for b in (node.slice.lower, node.slice.upper, node.slice.step)]
        return str(values[node.value.id])[slice(*bounds)]
    raise ValueError(f"f-string field {expr!r}: only names and constant slices are supported")


@functools.cache
def _tree(source: str) -> ast.Module:
    return ast.parse(source)


def gaama_prompt(name: str, root: str | os.PathLike | None = None, *,
                 allow_download: bool = True) -> Template:
    """GAAMA's ``prompts/<name>.md`` (as its ``load_prompt(name, variables)`` reads it)."""
    src = resolve_upstream_file(f"gaama/prompts/{name}.md", root, allow_download=allow_download)
    return Template(name, src, src.text(), "markdown")


def membox_constant(name: str, root: str | os.PathLike | None = None, *,
                    allow_download: bool = True) -> Template:
    """The string constant ``name`` of Membox's ``membox.py`` (a ``Config`` class attribute or a
    module-level name); filled with ``str.format`` as the code does."""
    src = resolve_upstream_file("membox/membox.py", root, allow_download=allow_download)
    if src.read_from == TEMPLATES:
        return _from_data(src, name, None, "format")
    return constant_in_source(src.path.read_text(encoding="utf-8"), name, src)


def fstring(rel: str, function: str, variable: str, root: str | os.PathLike | None = None, *,
            allow_download: bool = True) -> Template:
    """The string assigned to ``variable`` inside ``def function`` of the Python file ``rel``
    (an f-string or a plain string; implicit concatenation joined)."""
    src = resolve_upstream_file(rel, root, allow_download=allow_download)
    if src.read_from == TEMPLATES:
        return _from_data(src, variable, function, "fstring")
    return fstring_in_source(src.path.read_text(encoding="utf-8"), function, variable, src)


def _from_data(src: UpstreamFile, name: str, function: str | None, kind: str) -> Template:
    """The entry of ``templates.json`` for ``name`` (in ``function``) of ``src.rel``."""
    data = _parse_templates(src.path, src.data_sha256)
    found = [e for e in data.entries if e.get("file") == src.rel and e.get("name") == name
             and e.get("function") == function]
    where = f"{src.rel}: {function + ': ' if function else ''}{name}"
    if len(found) != 1:
        raise ValueError(f"{src.path}: {len(found)} templates for {where} (expected 1)")
    entry = found[0]
    if entry.get("kind") != kind:
        raise ValueError(f"{src.path}: {where}: kind {entry.get('kind')!r}, expected {kind!r}")
    parts: tuple[str | tuple[str, str], ...] = ()
    if kind == "fstring":
        parts = tuple(p if isinstance(p, str) else (str(p["field"]), str(p["expr"]))
                      for p in entry["parts"])  # type: ignore[union-attr]
    return Template(name, src, str(entry["text"]), kind, parts)


def constant_in_source(source: str, name: str, src: UpstreamFile) -> Template:
    """The string constant ``name`` of the Python ``source`` text, read with :mod:`ast`."""
    found = [node.value.value for node in ast.walk(_tree(source))
             if isinstance(node, (ast.Assign, ast.AnnAssign))
             and any(isinstance(t, ast.Name) and t.id == name
                     for t in (node.targets if isinstance(node, ast.Assign) else [node.target]))
             and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)]
    if len(found) != 1:
        raise ValueError(f"{src.path}: {len(found)} string assignments to {name!r} (expected 1)")
    return Template(name, src, found[0], "format")


def fstring_in_source(source: str, function: str, variable: str, src: UpstreamFile) -> Template:
    """The string assigned to ``variable`` inside ``def function`` of the Python ``source`` text,
    read with :mod:`ast`: its literal pieces and fields as :attr:`Template.parts`."""
    funcs = [n for n in ast.walk(_tree(source))
             if isinstance(n, ast.FunctionDef) and n.name == function]
    if len(funcs) != 1:
        raise ValueError(f"{src.path}: {len(funcs)} functions named {function!r} (expected 1)")
    values = [n.value for n in ast.walk(funcs[0]) if isinstance(n, ast.Assign)
              and any(isinstance(t, ast.Name) and t.id == variable for t in n.targets)
              and isinstance(n.value, (ast.JoinedStr, ast.Constant))]
    if len(values) != 1:
        raise ValueError(f"{src.path}: {function}: {len(values)} string assignments to "
                         f"{variable!r} (expected 1)")
    node = values[0]
    if isinstance(node, ast.Constant):
        return Template(variable, src, str(node.value), "fstring", (str(node.value),))
    parts: list[str | tuple[str, str]] = []
    for piece in node.values:
        if isinstance(piece, ast.Constant):
            parts.append(str(piece.value))
        elif isinstance(piece, ast.FormattedValue) and piece.conversion == -1 \
                and piece.format_spec is None:
            expr = ast.unparse(piece.value)
            root_name = piece.value.value if isinstance(piece.value, ast.Subscript) else piece.value
            parts.append((root_name.id if isinstance(root_name, ast.Name) else expr, expr))
        else:
            raise ValueError(f"{src.path}: {function}: {variable}: an f-string field with a "
                             "conversion or format spec is not supported")
    text = "".join(p if isinstance(p, str) else "{" + p[1] + "}" for p in parts)
    return Template(variable, src, text, "fstring", tuple(parts))
