"""Data layer: typed records, the benchmarks (each loader module declares its ``BENCHMARK``:
:mod:`synapse_pt.data.benchmark`), pandas views, data sources."""

from synapse_pt.data.schema import Conversation, Dataset, Dialogue, Question, Session, Turn

from .categories import OFFICIAL, category_names
from .errors import DataFormatError, DatasetNotFoundError
from .frames import questions_frame, turns_frame
from .locomo import load_locomo, parse_date_time
from .source import DatasetFile, ResolvedSource, resolve_dataset_path, sample_path

__all__ = [
    "OFFICIAL", "Conversation", "DataFormatError", "Dataset", "DatasetFile", "DatasetNotFoundError",
    "Dialogue",
    "Question", "ResolvedSource", "Session", "Turn", "category_names", "load_dataset",
    "load_locomo", "parse_date_time", "questions_frame", "resolve_dataset_path", "sample_path",
    "turns_frame",
]


def load_dataset(path: str | None = None, **resolve_kwargs) -> Dataset:
    """Resolve the dataset file (see :func:`resolve_dataset_path`) and load it."""
    source = resolve_dataset_path(path, **resolve_kwargs)
    dataset = load_locomo(source.path, name="sample" if source.is_sample else None)
    if source.is_sample:
        dataset.notes.append("sample conversation shipped with synapse_pt (not LoCoMo)")
    return dataset
