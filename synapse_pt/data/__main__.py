"""``python -m synapse_pt.data [PATH]``: summarise a dataset file in the LoCoMo release format."""

from __future__ import annotations

import argparse
import logging
import sys
from collections import Counter

from . import category_names, load_dataset
from .errors import DataFormatError, DatasetNotFoundError
from .source import default_locomo_path


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
                        help="dataset file (default: $SYNAPSE_DATA, ../shared/data/locomo10.json, "
                             "the cache, or a download)")
    parser.add_argument("--categories", default="official", help="category preset: official|amem")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(message)s")
    try:
        dataset = load_dataset(args.path, candidates=[default_locomo_path()])
    except (DataFormatError, DatasetNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print("\n".join(summary_lines(dataset, category_names(args.categories))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
