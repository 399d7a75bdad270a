"""Context-token counting: each distinct text is tokenised once, the counts are per text."""

from __future__ import annotations

from synapse_pt.eval.tokens import HFTokenCounter


def test_counts_with_repeats_equal_counting_each_text_alone() -> None:
    counter = HFTokenCounter()
    texts = ["Nora: I adopted a dog.", "Tomas: pottery class on Tuesday!", "",
             "Nora: I adopted a dog.", "Tomas: pottery class on Tuesday!", "x"]
    alone = [len(counter._tok(t, add_special_tokens=False)["input_ids"]) for t in texts]
    assert counter.count_many(texts) == alone
    # by hand: WordPiece on "x" is one token, an empty text none
    assert alone[2] == 0 and alone[5] == 1
    assert counter.count_many([]) == []
