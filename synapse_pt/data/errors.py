"""Errors raised by the data layer: each names the file, the record and the field."""

from __future__ import annotations


class DataFormatError(ValueError):
    """A dataset file is malformed.

    The message always names the file, the record (sample index and ``sample_id`` where known) and
    the field path, e.g. ``locomo10.json: sample 3 (conv-44): conversation.session_2[5].text:
    missing``.
    """

    def __init__(self, path: str, record: str, field: str, problem: str) -> None:
        self.path, self.record, self.field, self.problem = path, record, field, problem
        super().__init__(f"{path}: {record}: {field}: {problem}")


class DatasetNotFoundError(FileNotFoundError):
    """No dataset file could be found, read from cache or downloaded."""
