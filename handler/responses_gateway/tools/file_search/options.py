"""The request's ``file_search`` tool, checked before the model runs and kept JSON-safe for a
background worker. A mistake is OpenAI's 400 naming ``tools[i].<field>``; a store the tenant
does not have is the 404 of the Vector Stores API (checked in tool.py, where the stores are)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from responses_gateway.errors import (
    GatewayError,
    invalid_request,
    invalid_type,
    missing_parameter,
    out_of_range,
)
from responses_gateway.vectors.filters import FilterLimits, compile_filter
from responses_gateway.vectors.ranking import Ranking
from responses_gateway.vectors.service import MAX_RESULTS

RESULTS = "file_search_call.results"
DEFAULT_RESULTS = 10  # as POST /v1/vector_stores/{id}/search
MAX_STORES = 16  # the gateway's bound: every store is searched for every call


@dataclass
class Options:
    vector_store_ids: list[str]
    max_num_results: int = DEFAULT_RESULTS
    ranking_options: dict[str, Any] | None = None
    filters: dict[str, Any] | None = None
    include_results: bool = False
    tenant: str = ""
    param: str = "tools[0]"  # where the tool sits in the request (errors name it)
    ranking: Ranking = field(default_factory=Ranking, compare=False)

    @classmethod
    def of(cls, tool: Any, param: str, include: tuple[str, ...], tenant: str,
           filter_limits: FilterLimits | None = None) -> Options:
        ids = _field(tool, "vector_store_ids")
        if ids is None:
            raise missing_parameter(f"{param}.vector_store_ids")
        if not isinstance(ids, list) or not all(isinstance(i, str) and i for i in ids):
            raise invalid_request(
                f"Invalid '{param}.vector_store_ids': expected an array of strings.",
                param=f"{param}.vector_store_ids", code="invalid_type")
        if not ids or len(ids) > MAX_STORES:
            raise invalid_request(
                f"Invalid '{param}.vector_store_ids': expected between 1 and {MAX_STORES} "
                f"vector store ids, but got {len(ids)}.",
                param=f"{param}.vector_store_ids", code="invalid_value")
        limit = _field(tool, "max_num_results")
        if limit is None:
            limit = DEFAULT_RESULTS
        if not isinstance(limit, int) or isinstance(limit, bool):
            raise invalid_type(f"{param}.max_num_results", "an integer", limit)
        if not 1 <= limit <= MAX_RESULTS:
            raise out_of_range(f"{param}.max_num_results", 1, MAX_RESULTS, limit)
        ranking_options = _plain(_field(tool, "ranking_options"))
        filters = _plain(_field(tool, "filters"))
        options = cls(list(dict.fromkeys(ids)), limit, ranking_options, filters,
                      RESULTS in include, tenant, param)
        options.check(filter_limits)
        return options

    def check(self, filter_limits: FilterLimits | None = None) -> None:
        """The ranking options and filters parse (the same rules and bounds as the search
        endpoint)."""
        try:
            self.ranking = Ranking.parse(self.ranking_options)
            if self.filters is not None:
                compile_filter(self.filters, f"{self.param}.filters", filter_limits)
        except GatewayError as error:
            if error.param and not error.param.startswith(self.param):
                error.param = f"{self.param}.{error.param}"
                error.message = error.message.replace(
                    "'ranking_options", f"'{self.param}.ranking_options")
            raise

    def search_body(self, queries: list[str]) -> dict[str, Any]:
        """The body of ``POST /v1/vector_stores/{id}/search`` this call amounts to."""
        body: dict[str, Any] = {"query": queries, "max_num_results": self.max_num_results}
        if self.ranking_options is not None:
            body["ranking_options"] = self.ranking_options
        if self.filters is not None:
            body["filters"] = self.filters
        return body

    def to_record(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("ranking")
        return data

    @classmethod
    def from_record(cls, data: dict[str, Any]) -> Options:
        options = cls(**{k: v for k, v in data.items() if k != "ranking"})
        try:
            options.ranking = Ranking.parse(options.ranking_options)
        except GatewayError:  # kept under looser rules (hybrid_search {}): their defaults
            options.ranking = Ranking()
        return options


def _field(value: Any, name: str) -> Any:
    """A field of the request's tool param (a pydantic model with extras, or a dict)."""
    return value.get(name) if isinstance(value, dict) else getattr(value, name, None)


def _plain(value: Any) -> Any:
    """A nested param as plain JSON (pydantic models dumped, dicts and lists as they are)."""
    dump = getattr(value, "model_dump", None)
    return dump() if dump is not None else value
