"""The shipped sample conversation and an exact copy of it under another id: the smallest data a
held-out search runs on (folds are sets of conversations, so it needs two), fast and offline.

A memory that keeps each conversation to itself ranks both copies alike, so a candidate scores
the same on the conversation it was chosen on and on the one it is read on."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from synapse_pt.data.source import sample_path

COPY_ID = "sample-copy"


def write_two_conversations(folder: Path) -> Path:
    """Write ``folder/two_conversations.json`` (the sample, then its copy ``COPY_ID``)."""
    (sample,) = json.loads(sample_path().read_text())
    twin = copy.deepcopy(sample)
    twin["sample_id"] = COPY_ID
    path = folder / "two_conversations.json"
    path.write_text(json.dumps([sample, twin]))
    return path
