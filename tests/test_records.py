"""records.py and the written-out classes on the entry points' import path (issue 46): they
behave as the dataclasses they replace, and a route's path is compiled on first match as
Starlette would compile it."""

from __future__ import annotations

import copy
import dataclasses
import pickle
from typing import Any

import pytest
from starlette import routing
from starlette.routing import Match

from responses_gateway.api.lazy_route import Route as LazyRoute
from responses_gateway.records import Compared, Frozen, Record, Value
from responses_gateway.settings import DEFAULTS, Route, Settings, declared
from responses_gateway.store.base import StoredConversation, StoredResponse
from responses_gateway.tools.catalog import ToolSpec


class _Point(Value):
    __slots__ = ("x", "y")

    x: int
    y: list[int] | None

    def __init__(self, x: int, y: list[int] | None = None) -> None:
        object.__setattr__(self, "x", x)
        object.__setattr__(self, "y", y)


@dataclasses.dataclass(frozen=True, slots=True)
class _DataPoint:
    x: int
    y: list[int] | None = None


class _Box(Compared):
    __slots__ = ("_hidden", "items")

    items: list[int]
    _hidden: int

    def __init__(self, items: list[int]) -> None:
        self.items = items
        self._hidden = 0


def test_a_value_record_behaves_as_its_frozen_dataclass() -> None:
    made, data = _Point(1, None), _DataPoint(1, None)
    assert repr(made) == repr(data).replace("_DataPoint", "_Point")
    assert made == _Point(1) and made != _Point(2) and made != data
    assert hash(made) == hash(_Point(1)) and len({made, _Point(1)}) == 1
    for record in (made, data):
        with pytest.raises(dataclasses.FrozenInstanceError):
            record.x = 2  # type: ignore[misc]
        with pytest.raises(dataclasses.FrozenInstanceError):
            del record.x  # type: ignore[misc]
    with pytest.raises(TypeError):
        hash(_Point(1, [2]))  # a field that does not hash, as the dataclass
    for again in (copy.copy(made), copy.deepcopy(made), pickle.loads(pickle.dumps(made))):
        assert again == made and again is not made
    with pytest.raises(AttributeError):
        made.z = 1  # type: ignore[attr-defined]


def test_a_compared_record_is_mutable_equal_by_field_and_unhashable() -> None:
    box = _Box([1])
    box.items.append(2)
    assert box == _Box([1, 2]) and box != _Box([1])
    assert repr(box) == "_Box(items=[1, 2])"  # a field named _x is not shown
    with pytest.raises(TypeError):
        hash(box)
    assert issubclass(Value, Frozen) and issubclass(Frozen, Record)


def test_the_tool_spec_and_stored_records_keep_their_dataclass_shape() -> None:
    assert ToolSpec("function", "f") == ToolSpec(kind="function", name="f", namespace=None)
    assert {ToolSpec("mcp", "t", "srv"): 1}[ToolSpec("mcp", "t", "srv")] == 1
    record = StoredResponse("resp_1", "t", {"id": "resp_1"}, {})
    assert record.input_items == [] and record.input_items is not StoredResponse(
        "resp_2", "t", {}, {}).input_items
    moved = record.replace(previous_response_id="resp_0")
    assert moved.previous_response_id == "resp_0" and moved.response is record.response
    assert moved != record and record.replace() == record
    assert StoredConversation("conv_1", "t", 1).metadata == {}


def test_settings_behave_as_the_frozen_dataclass_they_were() -> None:
    settings = Settings(upstream_api_key="sk-secret", model_map={"a": "b"})
    assert "sk-secret" not in repr(settings) and "model_map={'a': 'b'}" in repr(settings)
    assert repr(settings).startswith("Settings(backend='openai', ")
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.backend = "bedrock"  # type: ignore[misc]
    with pytest.raises(TypeError, match="unexpected keyword argument 'nope'"):
        Settings(nope=1)
    assert Settings().model_map == {} and Settings().model_map is not Settings().model_map
    changed = settings.replace(log_level="debug")
    assert (changed.log_level, settings.log_level) == ("debug", "info")
    assert changed.model_map is settings.model_map  # dataclasses.replace shares the others
    assert settings != Settings(upstream_api_key="sk-secret", model_map={"a": "b"})  # identity
    assert set(declared()) == set(DEFAULTS) - {"unknown_variables"}
    assert Route("openai", "m") == Route("openai", "m") and len({Route("a", "b"),
                                                                 Route("a", "b")}) == 1


async def _endpoint(request: Any) -> Any:
    return None


def test_a_lazy_route_is_starlettes_route_compiled_on_first_match() -> None:
    path = "/v1/things/{thing_id}"
    lazy = LazyRoute(path, _endpoint, methods=["GET"])
    eager = routing.Route(path, _endpoint, methods=["GET"])
    assert "path_regex" not in vars(lazy)
    # every attribute Starlette's Route sets, but the compiled ones (made on first use)
    assert set(vars(eager)) == set(vars(lazy)) | {"path_regex", "path_format",
                                                  "param_convertors"}
    for scope in ({"type": "http", "path": "/v1/things/t1", "method": "GET"},
                  {"type": "http", "path": "/v1/things/t1", "method": "HEAD"},
                  {"type": "http", "path": "/v1/things/t1", "method": "POST"},
                  {"type": "http", "path": "/v1/things", "method": "GET"}):
        assert lazy.matches(scope) == eager.matches(scope)
    assert lazy.matches({"type": "http", "path": "/v1/things/t1", "method": "POST"})[0] \
        is Match.PARTIAL  # the 405 path
    assert vars(lazy)["path_regex"] is eager.path_regex  # re's cache: the same pattern
    assert lazy.url_path_for("_endpoint", thing_id="x") == "/v1/things/x"


def test_the_app_compiles_no_http_route_until_a_request_matches_it() -> None:
    from responses_gateway.api.app import create_app

    app = create_app(Settings())
    lazy = [r for r in app.routes if isinstance(r, LazyRoute)]
    assert len(lazy) > 50 and not any("path_regex" in vars(r) for r in lazy)
    # the create and the readiness check come first: neither compiles the others
    assert [(r.path, r.methods) for r in lazy[:2]] == [
        ("/v1/responses", {"POST"}), ("/health", {"GET", "HEAD"})]
