"""Scores of a search, engine-agnostic: the vector half (cosine similarity mapped to 0..1)
fused with the keyword half (the full-text index's rank, normalised) by ``ranking_options``
weights; ``score_threshold`` drops what scores below it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from responses_gateway.errors import (
    GatewayError,
    invalid_choice,
    invalid_request,
    invalid_type,
    missing_parameter,
)

RANKERS = ("none", "auto", "default-2024-11-15")


@dataclass(frozen=True, slots=True)
class Ranking:
    ranker: str = "auto"
    score_threshold: float = 0.0
    embedding_weight: float = 1.0
    text_weight: float = 0.0

    @classmethod
    def parse(cls, value: Any) -> Ranking:
        """``ranking_options`` checked as openai-python 3.57 types it: a wrong type or value is
        OpenAI's 400 in its words (errors.invalid_choice, invalid_type), never Python's."""
        if value is None:
            return cls()
        if not isinstance(value, dict):
            raise invalid_type("ranking_options", "an object", value)
        ranker = value.get("ranker", "auto")
        if ranker not in RANKERS:
            raise invalid_choice("ranking_options.ranker", RANKERS, ranker)
        threshold = _decimal(value.get("score_threshold", 0.0), "ranking_options.score_threshold",
                             1)
        hybrid = value.get("hybrid_search")
        weights = (1.0, 0.0)
        if hybrid is not None:
            if not isinstance(hybrid, dict):
                raise invalid_type("ranking_options.hybrid_search", "an object", hybrid)
            found = []
            for name in ("embedding_weight", "text_weight"):  # both required, as the SDK's
                where = f"ranking_options.hybrid_search.{name}"
                if name not in hybrid:
                    raise missing_parameter(where)
                found.append(_decimal(hybrid[name], where, None))
            weights = (found[0], found[1])
            if sum(weights) <= 0:
                raise invalid_request(
                    "Invalid 'ranking_options.hybrid_search': embedding_weight and text_weight "
                    "must not both be 0.", param="ranking_options.hybrid_search",
                    code="invalid_value")
            top = max(weights)  # scaled to at most 1: two huge weights never sum to inf
            weights = (weights[0] / top, weights[1] / top)
        return cls(ranker=ranker, score_threshold=threshold,
                   embedding_weight=weights[0], text_weight=weights[1])

    def fuse(self, similarity: float, keyword: float) -> float:
        """One chunk's score: the weighted mean of its two halves, each in 0..1."""
        vector = max(0.0, min(1.0, (similarity + 1) / 2))
        total = self.embedding_weight + self.text_weight
        return (self.embedding_weight * vector + self.text_weight * keyword) / total


def _decimal(value: Any, param: str, high: float | None) -> float:
    """A number of 0 or more (at most ``high``), else OpenAI's 400 in its words."""
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        raise invalid_type(param, "a decimal", value)
    if value < 0:
        raise _bound(param, "below minimum", ">= 0", value)
    if high is not None and value > high:
        raise _bound(param, "above maximum", f"<= {high}", value)
    return float(value)


def _bound(param: str, words: str, expected: str, value: float) -> GatewayError:
    short = "below_min" if words.startswith("below") else "above_max"
    return invalid_request(
        f"Invalid '{param}': decimal {words} value. Expected a value {expected}, but got "
        f"{value} instead.", param=param, code=f"decimal_{short}_value")
