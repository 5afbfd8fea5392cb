"""Judges for what the gateway emits: Responses streaming events and Response objects.

Three independent checks, reusable by any test (unit, end-to-end, recordings):

- ``validate_event`` / ``validate_response`` against the openai SDK models, the types clients
  parse into, in pydantic's strict mode (no ``"0"`` for ``0``). Each event is validated against
  the one model its ``type`` names (not just "some member of the union"), and no unknown field
  may appear anywhere: the SDK models accept extras, so a misspelt field would otherwise pass.
- the same two functions against the Open Responses OpenAPI document
  (``tests/fixtures/spec/openresponses-openapi.json``) with ``jsonschema``, ``$ref``s resolved
  inside the document; event schemas are found through the ``type`` enum of each member of the
  ``text/event-stream`` ``oneOf`` of ``POST /responses``.
- ``check_grammar``: the event order OpenAI's streams follow (see
  ``tests/fixtures/responses-streams``), with the terminal response equal to the finished items.

Documented tolerances, each because real OpenAI output needs it:
- fields OpenAI sends that openai-python does not declare (``_SDK_MISSING_FIELDS``:
  ``frequency_penalty``, ``presence_penalty``, ``store`` on the response, ``bytes`` on the
  logprobs of output_text events) are not "unknown";
- ``error.code`` of a failed response must be one of the SDK's ``Literal`` codes in what the
  gateway emits (issue 17), but may be any non-empty string when judging OpenAI's own
  recordings (``any_error_code=True``): OpenAI itself sends codes outside it (recording
  ``openai-gpt5nano-failed-insufficient-quota.jsonl``: ``insufficient_quota``).
- OpenAI names raw reasoning events ``response.reasoning_text.delta`` / ``.done`` (the SDK's
  names, which we emit); Open Responses calls the same events ``response.reasoning.delta`` /
  ``.done`` with the same fields. They are validated against those schemas.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, get_args

import jsonschema
import pydantic
import referencing
from openai.types.responses import Response, ResponseStreamEvent
from openai.types.responses.response_error import ResponseError
from referencing.jsonschema import DRAFT202012

SPEC_PATH = Path(__file__).resolve().parents[1] / "fixtures" / "spec" / "openresponses-openapi.json"
_SPEC_URI = "urn:openresponses:openapi"

TERMINAL_TYPES = frozenset({"response.completed", "response.incomplete", "response.failed"})
ITEM_ID_PREFIXES = {"message": "msg_", "function_call": "fc_", "reasoning": "rs_",
                    "compaction": "cmp_", "custom_tool_call": "ctc_", "mcp_list_tools": "mcpl_",
                    "mcp_call": "mcp_", "mcp_approval_request": "mcpr_",
                    "image_generation_call": "ig_", "web_search_call": "ws_",
                    "file_search_call": "fs_", "code_interpreter_call": "ci_"}
# Items added whole (no status, no deltas): done repeats added (a compaction item, an
# approval request).
_WHOLE_ITEMS = frozenset({"compaction", "mcp_approval_request"})
# Items without a status field (OpenAI's models have none for them).
_NO_STATUS = frozenset({"reasoning", "custom_tool_call", "mcp_list_tools"})
# Events that only mark an item's progress: (item type, event type) -> the events allowed
# before it, as a set of event types seen so far in the item.
_MCP_LIST_EVENTS = ("response.mcp_list_tools.in_progress", "response.mcp_list_tools.completed",
                    "response.mcp_list_tools.failed")
_MCP_CALL_EVENTS = ("response.mcp_call.in_progress", "response.mcp_call.completed",
                    "response.mcp_call.failed")
# Item kinds and event types the Open Responses spec does not describe (OpenAI's own tools):
# those are checked against openai-python's models only.
_BEYOND_SPEC_ITEMS = frozenset({"custom_tool_call", "mcp_list_tools", "mcp_call",
                                "mcp_approval_request", "mcp_approval_response",
                                "image_generation_call", "web_search_call", "file_search_call",
                                "code_interpreter_call"})
# web_search_call: in_progress, searching, then completed exactly when the item did (a failed
# search ends with its output_item.done alone).
_WEB_SEARCH_EVENTS = ("response.web_search_call.in_progress",
                      "response.web_search_call.searching", "response.web_search_call.completed")
# file_search_call: the same three, the same rule.
_FILE_SEARCH_EVENTS = ("response.file_search_call.in_progress",
                       "response.file_search_call.searching",
                       "response.file_search_call.completed")
# image_generation_call: in_progress, generating, partial images (indexes 0, 1, ...), then
# completed exactly when the item did (a failed one ends with its output_item.done alone).
_IMAGE_EVENTS = ("response.image_generation_call.in_progress",
                 "response.image_generation_call.generating",
                 "response.image_generation_call.partial_image",
                 "response.image_generation_call.completed")
# code_interpreter_call: in_progress, code deltas, code done (the deltas joined), interpreting,
# then completed exactly when the item did (a failed run ends with its output_item.done alone);
# OpenAI's recordings (pydantic-ai's cassettes of gpt-5) follow this order.
_CODE_EVENTS = ("response.code_interpreter_call.in_progress",
                "response.code_interpreter_call_code.delta",
                "response.code_interpreter_call_code.done",
                "response.code_interpreter_call.interpreting",
                "response.code_interpreter_call.completed")
_BEYOND_SPEC_TOOLS = frozenset({"custom", "namespace", "mcp", "image_generation", "web_search",
                                "code_interpreter",
                                "web_search_2025_08_26", "web_search_preview",
                                "web_search_preview_2025_03_11", "file_search"})
_TERMINAL_STATUS = {
    "response.completed": "completed",
    "response.incomplete": "incomplete",
    "response.failed": "failed",
}
# Open Responses' names for the events OpenAI calls reasoning_text.* (same fields).
_SPEC_ALIASES = {
    "response.reasoning_text.delta": "response.reasoning.delta",
    "response.reasoning_text.done": "response.reasoning.done",
}
_SDK_ERROR_CODES = frozenset(get_args(ResponseError.model_fields["code"].annotation))
# Fields OpenAI sends (see the recordings) that openai-python's models do not declare, so the
# SDK keeps them as extras: not "unknown". The Response fields are required by the spec's
# ResponseResource; ``bytes`` is on every logprob of OpenAI's output_text events (recording
# openai-gpt4omini-text-logprobs.sse) and required on the output_text part's logprobs.
_SDK_MISSING_FIELDS: dict[str, frozenset[str]] = {
    "openai.types.responses.response.Response": frozenset(
        {"frequency_penalty", "presence_penalty", "store"}
    ),
    **{
        f"openai.types.responses.response_text_{kind}_event.{cls}": frozenset({"bytes"})
        for kind in ("delta", "done")
        for cls in ("Logprob", "LogprobTopLogprob")
    },
}

class ValidationFailure(AssertionError):
    """An event or response broke the SDK model, the spec or the stream grammar."""


# -- openai SDK ---------------------------------------------------------------------------------


@cache

def create_operation_spec() -> dict[str, Any]:
    """A copy of the spec whose ``POST /responses`` body is what a client must send: JSON,
    required, with a string ``model`` (the spec leaves all three open). Fuzzers start here."""
    spec = copy.deepcopy(json.loads(SPEC_PATH.read_text()))
    body = spec["paths"]["/responses"]["post"]["requestBody"]
    body["content"] = {"application/json": body["content"]["application/json"]}
    body["required"] = True
    create = spec["components"]["schemas"]["CreateResponseBody"]
    create["properties"]["model"] = {"type": "string"}
    create["required"] = sorted({*create.get("required", []), "model"})
    return spec

def _sdk_event_models() -> dict[str, type[pydantic.BaseModel]]:
    """Event ``type`` -> the SDK model for it, read from the ``ResponseStreamEvent`` union."""
    union = get_args(ResponseStreamEvent)[0]
    models: dict[str, type[pydantic.BaseModel]] = {}
    for model in get_args(union):
        for literal in get_args(model.model_fields["type"].annotation):
            models[literal] = model
    return models


@cache
def _adapter(tp: Any) -> pydantic.TypeAdapter[Any]:
    return pydantic.TypeAdapter(tp)


def _extras(obj: Any, path: str, allowed: frozenset[str]) -> list[str]:
    """Paths of fields no SDK model declares (openai models keep them as extras)."""
    found: list[str] = []
    if isinstance(obj, pydantic.BaseModel):
        cls = type(obj)
        known = _SDK_MISSING_FIELDS.get(f"{cls.__module__}.{cls.__qualname__}", frozenset())
        for name in obj.model_extra or {}:
            if name not in allowed and name not in known:
                found.append(f"{path}.{name}")
        for name in type(obj).model_fields:
            found.extend(_extras(getattr(obj, name), f"{path}.{name}", allowed))
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            found.extend(_extras(value, f"{path}[{i}]", allowed))
    elif isinstance(obj, dict):
        for key, value in obj.items():
            found.extend(_extras(value, f"{path}.{key}", allowed))
    return found


def _with_sdk_error_code(
    response: dict[str, Any], where: str, any_error_code: bool
) -> dict[str, Any]:
    """``response``, with an ``error.code`` outside the SDK's Literal replaced where that is
    tolerated (OpenAI's recordings; see module doc), else refused."""
    error = response.get("error")
    if not isinstance(error, dict) or error.get("code") in _SDK_ERROR_CODES:
        return response
    code = error.get("code")
    if not isinstance(code, str) or not code:
        raise ValidationFailure(f"{where}: error.code must be a non-empty string, got {code!r}")
    if not any_error_code:
        raise ValidationFailure(f"{where}: error.code {code!r} is not one the SDK documents")
    return {**response, "error": {**error, "code": "server_error"}}


def sdk_validate_event(
    event: dict[str, Any], *, allow_extra: Iterable[str] = (), any_error_code: bool = False
) -> Any:
    """Validate ``event`` against the SDK model its ``type`` names; returns the parsed model."""
    kind = event.get("type")
    model = _sdk_event_models().get(kind)  # type: ignore[arg-type]
    if model is None:
        raise ValidationFailure(f"event type {kind!r} is not in openai's ResponseStreamEvent")
    payload = event
    if isinstance(event.get("response"), dict):
        payload = {
            **event, "response": _with_sdk_error_code(event["response"], kind, any_error_code)
        }
    try:
        parsed = model.model_validate(payload, strict=True)
        via_union = _adapter(ResponseStreamEvent).validate_python(payload, strict=True)
    except pydantic.ValidationError as exc:
        raise ValidationFailure(f"{kind} does not match openai {model.__name__}: {exc}") from exc
    if type(via_union) is not model or via_union.type != kind:
        raise ValidationFailure(
            f"{kind} resolved to {type(via_union).__name__} in the SDK union, not {model.__name__}"
        )
    extras = _extras(parsed, kind, frozenset(allow_extra))
    if extras:
        raise ValidationFailure(f"fields unknown to the openai SDK: {extras}")
    return parsed


def sdk_validate_response(
    resp: dict[str, Any], *, allow_extra: Iterable[str] = (), any_error_code: bool = False
) -> Response:
    try:
        parsed = Response.model_validate(
            _with_sdk_error_code(resp, "response", any_error_code), strict=True
        )
    except pydantic.ValidationError as exc:
        raise ValidationFailure(f"response does not match openai Response: {exc}") from exc
    extras = _extras(parsed, "response", frozenset(allow_extra))
    if extras:
        raise ValidationFailure(f"fields unknown to the openai SDK: {extras}")
    return parsed


# -- Open Responses spec ------------------------------------------------------------------------


@cache
def _spec() -> dict[str, Any]:
    return json.loads(SPEC_PATH.read_text())


@cache
def _registry() -> referencing.Registry:
    resource = referencing.Resource.from_contents(_spec(), default_specification=DRAFT202012)
    return referencing.Registry().with_resource(_SPEC_URI, resource)


@cache
def _validator(schema_name: str) -> jsonschema.Draft202012Validator:
    if schema_name not in _spec()["components"]["schemas"]:
        raise KeyError(schema_name)
    schema = {"$ref": f"{_SPEC_URI}#/components/schemas/{schema_name}"}
    return jsonschema.Draft202012Validator(schema, registry=_registry())


@cache
def spec_event_schemas() -> dict[str, str]:
    """Event ``type`` -> component name, from the streaming ``oneOf`` of ``POST /responses``."""
    spec = _spec()
    content = spec["paths"]["/responses"]["post"]["responses"]["200"]["content"]
    schemas = spec["components"]["schemas"]
    found: dict[str, str] = {}
    for ref in content["text/event-stream"]["schema"]["oneOf"]:
        name = ref["$ref"].rsplit("/", 1)[1]
        for kind in schemas[name]["properties"]["type"]["enum"]:
            found[kind] = name
    return found


def _spec_errors(instance: Any, schema_name: str) -> list[str]:
    errors = sorted(_validator(schema_name).iter_errors(instance), key=lambda e: list(e.path))
    return [f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message[:300]}" for e in errors]


def beyond_spec(obj: Any) -> bool:
    """Whether an event or response holds what the Open Responses spec has no schema for
    (MCP, custom and namespace tools and their items)."""
    if not isinstance(obj, dict):
        return False
    kind = str(obj.get("type") or "")
    if kind.startswith(("response.mcp_", "response.custom_tool_call",
                        "response.image_generation_call", "response.web_search_call",
                        "response.file_search_call", "response.code_interpreter_call",
                        "response.output_text.annotation", "response.compaction.")):
        return True
    if obj.get("type") in _BEYOND_SPEC_ITEMS:
        return True
    # The spec's annotations are url_citation only; file_citation (file_search) and
    # container_file_citation (code_interpreter) are OpenAI's.
    if kind == "output_text" and any(
            isinstance(a, dict) and a.get("type") in ("file_citation", "container_file_citation")
            for a in obj.get("annotations") or ()):
        return True
    if kind == "message" and any(beyond_spec(p) for p in obj.get("content") or ()):
        return True
    for key in ("item", "response", "part"):
        if beyond_spec(obj.get(key)):
            return True
    tools, output = obj.get("tools") or (), obj.get("output") or ()
    return any(isinstance(t, dict) and t.get("type") in _BEYOND_SPEC_TOOLS for t in tools) or any(
        beyond_spec(i) for i in output)


def spec_validate_event(event: dict[str, Any]) -> None:
    if beyond_spec(event):
        return  # openai-python's models are the reference for these
    kind = event.get("type")
    spec_kind = _SPEC_ALIASES.get(kind, kind)  # type: ignore[arg-type]
    name = spec_event_schemas().get(spec_kind)  # type: ignore[arg-type]
    if name is None:
        raise ValidationFailure(f"event type {kind!r} has no schema in the Open Responses spec")
    instance = event if spec_kind == kind else {**event, "type": spec_kind}
    errors = _spec_errors(instance, name)
    if errors:
        raise ValidationFailure(f"{kind} does not match spec {name}: {errors}")


def spec_validate_response(resp: dict[str, Any]) -> None:
    if beyond_spec(resp):
        return
    errors = _spec_errors(resp, "ResponseResource")
    if errors:
        raise ValidationFailure(f"response does not match spec ResponseResource: {errors}")


# -- both ---------------------------------------------------------------------------------------


def validate_event(
    event: dict[str, Any], *, allow_extra: Iterable[str] = (), any_error_code: bool = False
) -> Any:
    """SDK model (the specific one, no unknown fields) and Open Responses schema."""
    parsed = sdk_validate_event(event, allow_extra=allow_extra, any_error_code=any_error_code)
    spec_validate_event(event)
    return parsed


def validate_response(
    resp: dict[str, Any], *, allow_extra: Iterable[str] = (), any_error_code: bool = False
) -> Response:
    """openai ``Response`` (no unknown fields) and the spec's ``ResponseResource``."""
    parsed = sdk_validate_response(resp, allow_extra=allow_extra, any_error_code=any_error_code)
    spec_validate_response(resp)
    return parsed


# -- SSE framing --------------------------------------------------------------------------------


def events_from_sse(blobs: Iterable[bytes]) -> list[dict[str, Any]]:
    """Our SSE output as event dicts; each blob must be exactly one well-formed event."""
    events: list[dict[str, Any]] = []
    for blob in blobs:
        if b"\r" in blob or not blob.startswith(b"event: ") or not blob.endswith(b"\n\n"):
            raise ValidationFailure(f"not one `event: ..\\ndata: ..\\n\\n` frame: {blob[:120]!r}")
        head, data = blob[:-2].split(b"\n", 1)
        if not data.startswith(b"data: ") or b"\n" in data:
            raise ValidationFailure(f"expected one data line: {blob[:120]!r}")
        event = json.loads(data[6:])
        if head[7:].decode() != event.get("type"):
            raise ValidationFailure(f"event line {head!r} but type {event.get('type')!r}")
        events.append(event)
    return events


# -- grammar ------------------------------------------------------------------------------------


@dataclass
class ItemTrace:
    """One output item as the stream told it."""

    output_index: int
    id: str
    type: str
    events: list[str] = field(default_factory=list)  # event types, in order
    added: dict[str, Any] = field(default_factory=dict)
    done: dict[str, Any] | None = None


@dataclass
class Grammar:
    items: list[ItemTrace]
    terminal: dict[str, Any]


class _Part:
    __slots__ = ("annotations", "deltas", "done_text", "index", "kind", "part_type")

    def __init__(self, kind: str, index: int, part_type: str) -> None:
        self.kind = kind  # "content" or "summary"
        self.index = index
        self.part_type = part_type
        self.deltas: list[str] = []
        self.done_text: str | None = None
        self.annotations: list[Any] = []  # response.output_text.annotation.added, in order


# event type -> (part kind, part type it belongs to, role) for events inside a part
_PART_EVENTS = {
    "response.output_text.delta": ("content", "output_text", "delta"),
    "response.output_text.done": ("content", "output_text", "done"),
    "response.refusal.delta": ("content", "refusal", "delta"),
    "response.refusal.done": ("content", "refusal", "done"),
    "response.reasoning_text.delta": ("content", "reasoning_text", "delta"),
    "response.reasoning_text.done": ("content", "reasoning_text", "done"),
    "response.reasoning_summary_text.delta": ("summary", "summary_text", "delta"),
    "response.reasoning_summary_text.done": ("summary", "summary_text", "done"),
}
_PART_TEXT_KEY = {"output_text": "text", "refusal": "refusal", "reasoning_text": "text",
                  "summary_text": "text"}
_ITEM_PART_TYPES = {
    "message": {"content": {"output_text", "refusal"}},
    "reasoning": {"content": {"reasoning_text"}, "summary": {"summary_text"}},
    "function_call": {},
    "compaction": {},
    "custom_tool_call": {},
    "mcp_list_tools": {},
    "mcp_call": {},
    "mcp_approval_request": {},
    "image_generation_call": {},
    "web_search_call": {},
    "file_search_call": {},
    "code_interpreter_call": {},
}


def check_grammar(events: list[dict[str, Any]], *, volatile: Iterable[str] = ()) -> Grammar:
    """Assert the stream grammar OpenAI follows; return the items as the stream told them.

    - ``sequence_number`` is 0, 1, 2, ... ; ``response.created`` then ``response.in_progress``
      first (``response.queued`` allowed between); exactly one terminal event, last;
    - per item: ``output_item.added`` -> (part added -> deltas -> done -> part done)* ->
      ``output_item.done``; function calls: argument deltas -> one ``.done``; items never
      interleave, ``output_index`` is dense in start order, nothing is open at the end but,
      in a failed response, a function call whose arguments were cut off;
    - ``response.compaction.compacting`` announces the compaction item about to be added (its
      id and output index), while the summary is written; in a failed response (the
      compaction failed) no item may follow it;
    - done texts equal their deltas, the done item carries exactly the closed parts;
    - ids: ``resp_``, ``msg_``, ``fc_``, ``rs_``; the terminal response's output equals the
      items of the ``output_item.done`` events, in order, and its status matches the event.

    ``volatile`` names item fields left out of that last comparison: OpenAI re-encrypts
    ``encrypted_content`` at every emission, so its recordings need ``("encrypted_content",)``.
    """
    skip = frozenset(volatile)

    def stable(items: list[Any]) -> list[Any]:
        return [{k: v for k, v in i.items() if k not in skip} for i in items]


    def fail(i: int, why: str) -> ValidationFailure:
        kind = events[i].get("type") if i < len(events) else "<end>"
        return ValidationFailure(f"event {i} ({kind}): {why}")

    if len(events) < 3:
        raise ValidationFailure(f"a stream needs created, in_progress and a terminal: {events}")
    for i, event in enumerate(events):
        if event.get("sequence_number") != i:
            raise fail(i, f"sequence_number {event.get('sequence_number')!r}, expected {i}")
    if events[0]["type"] != "response.created":
        raise fail(0, "the first event must be response.created")
    start = 1
    if events[1]["type"] == "response.queued":
        start = 2
    if events[start]["type"] != "response.in_progress":
        raise fail(start, "response.in_progress must follow response.created")
    response_id = events[0]["response"]["id"]
    if not response_id.startswith("resp_"):
        raise fail(0, f"response id {response_id!r} lacks resp_")
    if events[0]["response"]["output"] != []:
        raise fail(0, "response.created must carry an empty output")
    for i in range(start + 1):
        if events[i]["response"]["id"] != response_id:
            raise fail(i, "response id changed")
        if events[i]["response"]["status"] not in ("queued", "in_progress"):
            raise fail(i, f"status {events[i]['response']['status']!r} before the end")
    terminals = [i for i, e in enumerate(events) if e["type"] in TERMINAL_TYPES]
    if terminals != [len(events) - 1]:
        raise ValidationFailure(f"terminal events at {terminals}; expected one, last")

    items: list[ItemTrace] = []
    item: ItemTrace | None = None
    part: _Part | None = None
    closed_parts: dict[str, list[_Part]] = {}
    args: list[str] = []
    args_done: str | None = None
    announced: tuple[str, int] | None = None  # (item_id, output_index) compacting named

    for i in range(start + 1, len(events) - 1):
        event = events[i]
        kind = event["type"]
        if kind == "response.compaction.compacting" and item is None:
            if announced is not None:
                raise fail(i, f"{kind} again before its item")
            if not str(event.get("item_id", "")).startswith("cmp_"):
                raise fail(i, f"item_id {event.get('item_id')!r} lacks cmp_")
            if event.get("output_index") != len(items):
                raise fail(i, f"output_index {event.get('output_index')}, expected {len(items)}")
            announced = (event["item_id"], event["output_index"])
            continue
        if announced is not None and kind != "response.output_item.added":
            raise fail(i, f"{kind} before the compaction item compacting announced")
        if kind == "response.output_item.added":
            if item is not None:
                raise fail(i, f"item {item.id} is still open: items must not interleave")
            new = event["item"]
            if announced is not None:
                if (new.get("type"), new.get("id"), event["output_index"]) != (
                        "compaction", *announced):
                    raise fail(i, f"the item added is not the compaction {announced[0]} "
                                  "compacting announced")
                announced = None
            if event["output_index"] != len(items):
                raise fail(i, f"output_index {event['output_index']}, expected {len(items)}")
            prefix = ITEM_ID_PREFIXES.get(new.get("type"))
            if prefix is None:
                raise fail(i, f"unexpected item type {new.get('type')!r}")
            if not str(new.get("id", "")).startswith(prefix):
                raise fail(i, f"item id {new.get('id')!r} lacks {prefix}")
            if new["type"] == "compaction":
                if not new.get("encrypted_content"):
                    raise fail(i, "an added compaction item must be whole")
            elif new["type"] == "mcp_approval_request":
                if not all(isinstance(new.get(k), str) for k in ("name", "arguments",
                                                                   "server_label")):
                    raise fail(i, "an added approval request must be whole")
            elif new["type"] not in _NO_STATUS and new.get("status") != "in_progress":
                raise fail(i, f"an added item has status {new.get('status')!r}")
            if new["type"] in ("function_call", "mcp_call") and new.get("arguments") != "":
                raise fail(i, f"an added {new['type']} must have empty arguments")
            if new["type"] == "custom_tool_call" and new.get("input") != "":
                raise fail(i, "an added custom_tool_call must have empty input")
            if new["type"] == "mcp_list_tools" and new.get("tools") != []:
                raise fail(i, "an added mcp_list_tools must list no tools yet")
            if new["type"] == "message" and new.get("content") != []:
                raise fail(i, "an added message must have empty content")
            if new["type"] == "reasoning" and new.get("summary") != []:
                raise fail(i, "an added reasoning item must have an empty summary")
            item = ItemTrace(len(items), new["id"], new["type"], [kind], added=new)
            items.append(item)
            closed_parts = {"content": [], "summary": []}
            args, args_done = [], None
            continue
        if item is None:
            raise fail(i, "an item event with no open item")
        if event.get("output_index") != item.output_index:
            raise fail(i, f"output_index {event.get('output_index')} but item "
                          f"{item.output_index} is the open one")
        if kind != "response.output_item.done" and event.get("item_id") != item.id:
            raise fail(i, f"item_id {event.get('item_id')!r} but {item.id!r} is open")
        item.events.append(kind)
        allowed = _ITEM_PART_TYPES[item.type]

        if kind in ("response.content_part.added", "response.reasoning_summary_part.added"):
            part_kind = "content" if kind == "response.content_part.added" else "summary"
            index_key = "content_index" if part_kind == "content" else "summary_index"
            if part is not None:
                raise fail(i, "a part is already open")
            ptype = event["part"].get("type")
            if ptype not in allowed.get(part_kind, ()):
                raise fail(i, f"part type {ptype!r} in a {item.type} {part_kind}")
            if event["part"].get(_PART_TEXT_KEY[ptype]) != "":
                raise fail(i, "an added part must be empty")
            if event[index_key] != len(closed_parts[part_kind]):
                raise fail(i, f"{index_key} {event[index_key]}, expected "
                              f"{len(closed_parts[part_kind])}")
            part = _Part(part_kind, event[index_key], ptype)
        elif kind in _PART_EVENTS:
            part_kind, ptype, role = _PART_EVENTS[kind]
            index_key = "content_index" if part_kind == "content" else "summary_index"
            if part is None or part.kind != part_kind or part.part_type != ptype:
                raise fail(i, f"no open {ptype} part")
            if event[index_key] != part.index:
                raise fail(i, f"{index_key} {event[index_key]} but part {part.index} is open")
            if part.done_text is not None:
                raise fail(i, "event after the part's text was done")
            if role == "delta":
                part.deltas.append(event["delta"])
            else:
                text = event[_PART_TEXT_KEY[ptype]]
                if text != "".join(part.deltas):
                    raise fail(i, "done text differs from the deltas")
                part.done_text = text
        elif kind == "response.output_text.annotation.added":
            if part is None or part.part_type != "output_text" or part.done_text is not None:
                raise fail(i, "an annotation outside an open output_text part")
            if event["content_index"] != part.index or (
                    event["annotation_index"] != len(part.annotations)):
                raise fail(i, "annotation_index or content_index out of order")
            part.annotations.append(event["annotation"])
        elif kind in ("response.content_part.done", "response.reasoning_summary_part.done"):
            part_kind = "content" if kind == "response.content_part.done" else "summary"
            index_key = "content_index" if part_kind == "content" else "summary_index"
            if part is None or part.kind != part_kind or event[index_key] != part.index:
                raise fail(i, "closing a part that is not open")
            if part.done_text is None:
                raise fail(i, "part closed before its text .done event")
            done_part = event["part"]
            if done_part.get("type") != part.part_type or (
                done_part.get(_PART_TEXT_KEY[part.part_type]) != part.done_text
            ):
                raise fail(i, "the closed part differs from its text")
            if part.part_type == "output_text" and done_part.get("annotations") != (
                    part.annotations):
                raise fail(i, "the closed part's annotations differ from those added")
            closed_parts[part_kind].append(part)
            part = None
        elif kind in ("response.function_call_arguments.delta",
                      "response.mcp_call_arguments.delta",
                      "response.custom_tool_call_input.delta"):
            if item.type != _DELTA_ITEM[kind] or args_done is not None:
                raise fail(i, f"{kind} outside an open {_DELTA_ITEM[kind]}")
            if kind == "response.mcp_call_arguments.delta" and "response.mcp_call.in_progress" \
                    not in item.events:
                raise fail(i, "mcp_call arguments before response.mcp_call.in_progress")
            args.append(event["delta"])
        elif kind in ("response.function_call_arguments.done",
                      "response.mcp_call_arguments.done",
                      "response.custom_tool_call_input.done"):
            if item.type != _DELTA_ITEM[kind] or args_done is not None:
                raise fail(i, f"{kind} twice or outside a {_DELTA_ITEM[kind]}")
            done_key = "input" if item.type == "custom_tool_call" else "arguments"
            if event[done_key] != "".join(args):
                raise fail(i, f"{done_key} differ from their deltas")
            args_done = event[done_key]
        elif kind in _MCP_LIST_EVENTS or kind in _MCP_CALL_EVENTS:
            family = _MCP_LIST_EVENTS if kind in _MCP_LIST_EVENTS else _MCP_CALL_EVENTS
            wanted = "mcp_list_tools" if family is _MCP_LIST_EVENTS else "mcp_call"
            if item.type != wanted:
                raise fail(i, f"{kind} outside an open {wanted}")
            seen = [e for e in item.events[:-1] if e in family]
            if kind == family[0] and seen:
                raise fail(i, f"{kind} twice")
            if kind != family[0] and seen != [family[0]]:
                raise fail(i, f"{kind} must follow exactly one {family[0]}")
            if wanted == "mcp_call" and kind != family[0] and args_done is None:
                raise fail(i, "mcp_call ended before its arguments were done")
        elif kind in _WEB_SEARCH_EVENTS or kind in _FILE_SEARCH_EVENTS:
            family = _WEB_SEARCH_EVENTS if kind in _WEB_SEARCH_EVENTS else _FILE_SEARCH_EVENTS
            wanted = family[0].split(".")[1]
            if item.type != wanted:
                raise fail(i, f"{kind} outside an open {wanted}")
            seen = [e for e in item.events[:-1] if e in family]
            if seen != list(family[:family.index(kind)]):
                raise fail(i, f"{kind} after {seen}")
        elif kind in _IMAGE_EVENTS:
            if item.type != "image_generation_call":
                raise fail(i, f"{kind} outside an open image_generation_call")
            seen = [e for e in item.events[:-1] if e in _IMAGE_EVENTS]
            order = {"response.image_generation_call.in_progress": not seen,
                     "response.image_generation_call.generating":
                         seen == ["response.image_generation_call.in_progress"],
                     "response.image_generation_call.partial_image":
                         seen[:2] == list(_IMAGE_EVENTS[:2]) and _IMAGE_EVENTS[3] not in seen,
                     "response.image_generation_call.completed":
                         seen[:2] == list(_IMAGE_EVENTS[:2]) and _IMAGE_EVENTS[3] not in seen}
            if not order[kind]:
                raise fail(i, f"{kind} after {seen}")
            if kind == _IMAGE_EVENTS[2] and event["partial_image_index"] != seen.count(kind):
                raise fail(i, "partial_image_index out of order")
        elif kind in _CODE_EVENTS:
            if item.type != "code_interpreter_call":
                raise fail(i, f"{kind} outside an open code_interpreter_call")
            seen = [e for e in item.events[:-1] if e in _CODE_EVENTS]
            prior = seen[-1] if seen else None
            before = {_CODE_EVENTS[0]: (None,), _CODE_EVENTS[1]: _CODE_EVENTS[:2],
                      _CODE_EVENTS[2]: _CODE_EVENTS[:2], _CODE_EVENTS[3]: (_CODE_EVENTS[2],),
                      _CODE_EVENTS[4]: (_CODE_EVENTS[3],)}
            if prior not in before[kind]:
                raise fail(i, f"{kind} after {prior}")
            if kind == _CODE_EVENTS[1]:
                args.append(event["delta"])
            elif kind == _CODE_EVENTS[2]:
                if event["code"] != "".join(args):
                    raise fail(i, "the code differs from its deltas")
                args_done = event["code"]
        elif kind == "response.compaction.compacting":
            if item.type != "compaction":
                raise fail(i, f"{kind} outside an open compaction item")
        elif kind == "response.output_item.done":
            if part is not None:
                raise fail(i, "item closed with a part still open")
            done = event["item"]
            if done.get("id") != item.id or done.get("type") != item.type:
                raise fail(i, "the done item is not the added one")
            if item.type in ("function_call", "mcp_call", "custom_tool_call"):
                done_key = "input" if item.type == "custom_tool_call" else "arguments"
                if args_done is None:
                    raise fail(i, f"{item.type} closed without its {done_key} done")
                if done.get(done_key) != args_done:
                    raise fail(i, f"done item {done_key} differ from their .done event")
                for key in ("call_id", "name", "server_label", "namespace"):
                    if done.get(key) != item.added.get(key):
                        raise fail(i, f"{key} changed between added and done")
            if item.type == "mcp_call":
                ended = [e for e in item.events if e in _MCP_CALL_EVENTS[1:]]
                want = {"response.mcp_call.completed": "completed",
                        "response.mcp_call.failed": "failed"}
                cut = not ended and done.get("status") == "incomplete"  # the response failed
                if not cut and (len(ended) != 1 or done.get("status") != want[ended[0]]):
                    raise fail(i, f"mcp_call done with status {done.get('status')!r} after "
                                  f"{ended}")
                if not cut and (done.get("error") is None) != (done["status"] == "completed"):
                    raise fail(i, "an mcp_call has an error exactly when it failed")
            if item.type == "web_search_call" and done.get("status") != (
                    "completed" if _WEB_SEARCH_EVENTS[2] in item.events else "failed"):
                raise fail(i, "a web_search_call is completed after its .completed event, else "
                              "failed")
            if item.type == "file_search_call" and done.get("status") != (
                    "completed" if _FILE_SEARCH_EVENTS[2] in item.events else "failed"):
                raise fail(i, "a file_search_call is completed after its .completed event, "
                              "else failed")
            if item.type == "image_generation_call":
                completed = _IMAGE_EVENTS[3] in item.events
                if done.get("status") != ("completed" if completed else "failed") or (
                        bool(done.get("result")) != completed) or (
                        (done.get("error") is None) != completed):
                    raise fail(i, "an image_generation_call is completed with a result after "
                                  "its .completed event, else failed with an error")
            if item.type == "code_interpreter_call":
                completed = _CODE_EVENTS[4] in item.events
                if done.get("status") != ("completed" if completed else "failed"):
                    raise fail(i, "a code_interpreter_call is completed after its .completed "
                                  "event, else failed")
                if args_done is not None and done.get("code") != args_done:
                    raise fail(i, "the done item's code differs from its .done event")
                if done.get("container_id") != item.added.get("container_id"):
                    raise fail(i, "container_id changed between added and done")
                if (done.get("outputs") is None) != (item.added.get("outputs") is None):
                    raise fail(i, "outputs are null in added exactly when in done")
            if item.type == "mcp_list_tools":
                ended = [e for e in item.events if e in _MCP_LIST_EVENTS[1:]]
                if len(ended) != 1 or bool(done.get("error")) != ended[0].endswith("failed"):
                    raise fail(i, "mcp_list_tools done without exactly one completed/failed")
            for part_kind in ("content", "summary"):
                if part_kind not in allowed:
                    continue
                got = done.get(part_kind) or []
                want = [(p.part_type, p.done_text) for p in closed_parts[part_kind]]
                have = [(p.get("type"), p.get(_PART_TEXT_KEY.get(p.get("type"), "text")))
                        for p in got]
                if have != want:
                    raise fail(i, f"done item {part_kind} {have} differs from its parts {want}")
            if item.type in _WHOLE_ITEMS:
                if done != item.added:
                    raise fail(i, "a whole item changed between added and done")
            elif item.type not in _NO_STATUS and item.type not in (
                    "mcp_call", "image_generation_call", "web_search_call",
                    "file_search_call", "code_interpreter_call") and done.get(
                    "status") not in ("completed", "incomplete"):
                raise fail(i, f"done item status {done.get('status')!r}")
            item.done = done
            item = None
        else:
            raise fail(i, f"unexpected event type {kind!r}")

    last = len(events) - 1
    terminal = events[last]
    response = terminal["response"]
    finished = [t.done for t in items]
    cancelled = terminal["type"] == "response.failed" and response["status"] == "cancelled"
    if announced is not None and terminal["type"] != "response.failed":
        raise fail(last, "the compaction compacting announced never came")
    if item is not None:
        # Only a failed response may end with a call still open (its arguments were cut off,
        # so it is never announced done: issue 16), and a cancelled one with any item; the
        # output keeps it, incomplete.
        if terminal["type"] != "response.failed" or not (
            item.type in ("function_call", "custom_tool_call") or cancelled
        ):
            raise fail(last, f"item {item.id} still open at the end")
        kept = response["output"][-1] if response["output"] else {}
        if kept.get("id") != item.id or kept.get("status", "incomplete") != "incomplete":
            raise fail(last, "an unfinished item must stay in the output, incomplete")
        if item.type == "function_call" and kept.get("arguments") != "".join(args):
            raise fail(last, "the unfinished call's arguments differ from its deltas")
        finished[-1] = kept
    if response["id"] != response_id:
        raise fail(last, "response id changed")
    if response["status"] != _TERMINAL_STATUS[terminal["type"]] and not cancelled:
        raise fail(last, f"status {response['status']!r} in {terminal['type']}")
    if stable(response["output"]) != stable(finished):
        raise fail(last, "terminal output differs from the output_item.done items")
    return Grammar(items, terminal)


_DELTA_ITEM = {
    "response.function_call_arguments.delta": "function_call",
    "response.function_call_arguments.done": "function_call",
    "response.mcp_call_arguments.delta": "mcp_call",
    "response.mcp_call_arguments.done": "mcp_call",
    "response.custom_tool_call_input.delta": "custom_tool_call",
    "response.custom_tool_call_input.done": "custom_tool_call",
}


# -- reading content back out of events ---------------------------------------------------------


@dataclass
class Reconstructed:
    text: str = ""
    refusal: str = ""
    reasoning: str = ""
    calls: list[tuple[str, str, str]] = field(default_factory=list)  # (call_id, name, arguments)


def reconstruct(events: list[dict[str, Any]]) -> Reconstructed:
    """Text, refusal, reasoning and calls as a client reading only the deltas would see them."""
    out = Reconstructed()
    text, refusal, reasoning = [], [], []
    calls: dict[str, list[Any]] = {}
    for event in events:
        kind = event["type"]
        if kind == "response.output_text.delta":
            text.append(event["delta"])
        elif kind == "response.refusal.delta":
            refusal.append(event["delta"])
        elif kind in ("response.reasoning_text.delta", "response.reasoning_summary_text.delta"):
            reasoning.append(event["delta"])
        elif kind == "response.output_item.added" and event["item"]["type"] == "function_call":
            added = event["item"]
            calls[added["id"]] = [added["call_id"], added["name"], []]
        elif kind == "response.function_call_arguments.delta":
            calls[event["item_id"]][2].append(event["delta"])
    out.text, out.refusal, out.reasoning = "".join(text), "".join(refusal), "".join(reasoning)
    out.calls = [(c, n, "".join(a)) for c, n, a in calls.values()]
    return out


def failed_code(error: Any) -> str | None:
    """The gateway's own code behind a failed Response's ``error`` (a dict or an SDK object).

    The code itself where the SDK documents it; else the response says ``server_error`` and
    its message ends with the gateway's code in parentheses (``response_error``).
    """
    if error is None:
        return None
    if isinstance(error, dict):
        code, message = error.get("code"), error.get("message") or ""
    else:
        code, message = error.code, error.message or ""
    if code == "server_error":
        found = re.search(r"\(([a-z0-9_]+)\)$", message)
        if found:
            return found[1]
    return code
