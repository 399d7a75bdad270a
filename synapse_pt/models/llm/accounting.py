"""Token, latency and money accounting over LLM responses (SPEC §1.4 efficiency figures).

Prices are USD per 1M tokens, given per model from config, e.g.::

    prices:
      gpt-4o-mini: {prompt: 0.15, completion: 0.60}
      default: {prompt: 0.0, completion: 0.0}   # local models cost nothing

A response's model is looked up by its full name, then by the part before ``@``, then under
``default``; a model found nowhere costs 0 and is listed in ``unpriced_models`` (or raises, with
``strict=True``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from synapse_pt.common.errors import ConfigError
from synapse_pt.models.llm.base import ChatResponse

log = logging.getLogger(__name__)

DEFAULT_PRICES: dict[str, dict[str, float]] = {"gpt-4o-mini": {"prompt": 0.15, "completion": 0.60}}


def usd_setting(value: Any, key: str) -> float:
    """``value`` as dollars: a finite number >= 0, else a :class:`ConfigError` naming ``key``
    (``nan``, ``inf``, ``-5``, ``'$1'`` are refused)."""
    try:
        usd = float(value)
        if isinstance(value, bool):
            raise TypeError
    except (TypeError, ValueError):
        raise ConfigError(f"{key}={value!r} is not a number of US dollars (write e.g. "
                          f"{key}=1.50)") from None
    if not math.isfinite(usd) or usd < 0:
        raise ConfigError(f"{key}={value!r}: dollars must be a finite number >= 0")
    return usd



@dataclass(frozen=True)
class ModelPrice:
    """USD per 1M prompt tokens and per 1M completion tokens."""

    prompt_per_1m: float
    completion_per_1m: float

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (prompt_tokens * self.prompt_per_1m
                + completion_tokens * self.completion_per_1m) / 1e6


def price_table(prices: Mapping[str, Any]) -> dict[str, ModelPrice]:
    """Normalise a config mapping ``model -> {prompt, completion}`` (or a pair); a price that is
    no finite number >= 0 is a :class:`ConfigError` naming ``llm.prices.<model>.<part>``."""
    table: dict[str, ModelPrice] = {}
    for model, entry in prices.items():
        key = f"llm.prices.{model}"
        if isinstance(entry, ModelPrice):
            pair = (entry.prompt_per_1m, entry.completion_per_1m)
        elif isinstance(entry, Mapping):
            missing = {"prompt", "completion"} - set(entry)
            if missing:
                raise ConfigError(f"{key} lacks {sorted(missing)} (USD per 1M tokens)")
            pair = (entry["prompt"], entry["completion"])
        elif isinstance(entry, (list, tuple)) and len(entry) == 2:
            pair = (entry[0], entry[1])
        else:
            raise ConfigError(f"{key} must be {{prompt, completion}} or a pair, got {entry!r}")
        table[str(model)] = ModelPrice(usd_setting(pair[0], f"{key}.prompt"),
                                       usd_setting(pair[1], f"{key}.completion"))
    return table


def price_for(model: str, table: Mapping[str, ModelPrice]) -> ModelPrice | None:
    """The price of ``model``: exact name, then the name before ``@``, then ``default``;
    ``None`` when the table has none of them."""
    for name in (model, model.split("@", 1)[0], "default"):
        if name in table:
            return table[name]
    return None


def _usage_record(item: ChatResponse | Mapping[str, Any], model: str | None, index: int
                  ) -> tuple[str, int, int, float, bool]:
    """(model, prompt tokens, completion tokens, latency, cached) of a response or a mapping."""
    if isinstance(item, ChatResponse):
        return item.model, item.prompt_tokens, item.completion_tokens, item.latency_s, item.cached
    try:
        name = item.get("model") or model
        if not name:
            raise KeyError("model")
        return (str(name), int(item["prompt_tokens"]), int(item["completion_tokens"]),
                float(item["latency_s"]), bool(item.get("cached", False)))
    except (KeyError, TypeError, ValueError) as err:
        raise ValueError(f"summarize_usage: record {index} lacks a usable {err} field "
                         "(needs prompt_tokens, completion_tokens, latency_s, and a model "
                         "either in the record or as the model argument)") from err


def summarize_usage(responses: Iterable[ChatResponse | Mapping[str, Any]],
                    prices: Mapping[str, Any], *, model: str | None = None,
                    num_queries: int | None = None, strict: bool = False
                    ) -> dict[str, Any]:
    """Totals and means over the LLM responses of a run.

    Args:
        responses: :class:`ChatResponse` objects, or mappings with ``prompt_tokens``,
            ``completion_tokens``, ``latency_s`` (and optionally ``model``, ``cached``), e.g.
            rows of a predictions table. Cached answers count: they cost their tokens when first
            asked, so ``cost_usd`` is what the method costs; ``cost_usd_spent`` counts only
            answers paid for in this run.
        prices: model -> price, as accepted by :func:`price_table`.
        model: the model of records that name none.
        num_queries: queries the responses served (default: one per response), for
            ``tokens_per_query`` and ``cost_per_1k_queries``.
        strict: raise ``KeyError`` for a model without a price; otherwise it costs 0 and is listed
            under ``unpriced_models`` (local models usually have no entry).

    Returns:
        ``n_responses``, ``n_cached``, ``num_queries``, ``prompt_tokens_total``,
        ``completion_tokens_total``, ``prompt_tokens_mean``, ``completion_tokens_mean`` (per
        response), ``tokens_per_query``, ``latency_mean_s`` (per response),
        ``latency_s_per_query`` (over ``num_queries``; queries without a response cost 0),
        ``cost_usd``, ``cost_usd_spent``, ``cost_per_1k_queries``, ``unpriced_models``.
    """
    table = price_table(prices)
    records = [_usage_record(r, model, i) for i, r in enumerate(responses)]
    n = len(records)
    queries = n if num_queries is None else num_queries
    if queries < 0:
        raise ValueError(f"num_queries must be >= 0, got {num_queries}")
    unpriced: set[str] = set()
    cost = spent = 0.0
    for name, prompt_tokens, completion_tokens, _, cached in records:
        price = price_for(name, table)
        if price is None:
            if strict:
                raise KeyError(f"no price for model {name!r}; known: {sorted(table)} (add it to "
                               "the price table, or a 'default' entry)")
            unpriced.add(name)
            continue
        c = price.cost(prompt_tokens, completion_tokens)
        cost += c
        spent += 0.0 if cached else c
    if unpriced:
        log.warning("no price for %s: counted as free (add them to the llm prices config)",
                    sorted(unpriced))
    prompt = sum(r[1] for r in records)
    completion = sum(r[2] for r in records)
    return {
        "n_responses": n,
        "n_cached": sum(r[4] for r in records),
        "num_queries": queries,
        "prompt_tokens_total": prompt,
        "completion_tokens_total": completion,
        "prompt_tokens_mean": prompt / n if n else 0.0,
        "completion_tokens_mean": completion / n if n else 0.0,
        "tokens_per_query": (prompt + completion) / queries if queries else 0.0,
        "latency_mean_s": sum(r[3] for r in records) / n if n else 0.0,
        "latency_s_per_query": sum(r[3] for r in records) / queries if queries else 0.0,
        "cost_usd": cost,
        "cost_usd_spent": spent,
        "cost_per_1k_queries": 1000.0 * cost / queries if queries else 0.0,
        "unpriced_models": sorted(unpriced),
    }
