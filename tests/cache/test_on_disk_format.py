"""The caches' files keep the format the earlier code wrote (issue 60: the caches moved into
synapse_pt/cache/ on one mechanism, and every cache file made before must still be read, giving
the same values). Each file here is written by hand with plain sqlite3, with the tables, columns,
keys and value encodings of the code before the move (main 6066065: models/embedding_cache.py,
models/text_cache.py, models/llm/cache.py); the new code reads it, and what the new code writes
is read back the same way by hand."""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Sequence
from pathlib import Path

import pytest
import torch

from synapse_pt.cache.store import content_key
from synapse_pt.cache.texts import TextValueCache
from synapse_pt.cache.vectors import EmbeddingCache
from synapse_pt.models.llm.base import LLM, ChatRequest, ChatResponse
from synapse_pt.models.llm.cache import CachedLLM, ResponseCache

#: the CREATE statements of the code before the move, verbatim
OLD_EMBEDDINGS = ("CREATE TABLE IF NOT EXISTS embeddings (key TEXT PRIMARY KEY, dim INTEGER, "
                  "vec BLOB)")
OLD_DERIVED = "CREATE TABLE IF NOT EXISTS derived (key TEXT PRIMARY KEY, value TEXT)"
OLD_RESPONSES = """CREATE TABLE IF NOT EXISTS responses (
    key TEXT PRIMARY KEY, request TEXT NOT NULL, response TEXT NOT NULL, created REAL NOT NULL)"""


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def write_by_hand(path: Path, schema: str, insert: str, rows: Sequence[tuple]) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(schema)
        conn.executemany(insert, rows)
    conn.close()


def read_by_hand(path: Path, query: str) -> list[tuple]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(query).fetchall()
    finally:
        conn.close()


def table_sql(path: Path, table: str) -> str:
    return read_by_hand(path, f"SELECT sql FROM sqlite_master WHERE name = '{table}'")[0][0]


def test_an_embedding_file_of_the_old_code_reads_the_same_vectors(tmp_path: Path) -> None:
    """Key sha256(identity NUL text); ``vec`` the float32 bytes (little-endian here), ``dim``."""
    path = tmp_path / "embeddings.sqlite"
    # 1.0, -2.5, 0.125 as float32: 0x3f800000, 0xc0200000, 0x3e000000, little-endian
    vec = bytes.fromhex("0000803f" "000020c0" "0000003e")
    write_by_hand(path, OLD_EMBEDDINGS, "INSERT INTO embeddings VALUES (?, ?, ?)",
                  [(sha("minilm|256|float32\x00hello"), 3, vec)])
    cache = EmbeddingCache(path)
    key = content_key("minilm|256|float32", "hello")
    assert key == sha("minilm|256|float32\x00hello")
    found = cache.get_many([key, sha("minilm|256|float32\x00absent")])
    assert list(found) == [key] and found[key].dtype == torch.float32
    assert found[key].tolist() == [1.0, -2.5, 0.125]
    assert (cache.hits, cache.misses, len(cache)) == (1, 1, 1)

    # what the new code writes, the old code's reader reads: the same columns and bytes
    written = sha("m\x00x")
    cache.put_many([(written, torch.tensor([0.5, 2.0]))])
    cache.close()
    assert read_by_hand(path, f"SELECT dim, vec FROM embeddings WHERE key = '{written}'") \
        == [(2, bytes.fromhex("0000003f" "00000040"))]
    assert table_sql(path, "embeddings") == OLD_EMBEDDINGS.replace(" IF NOT EXISTS", "")


def test_a_text_value_file_of_the_old_code_reads_the_same_values(tmp_path: Path) -> None:
    """Key sha256(identity NUL text); ``value`` the JSON text (``json.dumps``' separators)."""
    path = tmp_path / "text.sqlite"
    write_by_hand(path, OLD_DERIVED, "INSERT INTO derived VALUES (?, ?)", [
        (sha("tokens/v1\x00Caroline went home"), '["caroline", "went", "home"]'),
        (sha("len/v1\x00abc"), "3")])
    cache = TextValueCache(path)
    assert cache.map("tokens/v1", ["Caroline went home"], lambda b: pytest.fail("recomputed")) \
        == [["caroline", "went", "home"]]
    assert cache.map("len/v1", ["abc", "abc"], lambda b: pytest.fail("recomputed")) == [3, 3]
    assert cache.map("len/v1", ["abcd"], lambda b: [len(t) for t in b]) == [4]
    assert cache.map("x", ["y"], lambda b: [{"b": [1, 2], "a": "é"}]) == [{"b": [1, 2], "a": "é"}]
    assert (cache.hits, cache.misses) == (2, 2)
    cache.close()
    assert read_by_hand(path, "SELECT key, value FROM derived ORDER BY value") == sorted([
        (sha("tokens/v1\x00Caroline went home"), '["caroline", "went", "home"]'),
        (sha("len/v1\x00abc"), "3"), (sha("len/v1\x00abcd"), "4"),
        (sha("x\x00y"), '{"b": [1, 2], "a": "\\u00e9"}')], key=lambda r: r[1])
    assert table_sql(path, "derived") == OLD_DERIVED.replace(" IF NOT EXISTS", "")


class Refuses(LLM):
    """A backend that must not be asked: every answer has to come from the file."""

    backend, model = "openai", "gpt-4o-mini"

    def generate(self, requests: Sequence[ChatRequest]) -> list[ChatResponse]:
        raise AssertionError(f"asked {len(requests)} requests: the cache was missed")

    def count_tokens(self, text: str) -> int:
        return len(text.split())


#: the canonical request of ChatRequest((("user", "Hi"),)) for openai/gpt-4o-mini, by hand
REQUEST = ('{"backend":"openai","messages":[["user","Hi"]],"model":"gpt-4o-mini",'
           '"parameters":{"extra":{},"max_tokens":64,"seed":0,"stop":[],"temperature":0.0}}')
RESPONSE = ('{"completion_tokens": 2, "latency_s": 0.25, "meta": {"finish_reason": "stop"}, '
            '"model": "gpt-4o-mini-2024-07-18", "prompt_tokens": 9, "text": "Hello."}')


def test_a_response_file_of_the_old_code_answers_without_asking(tmp_path: Path) -> None:
    """Key sha256(canonical request JSON); ``response`` the response's JSON (sorted keys, no
    ``cached``); an existing key keeps its first answer."""
    path = tmp_path / "llm_responses.sqlite"
    write_by_hand(path, OLD_RESPONSES, "INSERT INTO responses VALUES (?, ?, ?, ?)",
                  [(sha(REQUEST), REQUEST, RESPONSE, 1700000000.0)])
    llm = CachedLLM(Refuses(), path)
    [answer] = llm.generate([ChatRequest((("user", "Hi"),))])
    assert answer == ChatResponse("Hello.", 9, 2, 0.25, "gpt-4o-mini-2024-07-18", cached=True,
                                  meta={"finish_reason": "stop"})
    assert (llm.hits, llm.misses) == (1, 0)

    cache = ResponseCache(path)
    cache.put(sha(REQUEST), REQUEST, ChatResponse("Other.", 1, 1, 0.1, "m"))  # kept: the first
    cache.put(sha("{}"), "{}", ChatResponse("Bye.", 3, 1, 0.5, "m", meta={"n": 1}))
    cache.close()
    rows = read_by_hand(path, "SELECT key, request, response FROM responses ORDER BY created")
    assert rows == [(sha(REQUEST), REQUEST, RESPONSE), (sha("{}"), "{}", (
        '{"completion_tokens": 1, "latency_s": 0.5, "meta": {"n": 1}, "model": "m", '
        '"prompt_tokens": 3, "text": "Bye."}'))]
    assert table_sql(path, "responses") == OLD_RESPONSES.replace(" IF NOT EXISTS", "")


def test_an_unreadable_response_row_names_the_file_and_key(tmp_path: Path) -> None:
    path = tmp_path / "llm_responses.sqlite"
    write_by_hand(path, OLD_RESPONSES, "INSERT INTO responses VALUES (?, ?, ?, ?)",
                  [("k1", "{}", '{"text": "no counts"}', 0.0)])
    with pytest.raises(ValueError, match=f"{path} key k1: unreadable cached response"):
        ResponseCache(path).get_many(["k1"])
