"""summarize_usage: token totals and means, latency, cost with the price table."""

from __future__ import annotations

import pytest

from synapse_pt.models.llm.accounting import DEFAULT_PRICES, price_table, summarize_usage
from synapse_pt.models.llm.base import ChatResponse


def response(p: int, c: int, latency: float, model: str = "gpt-4o-mini",
             cached: bool = False) -> ChatResponse:
    return ChatResponse("x", p, c, latency, model, cached=cached)


def test_gpt4o_mini_cost_and_means():
    out = summarize_usage([response(1000, 100, 1.0), response(3000, 300, 3.0, cached=True)],
                          DEFAULT_PRICES)
    cost = (4000 * 0.15 + 400 * 0.60) / 1e6
    assert out["prompt_tokens_total"] == 4000 and out["completion_tokens_total"] == 400
    assert out["prompt_tokens_mean"] == 2000 and out["completion_tokens_mean"] == 200
    assert out["tokens_per_query"] == 2200
    assert out["latency_mean_s"] == pytest.approx(2.0)
    assert out["cost_usd"] == pytest.approx(cost)
    assert out["cost_usd_spent"] == pytest.approx((1000 * 0.15 + 100 * 0.60) / 1e6)
    assert out["cost_per_1k_queries"] == pytest.approx(1000 * cost / 2)
    assert (out["n_responses"], out["n_cached"], out["unpriced_models"]) == (2, 1, [])


def test_price_given_as_a_pair():
    out = summarize_usage([response(790, 24, 1.9)], {"gpt-4o-mini": [0.15, 0.60]})
    assert out["cost_per_1k_queries"] == pytest.approx((790 * 0.15 + 24 * 0.60) / 1000)


def test_records_from_a_table_with_model_argument_and_num_queries():
    rows = [{"prompt_tokens": 100, "completion_tokens": 10, "latency_s": 0.5}] * 4
    out = summarize_usage(rows, {"bundled:smollm2": {"prompt": 0.0, "completion": 0.0}},
                          model="bundled:smollm2", num_queries=8)
    assert out["num_queries"] == 8 and out["tokens_per_query"] == 55
    assert out["cost_usd"] == 0.0 and out["cost_per_1k_queries"] == 0.0
    assert out["unpriced_models"] == []


def test_lookup_before_at_and_default_and_unpriced():
    table = {"local": {"prompt": 1.0, "completion": 2.0}}
    assert summarize_usage([response(10**6, 0, 0, model="local@abc123")], table)["cost_usd"] == 1.0
    table["default"] = {"prompt": 0.0, "completion": 5.0}
    assert summarize_usage([response(0, 10**6, 0, model="other")], table)["cost_usd"] == 5.0
    out = summarize_usage([response(5, 5, 0, model="mystery")], {})
    assert out["cost_usd"] == 0.0 and out["unpriced_models"] == ["mystery"]
    with pytest.raises(KeyError, match="no price for model 'mystery'"):
        summarize_usage([response(5, 5, 0, model="mystery")], {}, strict=True)


def test_bad_inputs_name_what_is_wrong():
    with pytest.raises(ValueError, match="record 0 lacks a usable 'latency_s'"):
        summarize_usage([{"prompt_tokens": 1, "completion_tokens": 1, "model": "m"}], {})
    with pytest.raises(ValueError, match="llm.prices.m lacks \\['completion'\\]"):
        price_table({"m": {"prompt": 1.0}})


def test_empty():
    out = summarize_usage([], DEFAULT_PRICES)
    assert out["n_responses"] == 0 and out["cost_per_1k_queries"] == 0.0


def test_latency_per_query_counts_queries_without_a_response():
    # 2 answered (1 s + 3 s) out of 5 queries (3 gated: no LLM call, no latency)
    out = summarize_usage([response(10, 1, 1.0), response(10, 1, 3.0)], DEFAULT_PRICES,
                          num_queries=5)
    assert out["latency_mean_s"] == pytest.approx(2.0)
    assert out["latency_s_per_query"] == pytest.approx(4.0 / 5)
