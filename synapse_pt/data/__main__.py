"""``python -m synapse_pt.data [PATH]``: summarise a dataset: a file in the LoCoMo release format, a
REALTALK folder (``Chat_*.json``) or a BEAM scale folder (``.../beam/100K``: ``<n>/chat.json``)."""

from __future__ import annotations

import argparse
import logging
import sys
from collections import Counter
from pathlib import Path

from synapse_pt.data.schema import Dataset

from . import category_names, load_dataset
from .beam import load_beam
from .errors import DataFormatError, DatasetNotFoundError
from .realtalk import load_realtalk
from .source import default_locomo_path


def folder_kind(folder: Path) -> str:
    """``"realtalk"`` or ``"beam"``: what a dataset folder holds; a :class:`DatasetNotFoundError`
    naming the folder and what it holds otherwise (a folder of BEAM scales names them)."""
    if any(folder.glob("Chat_*.json")):
        return "realtalk"
    def holds_beam(path: Path) -> bool:
        return any(p.name.isdigit() and (p / "chat.json").is_file() for p in path.iterdir())

    if holds_beam(folder):
        return "beam"
    scales = sorted(p.name for p in folder.iterdir() if p.is_dir() and holds_beam(p))
    hint = (f"it holds the BEAM scales {scales}: give one of them, e.g. {folder / scales[0]}"
            if scales else "give a LoCoMo-format file, a REALTALK folder (Chat_*.json) or a "
            "BEAM scale folder (<n>/chat.json)")
    raise DatasetNotFoundError(f"{folder}: a folder with no REALTALK conversation (Chat_*.json) "
                               f"and no BEAM conversation (<n>/chat.json); {hint}")


def load_any(path: str | None) -> tuple[Dataset, str]:
    """The dataset at ``path`` (a file, a REALTALK or a BEAM folder; ``None``: LoCoMo-10 found as
    :func:`~synapse_pt.data.source.resolve_dataset_path` finds it) and its category preset."""
    if path is not None and Path(path).is_dir():
        kind = folder_kind(Path(path))
        return (load_realtalk(path) if kind == "realtalk" else load_beam(path)), kind
    return load_dataset(path, candidates=[default_locomo_path()]), "official"


def summary_lines(dataset, names: dict[int, str]) -> list[str]:
    per_cat = Counter(q.category for q in dataset.questions())
    n_sessions = sum(len(c.sessions) for c in dataset)
    lines = [
        f"file:          {dataset.path}",
        f"sha256:        {dataset.sha256}",
        f"conversations: {len(dataset)}",
        f"sessions:      {n_sessions}",
        f"turns:         {dataset.num_turns}",
        f"questions:     {dataset.num_questions}",
    ]
    for cat in sorted(per_cat):
        lines.append(f"  category {cat} ({names.get(cat, '?')}): {per_cat[cat]}")
    no_answer = sum(1 for q in dataset.questions() if q.answer is None)
    no_evidence = sum(1 for q in dataset.questions() if not q.evidence_raw)
    lines.append(f"questions without 'answer' (adversarial distractor only): {no_answer}")
    lines.append(f"questions with an empty evidence list: {no_evidence}")
    unresolved = dataset.unresolved_evidence()
    lines.append(f"unresolved evidence ids: {len(unresolved)}")
    for sample_id, qa_index, piece in unresolved:
        lines.append(f"  {sample_id} qa[{qa_index}]: {piece!r}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m synapse_pt.data", description=__doc__)
    parser.add_argument("path", nargs="?", default=None,
                        help="dataset file or folder (default: $SYNAPSE_DATA, "
                             "../shared/data/locomo10.json, the cache, or a download)")
    parser.add_argument("--categories", default=None,
                        help="category preset: official|realtalk|beam (default: the "
                             "dataset's own)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(message)s")
    try:
        dataset, preset = load_any(args.path)
    except (DataFormatError, DatasetNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print("\n".join(summary_lines(dataset, category_names(args.categories or preset))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
