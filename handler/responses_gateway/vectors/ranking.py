"""Scores of a search, engine-agnostic: the vector half (cosine similarity mapped to 0..1)
fused with the keyword half (the full-text index's rank, normalised) by ``ranking_options``
weights; ``score_threshold`` drops what scores below it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from responses_gateway.errors import invalid_request

RANKERS = ("none", "auto", "default-2024-11-15")


@dataclass(frozen=True, slots=True)
class Ranking:
    ranker: str = "auto"
    score_threshold: float = 0.0
    embedding_weight: float = 1.0
    text_weight: float = 0.0

    @classmethod
    def parse(cls, value: Any) -> Ranking:
        if value is None:
            return cls()
        if not isinstance(value, dict):
            raise invalid_request("Invalid 'ranking_options': expected an object.",
                                  param="ranking_options", code="invalid_type")
        ranker = value.get("ranker", "auto")
        if ranker not in RANKERS:
            raise invalid_request(
                f"Invalid value: '{ranker}'. Supported values are: "
                f"{', '.join(repr(r) for r in RANKERS)}.",
                param="ranking_options.ranker", code="invalid_value")
        threshold = value.get("score_threshold", 0.0)
        if not isinstance(threshold, int | float) or isinstance(threshold, bool) \
                or not 0 <= threshold <= 1:
            raise invalid_request(
                "Invalid 'ranking_options.score_threshold': expected a number between 0 and 1.",
                param="ranking_options.score_threshold", code="invalid_value")
        hybrid = value.get("hybrid_search") or {}
        weights = (hybrid.get("embedding_weight", 1.0), hybrid.get("text_weight", 0.0)) \
            if isinstance(hybrid, dict) else (None, None)
        if not all(isinstance(w, int | float) and not isinstance(w, bool) and w >= 0
                   for w in weights) or sum(weights) <= 0:  # type: ignore[arg-type]
            raise invalid_request(
                "Invalid 'ranking_options.hybrid_search': embedding_weight and text_weight "
                "must be numbers of 0 or more, not both 0.",
                param="ranking_options.hybrid_search", code="invalid_value")
        return cls(ranker=ranker, score_threshold=float(threshold),
                   embedding_weight=float(weights[0]), text_weight=float(weights[1]))

    def fuse(self, similarity: float, keyword: float) -> float:
        """One chunk's score: the weighted mean of its two halves, each in 0..1."""
        vector = max(0.0, min(1.0, (similarity + 1) / 2))
        total = self.embedding_weight + self.text_weight
        return (self.embedding_weight * vector + self.text_weight * keyword) / total
