"""A-Mem scorer: worked examples for the set F1 and BLEU-1 (WujiangXu/AgenticMemory utils.py)."""

from __future__ import annotations

import math

import pytest

from synapse_pt.eval.qa.scorers.amem import (
    amem_tokenize,
    bleu1,
    f1_set,
    score_amem,
)
from synapse_pt.eval.qa.scorers.official import f1_tokens
from synapse_pt.eval.qa.scorers.word_tokenize import word_tokenize


def test_tokenize() -> None:
    # lower; ". , ! ?" -> spaces; other punctuation (the apostrophe) stays
    assert amem_tokenize("Hello, World! It's 3.5?") == ["hello", "world", "it's", "3", "5"]
    assert amem_tokenize(7) == ["7"]


def test_f1_is_set_based_and_unstemmed() -> None:
    # sets {paris, france} vs {paris}: P = 1/2, R = 1 -> 2/3
    assert f1_set("Paris paris France", "Paris") == pytest.approx(2 / 3)
    # the official F1 counts the repeat and stems: [paris, paris, franc] vs [paris]
    # P = 1/3, R = 1 -> 0.5
    assert f1_tokens("Paris paris France", "Paris") == pytest.approx(0.5)
    # no stemming: painting != painted
    assert f1_set("painting", "painted") == 0.0
    # articles are not dropped: {the, tower} vs {tower}: P = 1/2, R = 1 -> 2/3
    assert f1_set("the tower", "tower") == pytest.approx(2 / 3)


def test_bleu1_worked_examples() -> None:
    # hyp [she, went, to, paris], ref [paris]: clipped precision 1/4, hyp longer -> BP = 1
    assert bleu1("She went to Paris", "Paris") == pytest.approx(0.25)
    # hyp [paris], ref of length 4: precision 1, BP = exp(1 - 4/1) = e^-3
    assert bleu1("Paris", "She went to Paris") == pytest.approx(math.exp(-3))
    # Treebank splits the final period: hyp [paris, .] -> 1/2; the simple tokenizer drops it
    assert bleu1("Paris.", "paris") == pytest.approx(0.5)
    assert bleu1("Paris.", "paris", tokenizer="simple") == pytest.approx(1.0)
    # clipping: hyp [paris, paris], ref [paris] -> min(2, 1) / 2
    assert bleu1("paris paris", "paris") == pytest.approx(0.5)
    assert bleu1("", "paris") == 0.0
    with pytest.raises(ValueError, match="bleu_tokenizer"):
        bleu1("a", "a", tokenizer="punkt")  # type: ignore[arg-type]


def test_word_tokenize_sentence_split() -> None:
    # Treebank splits only a text's last period; Punkt's split exposes each sentence's
    assert word_tokenize("i went to paris. it was fun.") == [
        "i", "went", "to", "paris", ".", "it", "was", "fun", "."]
    # abbreviation types of the English model ("mr", "dr", "jan") do not end a sentence
    assert word_tokenize("mr. smith went home.") == ["mr.", "smith", "went", "home", "."]
    assert word_tokenize("we met dr. lee on jan. 5") == ["we", "met", "dr.", "lee", "on",
                                                         "jan.", "5"]
    # "u.s" is not one of them: an untrained Punkt would keep the period after "u.s." glued too
    assert word_tokenize("caroline's dog isn't here") == [
        "caroline", "'s", "dog", "is", "n't", "here"]


def test_score_amem_categories_1_to_4() -> None:
    # no comma split for category 1: sets equal -> 1.0
    out = score_amem("camping, pottery", "pottery, camping", 1)
    assert out["f1_amem"] == 1.0
    # no ';' cut for category 3: {likely, yes} vs {likely, yes;, because} ("yes;" keeps ';')
    # common {likely}: P = 1/2, R = 1/3 -> F1 = 0.4
    assert score_amem("likely yes", "likely yes; because", 3)["f1_amem"] == pytest.approx(0.4)
    # integer gold
    assert score_amem("3", 3, 2) == {"f1_amem": 1.0, "bleu1": 1.0}
    # empty prediction -> zeros
    assert score_amem("", "Paris", 4) == {"f1_amem": 0.0, "bleu1": 0.0}
    assert score_amem("   ", "Paris", 4) == {"f1_amem": 0.0, "bleu1": 0.0}


def test_score_amem_category_5_uses_the_phrase_rule() -> None:
    assert score_amem("Not mentioned in the conversation", None, 5) == {"f1_amem": 1.0,
                                                                        "bleu1": 1.0}
    # repeating the distractor earns nothing (A-Mem would score it 1.0 against itself)
    distractor = "She has a dog named Rex"
    assert score_amem(distractor, distractor, 5) == {"f1_amem": 0.0, "bleu1": 0.0}


def test_score_amem_errors() -> None:
    with pytest.raises(ValueError, match="needs a gold"):
        score_amem("x", None, 1)
    with pytest.raises(ValueError, match="unknown category"):
        score_amem("x", "x", 0)


def test_f1_set_with_an_empty_side_is_zero() -> None:
    # survivor of the mutation run: either side empty scores 0, not only both
    from synapse_pt.eval.qa.scorers.amem import f1_set

    assert f1_set("", "paris") == 0.0 and f1_set("paris", "") == 0.0 and f1_set("", "") == 0.0
    assert f1_set("paris france", "paris") == pytest.approx(2 * 0.5 * 1.0 / 1.5)
