"""Context-token counting: each distinct text is tokenised once, the counts are per text, and the
disk cache serves a rerun without loading the tokenizer."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from synapse_pt.cache.texts import TextValueCache
from synapse_pt.eval.qa.tokens import HFTokenCounter
from synapse_pt.models.locate import bundled_minilm_path

TEXTS = ["Nora: I adopted a dog.", "Tomas: pottery class on Tuesday!", "",
         "Nora: I adopted a dog.", "Tomas: pottery class on Tuesday!", "x"]


def _alone(texts: list[str]) -> list[int]:
    """Each text through the library's tokenizer on its own (the reference)."""
    tok = AutoTokenizer.from_pretrained(str(bundled_minilm_path()), local_files_only=True,
                                        model_max_length=10**9)
    return [len(tok(t, add_special_tokens=False)["input_ids"]) for t in texts]


def test_counts_with_repeats_equal_counting_each_text_alone() -> None:
    counter = HFTokenCounter()
    alone = _alone(TEXTS)
    assert counter.count_many(TEXTS) == alone
    # by hand: WordPiece on "x" is one token, an empty text none
    assert alone[2] == 0 and alone[5] == 1
    assert counter.count_many([]) == []


def test_cached_counts_equal_uncached_and_a_rerun_never_loads_the_tokenizer(
        tmp_path, monkeypatch) -> None:
    cache = TextValueCache(tmp_path / "text.sqlite")
    first = HFTokenCounter(cache=cache)
    assert first.count_many(TEXTS) == _alone(TEXTS)
    assert (cache.hits, cache.misses) == (0, 4)  # four distinct texts, each counted once

    rerun = HFTokenCounter(cache=TextValueCache(tmp_path / "text.sqlite"))
    monkeypatch.setattr(rerun, "_tokenizer", lambda: pytest.fail("tokenizer loaded on a rerun"))
    assert rerun.count_many(list(reversed(TEXTS))) == list(reversed(_alone(TEXTS)))
    assert (rerun.cache.hits, rerun.cache.misses) == (4, 0)


def test_the_cache_key_follows_the_tokenizer_files_not_their_path(tmp_path) -> None:
    import json
    import shutil

    a, b = tmp_path / "a", tmp_path / "b"
    for folder in (a, b):
        folder.mkdir()
        for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt",
                     "special_tokens_map.json", "config.json"):
            shutil.copy(bundled_minilm_path() / name, folder / name)
    assert HFTokenCounter(a)._identity.split("@")[1] == HFTokenCounter(b)._identity.split("@")[1]
    config = json.loads((b / "tokenizer_config.json").read_text())
    config["do_lower_case"] = not config.get("do_lower_case", True)
    (b / "tokenizer_config.json").write_text(json.dumps(config))
    assert HFTokenCounter(a)._identity.split("@")[1] != HFTokenCounter(b)._identity.split("@")[1]
