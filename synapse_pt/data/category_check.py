"""Every question's category checked at load against the run's category names and scorer.

A category number outside them (a LoCoMo copy with ``"category": 7``) used to load and crash at the
end of the run, in aggregation or in the official scorer after every answer was made, with nothing
written. Here it is refused before any work, naming the file, the question and the field.
"""

from __future__ import annotations

from collections.abc import Mapping

from synapse_pt.data.schema import Dataset

from .categories import OFFICIAL
from .errors import DataFormatError


def scorable_categories(dataset: Dataset) -> set[int]:
    """The categories the run's metrics and scorers handle: the dataset's answerable and
    unanswerable ones that the official token-F1 scorer can route (LoCoMo's 1-5, or the
    benchmark's own :attr:`~synapse_pt.data.schema.Dataset.f1_rules`)."""
    known = set(dataset.answerable) | ({dataset.unanswerable} if dataset.unanswerable else set())
    routed = set(dataset.f1_rules) if dataset.f1_rules else set(OFFICIAL)
    return known & routed


def check_categories(dataset: Dataset, names: Mapping[int, str]) -> None:
    """Raise :class:`~synapse_pt.data.errors.DataFormatError` for the first question whose
    category is missing from ``names`` (``dataset.categories``) or from
    :func:`scorable_categories`."""
    scorable = scorable_categories(dataset)
    for conv in dataset.conversations:
        for q in conv.questions:
            if q.category in names and q.category in scorable:
                continue
            if q.category not in names:
                why = f"not in dataset.categories {dict(sorted(names.items()))}"
            else:
                why = f"not one the {dataset.name} scorer handles ({sorted(scorable)})"
            text = q.question if len(q.question) <= 60 else q.question[:57] + "..."
            raise DataFormatError(dataset.path,
                                  f"conversation {q.sample_id}, question {q.qa_index} ({text!r})",
                                  f"qa[{q.qa_index}].category", f"category {q.category} is {why}")
