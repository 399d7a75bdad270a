"""The derived-text cache: values computed once per distinct text, served in order, keyed by the
function's identity, shared across connections (another process's view of the file)."""

from __future__ import annotations

import pytest

from synapse_pt.cache.texts import TextValueCache, cached_map, library_versions


def test_misses_computed_once_in_one_call_and_values_in_order(tmp_path) -> None:
    cache = TextValueCache(tmp_path / "t.sqlite")
    calls: list[list[str]] = []

    def upper_tokens(batch: list[str]) -> list[list[str]]:
        calls.append(list(batch))
        return [t.upper().split() for t in batch]

    out = cache.map("upper/v1", ["a b", "c", "a b", ""], upper_tokens)
    assert out == [["A", "B"], ["C"], ["A", "B"], []]
    assert calls == [["a b", "c", ""]]
    assert (cache.hits, cache.misses) == (0, 3)
    assert len(cache) == 3

    out = cache.map("upper/v1", ["c", "d", "a b"], upper_tokens)
    assert out == [["C"], ["D"], ["A", "B"]]
    assert calls[-1] == ["d"]  # only the new text is computed
    assert (cache.hits, cache.misses) == (2, 4)


def test_identity_separates_functions_and_a_second_connection_sees_the_values(tmp_path) -> None:
    path = tmp_path / "t.sqlite"
    TextValueCache(path).map("len/v1", ["abc"], lambda b: [len(t) for t in b])
    other = TextValueCache(path)
    assert other.map("len/v1", ["abc"], lambda b: pytest.fail("recomputed")) == [3]
    assert other.map("len/v2", ["abc"], lambda b: [-1 for _ in b]) == [-1]  # a new identity


def test_wrong_number_of_values_is_an_error_naming_the_function(tmp_path) -> None:
    cache = TextValueCache(tmp_path / "t.sqlite")
    with pytest.raises(ValueError, match="len/v1: compute returned 1 values for 2 texts"):
        cache.map("len/v1", ["a", "b"], lambda b: [1])
    assert len(cache) == 0  # nothing stored


def test_without_a_cache_each_distinct_text_is_computed_once() -> None:
    calls: list[list[str]] = []

    def lengths(batch: list[str]) -> list[int]:
        calls.append(list(batch))
        return [len(t) for t in batch]

    assert cached_map(None, "len", ["ab", "c", "ab"], lengths) == [2, 1, 2]
    assert calls == [["ab", "c"]]


def test_library_versions_names_the_installed_packages() -> None:
    from importlib.metadata import version

    assert library_versions("nltk", "torch") == f"nltk={version('nltk')},torch={version('torch')}"
