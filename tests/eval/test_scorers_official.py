"""Official LoCoMo scorer: worked examples computed by hand from the rules of
snap-research/locomo ``task_eval/evaluation.py``."""

from __future__ import annotations

import pytest

from synapse_pt.eval.qa.scorers.official import (
    f1_multi,
    f1_tokens,
    is_rejection,
    normalize_answer,
    score_official,
    stemmed_tokens,
)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        # commas dropped, lower, "!" stripped, "the"/"and"/"a" dropped, spaces squeezed
        ("The Cat, and a Dog!", "cat dog"),
        # commas go *first* and leave no space: two words glue into one token
        ("Paris,London", "parislondon"),
        # punctuation goes before articles: the hyphenated "and" is no longer a word
        ("rock-and-roll", "rockandroll"),
        ("rock and roll", "rock roll"),
        # word boundary: "and" inside "Andrew", "an" inside "Anna" survive
        ("Andrew and Anna", "andrew anna"),
        # only ASCII punctuation is removed: the curly apostrophe stays
        ("Caroline’s dog", "caroline’s dog"),
        ("  An   apple  ", "apple"),
        ("", ""),
    ],
)
def test_normalize_answer(raw: str, expected: str) -> None:
    assert normalize_answer(raw) == expected


def test_stemming() -> None:
    # Porter: painting -> paint, sunsets -> sunset, was -> wa
    assert stemmed_tokens("She was painting sunsets") == ["she", "wa", "paint", "sunset"]
    assert stemmed_tokens("painted sunset") == ["paint", "sunset"]


def test_f1_stemmed_overlap() -> None:
    # pred [she, wa, paint, sunset], gold [paint, sunset]: common 2
    # P = 2/4, R = 2/2 -> F1 = 2 * 0.5 * 1 / 1.5 = 2/3
    assert f1_tokens("She was painting sunsets", "painted sunset") == pytest.approx(2 / 3)


def test_f1_repeated_tokens_count() -> None:
    # pred [paris, paris], gold [paris]: multiset overlap 1 -> P = 1/2, R = 1 -> F1 = 2/3
    assert f1_tokens("Paris Paris", "Paris") == pytest.approx(2 / 3)
    # the other way round: P = 1, R = 1/2 -> 2/3
    assert f1_tokens("Paris", "Paris Paris") == pytest.approx(2 / 3)
    assert f1_tokens("Paris Paris", "paris paris") == 1.0


def test_f1_articles_and_punctuation() -> None:
    # "the" dropped, case ignored -> identical token lists
    assert f1_tokens("the Eiffel Tower", "Eiffel tower") == 1.0
    # "!" and "." stripped
    assert f1_tokens("Yes!", "yes.") == 1.0


def test_f1_comma_glue_quirk() -> None:
    # "parislondon" vs [paris, london]: no overlap
    assert f1_tokens("Paris,London", "Paris London") == 0.0


def test_f1_empty_and_no_overlap_are_float_zero() -> None:
    for pred, gold in [("", "Paris"), ("Paris", ""), ("Berlin", "Paris"), ("the", "a")]:
        value = f1_tokens(pred, gold)
        assert value == 0.0 and isinstance(value, float)


def test_f1_multi_answer() -> None:
    # gold parts: camping (best 1 vs pred part "camping"), painting (0), pottery (1) -> 2/3
    assert f1_multi("pottery, camping", "camping, painting, pottery") == pytest.approx(2 / 3)
    # one prediction part "pottery and camping" -> [potteri, camp];
    # gold "pottery": P 1/2, R 1 -> 2/3; gold "camping": 2/3 -> mean 2/3
    assert f1_multi("pottery and camping", "pottery, camping") == pytest.approx(2 / 3)
    # an empty gold part still counts (and scores 0): (1 + 0) / 2
    assert f1_multi("pottery", "pottery, ") == pytest.approx(0.5)


def test_category_1_routes_to_multi() -> None:
    gold = "camping, painting, pottery"
    assert score_official("pottery, camping", gold, 1) == pytest.approx(2 / 3)
    # the same strings as plain F1 (category 4): pred [potteri, camp], gold [camp, paint, potteri]
    # common 2, P = 1, R = 2/3 -> F1 = 0.8
    assert score_official("pottery, camping", gold, 4) == pytest.approx(0.8)


def test_category_3_cuts_gold_at_semicolon() -> None:
    gold = "Likely yes; because she said so"
    # gold -> "Likely yes" -> [like, ye] == pred tokens -> 1.0
    assert score_official("likely yes", gold, 3) == 1.0
    # category 2 keeps the whole gold: [like, ye, becaus, she, said, so]
    # common 2: P = 1, R = 2/6 -> F1 = 2 * (1/3) / (4/3) = 0.5
    assert score_official("likely yes", gold, 2) == pytest.approx(0.5)


@pytest.mark.parametrize(
    ("prediction", "expected"),
    [
        ("Not mentioned in the conversation", 1.0),
        ("NO INFORMATION AVAILABLE.", 1.0),
        ("It was not mentioned, but she likes dogs", 1.0),  # substring anywhere
        ("No record of such pet found.", 0.0),  # the paper's wording does not count
        ("She has a dog named Rex", 0.0),
        ("", 0.0),
    ],
)
def test_category_5_phrases(prediction: str, expected: float) -> None:
    assert score_official(prediction, None, 5) == expected
    assert score_official(prediction, "a distractor", 5) == expected  # the gold is never read
    assert is_rejection(prediction) == bool(expected)


def test_empty_prediction_scores_zero() -> None:
    for cat in (1, 2, 3, 4):
        assert score_official("", "Paris", cat) == 0.0


def test_integer_gold() -> None:
    assert score_official("3", 3, 2) == 1.0
    # [3, time] vs [3]: P = 1/2, R = 1 -> 2/3
    assert score_official("3 times", 3, 4) == pytest.approx(2 / 3)


def test_errors() -> None:
    with pytest.raises(ValueError, match="needs a gold"):
        score_official("x", None, 2)
    with pytest.raises(ValueError, match="unknown category"):
        score_official("x", "x", 6)


@pytest.mark.locomo
def test_every_locomo_gold_scores_one_against_itself(locomo_path) -> None:
    import json

    data = json.loads(locomo_path.read_text())
    counts: dict[int, int] = {}
    for conv in data:
        for qa in conv["qa"]:
            cat, gold = qa["category"], qa.get("answer")
            counts[cat] = counts.get(cat, 0) + 1
            if cat == 5:
                assert score_official("Not mentioned in the conversation", gold, cat) == 1.0
                continue
            # what a perfect system says: the gold (category 3: its part before ';')
            pred = str(gold).split(";")[0] if cat == 3 else str(gold)
            assert score_official(pred, gold, cat) == 1.0, (conv["sample_id"], qa["question"])
    assert counts == {1: 282, 2: 321, 3: 96, 4: 841, 5: 446}


def test_normalize_answer_drops_thousands_separators() -> None:
    # survivor of the mutation run: commas are removed before tokenising ("1,000" == "1000")
    assert normalize_answer("1,000 dogs, two cats") == "1000 dogs two cats"
