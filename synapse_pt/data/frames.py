"""pandas views of a dataset: one row per turn, one row per question."""

from __future__ import annotations

import pandas as pd

from synapse_pt.data.schema import Dataset

from .categories import category_names


def turns_frame(dataset: Dataset) -> pd.DataFrame:
    """One row per turn: sample_id, session, turn index, dia_id, speaker, text, caption, time."""
    rows = [
        {
            "sample_id": t.sample_id,
            "session": t.session_index,
            "turn_index": t.turn_index,
            "dia_id": t.dia_id,
            "speaker": t.speaker,
            "text": t.text,
            "blip_caption": t.blip_caption,
            "timestamp": t.timestamp,
        }
        for t in dataset.turns()
    ]
    return pd.DataFrame(rows, columns=["sample_id", "session", "turn_index", "dia_id", "speaker",
                                       "text", "blip_caption", "timestamp"])


def questions_frame(dataset: Dataset, names: str | dict = "official") -> pd.DataFrame:
    """One row per question, with the category's raw number and its name under ``names``."""
    mapping = category_names(names)
    rows = [
        {
            "sample_id": q.sample_id,
            "qa_index": q.qa_index,
            "category": q.category,
            "category_name": mapping.get(q.category, f"category-{q.category}"),
            "question": q.question,
            "answer": q.answer,
            "adversarial_answer": q.adversarial_answer,
            "evidence": list(q.evidence),
            "evidence_unresolved": list(q.evidence_unresolved),
        }
        for q in dataset.questions()
    ]
    return pd.DataFrame(rows, columns=["sample_id", "qa_index", "category", "category_name",
                                       "question", "answer", "adversarial_answer", "evidence",
                                       "evidence_unresolved"])
