"""Shared pieces of the end-to-end suites (tests/test_e2e_*.py).

The gateway runs under uvicorn (:class:`GatewayServer`) in front of a :class:`ScriptedUpstream`;
tests talk to it with the official ``openai`` client, and with raw httpx where the client hides
something (headers, SSE bytes, timing, error bodies). Every stream a test reads is judged by
``validate_event`` and ``check_grammar``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from openai import OpenAI

from responses_gateway.config import Settings
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.responses_validation import (
    Grammar,
    check_grammar,
    events_from_sse,
    validate_event,
    validate_response,
)
from tests.helpers.scripted_upstream import ScriptedUpstream

MODEL = "scripted-model"
WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather for a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
TIME_TOOL: dict[str, Any] = {
    "type": "function",
    "name": "get_time",
    "description": "Local time in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


def e2e_settings(upstream: ScriptedUpstream, db: Path, **overrides: Any) -> Settings:
    """Settings for a test gateway: SQLite in ``db``, no upstream retries (fast 429/500), a
    short keep-alive so a stall is observable quickly."""
    values: dict[str, Any] = {
        "upstream_url": upstream.base_url,
        "store": f"sqlite:{db}",
        "max_retries": 0,
        "keepalive_seconds": 0.5,
        "read_timeout": 20.0,
    }
    values.update(overrides)
    return Settings(**values)


def client_for(server: GatewayServer, api_key: str = "sk-test", **kwargs: Any) -> OpenAI:
    return OpenAI(base_url=server.base_url, api_key=api_key, max_retries=0, timeout=30, **kwargs)


def request_with(upstream: ScriptedUpstream, marker: str) -> dict[str, Any]:
    """The one upstream chat request whose messages contain ``marker``."""
    found = [
        body for body in upstream.requests if marker in str(body.get("messages"))
    ]
    assert len(found) == 1, f"expected one upstream request with {marker!r}, got {len(found)}"
    return found[0]


def check_stream(events: list[dict[str, Any]]) -> Grammar:
    """Every event valid (SDK model + Open Responses schema) and the stream grammar held."""
    for event in events:
        validate_event(event)
    return check_grammar(events)


def check_response(response: Any) -> dict[str, Any]:
    """A Response (SDK object or dict) valid against the SDK model and the spec; as a dict."""
    data = response if isinstance(response, dict) else response.to_dict(mode="json")
    validate_response(data)
    return data


def sdk_events(stream: Any) -> list[dict[str, Any]]:
    """The events of an SDK stream, as the dicts that came over the wire."""
    return [event.to_dict(mode="json") for event in stream]


@dataclass
class RawStream:
    """A streamed HTTP response read as raw SSE frames, each with its arrival time."""

    status: int
    headers: httpx.Headers
    body: bytes = b""
    frames: list[tuple[float, bytes]] = field(default_factory=list)  # (seconds, frame)

    @property
    def event_frames(self) -> list[bytes]:
        return [frame for _, frame in self.frames if not frame.startswith(b":")]

    @property
    def comments(self) -> list[tuple[float, bytes]]:
        return [(t, frame) for t, frame in self.frames if frame.startswith(b":")]

    @property
    def events(self) -> list[dict[str, Any]]:
        return events_from_sse(self.event_frames)

    def arrival(self, event_type: str) -> float:
        """When the first event of this type arrived (seconds after the request was sent)."""
        for t, frame in self.frames:
            if frame.startswith(b"event: " + event_type.encode() + b"\n"):
                return t
        raise AssertionError(f"no {event_type} in the stream")


def split_frames(buffer: bytes) -> tuple[list[bytes], bytes]:
    """Complete ``...\\n\\n`` frames in ``buffer`` and the incomplete rest."""
    frames = []
    while b"\n\n" in buffer:
        frame, buffer = buffer.split(b"\n\n", 1)
        frames.append(frame + b"\n\n")
    return frames, buffer


def stream_raw(
    url: str,
    body: dict[str, Any],
    *,
    headers: dict[str, str] | None = None,
    timeout: float = 30,
) -> RawStream:
    """POST ``body`` and read the whole answer as SSE frames (or a plain body on error)."""
    start = time.monotonic()
    with httpx.Client(timeout=timeout) as client, client.stream(
        "POST", url, json=body, headers=headers
    ) as response:
        raw = RawStream(response.status_code, response.headers)
        pending = b""
        for piece in response.iter_raw():
            raw.body += piece
            frames, pending = split_frames(pending + piece)
            now = time.monotonic() - start
            raw.frames.extend((now, frame) for frame in frames)
        assert not pending, f"the stream ended inside a frame: {pending[:200]!r}"
    return raw
