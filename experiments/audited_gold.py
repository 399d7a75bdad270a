"""Every entry of the LoCoMo audit and what synapse_pt's rule makes of it.

    python experiments/audited_gold.py [--data PATH] [--audit PATH] [--out FILE.md]

For each of the audit's entries: its question, error type, the official answer and the audited
gold the rule of :mod:`synapse_pt.data.audit` derives (or "unanswerable as asked", and why), and
the evidence before and after. The last line counts the entries by status,
``unanswerable_as_asked: <n> entries``.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from synapse_pt.data import load_locomo
from synapse_pt.data.audit import UNANSWERABLE, load_audit
from synapse_pt.data.source import default_locomo_path, sha256_file
from synapse_pt.eval.reports.tables import to_markdown


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=default_locomo_path())
    parser.add_argument("--audit", default=None,
                        help="the audit file (default: locomo_audit_errors.json beside the data)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    audit_path = Path(args.audit or Path(args.data).with_name("locomo_audit_errors.json"))
    dataset = load_locomo(args.data)
    audit = load_audit(audit_path, dataset, sha256_file(audit_path))
    questions = {q.key: q for q in dataset.questions()}
    rows = []
    for e in audit.entries.values():
        q = questions[e.key]
        gold = (f"unanswerable as asked ({e.reason})" if e.status == UNANSWERABLE
                else ("= official" if e.answer == q.answer else e.answer))
        rows.append({"id": e.question_id, "question": f"{q.key}: {q.question}",
                     "cat": q.category, "error": e.error_type, "official answer": q.answer,
                     "audited gold": gold,
                     "evidence": ("= official" if e.evidence == q.evidence
                                  else f"{' '.join(q.evidence) or '-'} -> "
                                       f"{' '.join(e.evidence) or '-'}")})
    table = pd.DataFrame(rows).set_index("id")
    counts = Counter((e.error_type, e.status) for e in audit.entries.values())
    summary = pd.DataFrame([{"error type": t, "status": s, "entries": n}
                            for (t, s), n in sorted(counts.items())]).set_index("error type")
    text = [f"audit file {audit_path} (sha256 {audit.sha256[:12]}...), data {args.data}", "",
            to_markdown(summary), "", to_markdown(table)]
    print("\n".join(text))
    if args.out:
        args.out.write_text("\n".join(text) + "\n")
    unanswerable = sum(e.status == UNANSWERABLE for e in audit.entries.values())
    print(f"unanswerable_as_asked: {unanswerable} entries")
    return 0


if __name__ == "__main__":
    sys.exit(main())
