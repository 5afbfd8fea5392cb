"""Backend for any OpenAI-compatible Chat Completions server, over one pooled httpx client per loop.

Why it is shaped this way:
- Retries (connect errors, 429, 5xx) happen only before the first byte of a successful body,
  so a client never sees output twice; ``Retry-After`` is honoured up to a cap.
- The generator reads the first chunk before yielding anything, so the caller's
  ``await anext(agen)`` raises :class:`UpstreamError` while HTTP headers can still carry it.
- The upstream response is closed in a ``finally``: a consumer that stops iterating (aclose,
  task cancelled, client gone) closes the upstream connection at once.
- Upstream requests go through :class:`.http11.Http11Transport` (httpx's API and proxies,
  a lean HTTP/1.1 wire format and pool beneath): httpcore's h11 layers and pool were most of
  the gateway's CPU under load (docs/upstream.md).
- Lines are split from raw bytes rather than ``aiter_lines()``: no str round trip and two fewer
  async generator layers per network read; the loop lives in ``stream`` itself so each chunk
  passes one generator, not two.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import random
import ssl
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import orjson

from responses_gateway.backends.base import BackendRequest
from responses_gateway.backends.http11 import Http11Transport, body_pieces, install
from responses_gateway.errors import UpstreamError
from responses_gateway.translate.upstream_sse import Chunk, ChunkDecoder

_RETRYABLE_TRANSPORT = (httpx.ConnectError, httpx.ConnectTimeout)
# Raised while the request is sent and headers awaited on a pooled connection the server had
# already closed: nothing was processed, so a retry is safe.
_STALE_CONNECTION = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)
_DROPPED = (httpx.RemoteProtocolError, httpx.ReadError)
_DRAIN_SECONDS = 1.0  # after [DONE], how long to wait for the body's end (keeps the conn pooled)
_MAX_ERROR_TEXT = 500


def _closed_error() -> UpstreamError:
    return UpstreamError(
        502,
        "Upstream error: upstream connection closed before the response finished",
        code="upstream_connection_closed",
    )


def _timeout_error() -> UpstreamError:
    return UpstreamError(
        504,
        "Upstream error: upstream timed out (no data within the read timeout)",
        code="upstream_timeout",
    )


@contextlib.contextmanager
def _read_errors(what: str) -> Iterator[None]:
    """Reading a body that had started: transport failures become UpstreamErrors."""
    try:
        yield
    except httpx.TimeoutException as exc:
        raise _timeout_error() from exc
    except _DROPPED as exc:
        raise _closed_error() from exc
    except httpx.HTTPError as exc:
        raise UpstreamError(
            502, f"Upstream error: reading the {what} failed ({type(exc).__name__})",
            code="upstream_error",
        ) from exc


class OpenAICompatBackend:
    """POSTs to ``{base_url}/chat/completions`` and yields lists of chunks (see
    ``backends.base``)."""

    name = "openai"

    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        *,
        connect_timeout: float = 10,
        read_timeout: float = 300,
        max_retries: int = 2,
        client: httpx.AsyncClient | None = None,
        backoff_base: float = 0.5,
        backoff_max: float = 8.0,
        retry_after_cap: float = 20.0,
        max_connections: int | None = 1000,
    ) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.retry_after_cap = retry_after_cap
        self._timeout = httpx.Timeout(
            connect=connect_timeout, read=read_timeout, write=read_timeout, pool=connect_timeout
        )
        self._max_connections = max_connections
        self._headers = {"content-type": "application/json", "accept": "application/json"}
        if api_key:
            self._headers["authorization"] = f"Bearer {api_key}"
        self._owns_client = client is None
        self._client = client
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ssl: ssl.SSLContext | None = None  # built once: each costs ~15 ms

    # -- client lifecycle ------------------------------------------------------------------

    def _http(self) -> httpx.AsyncClient:
        """The client for this event loop: a pool is bound to the loop it was made in, and a
        Lambda environment may run its handler in a new loop each time."""
        client = self._client
        if self._owns_client:
            loop = asyncio.get_running_loop()
            if client is None or self._loop is not loop:
                if self._ssl is None:
                    self._ssl = httpx.create_ssl_context()
                limits = httpx.Limits(max_connections=self._max_connections,
                                      max_keepalive_connections=self._max_connections)
                client = self._client = httpx.AsyncClient(
                    timeout=self._timeout, verify=self._ssl, limits=limits
                )  # the limits apply to proxied requests; direct ones share the transport's
                install(client, Http11Transport(ssl_context=self._ssl,
                                                max_connections=self._max_connections))
                self._loop = loop
        assert client is not None
        return client

    async def aclose(self) -> None:
        client = self._client
        if self._owns_client and client is not None:
            self._client, self._loop = None, None
            await client.aclose()

    # -- streaming -------------------------------------------------------------------------

    async def stream(self, request: BackendRequest) -> AsyncIterator[list[Chunk]]:
        """Yield the chunks of each network read (or one chat.completion when
        ``body["stream"]`` is false).

        The hot loop: bytes -> lines -> chunks, until ``[DONE]``. A plain ``data: ...`` event
        (what nearly every server sends) is yielded as its JSON bytes for the translator to
        parse; anything else (``event:``, multi-line data, comments) comes parsed.
        """
        streaming = bool(request.body.get("stream"))
        response = await self._send(self._http(), orjson.dumps(request.body))
        try:
            if not streaming or response.headers.get("content-type", "").startswith(
                "application/json"
            ):
                # A server that ignores stream=true answers with a chat.completion, which the
                # translator accepts as one chunk.
                yield [await self._read_completion(response)]
                return
            decoder = ChunkDecoder()
            body = body_pieces(response)
            with _read_errors("stream"):
                async for data in body:
                    batch = decoder.feed(data)
                    if batch:
                        yield batch
                    if decoder.done:
                        await _drain(body)
                        return
            # The body ended without [DONE]: take a last unterminated event, then say so. The
            # caller judges it: after a finish_reason the response is whole all the same.
            batch = decoder.end()
            if batch:
                yield batch
            if not decoder.done:
                raise _closed_error()
        finally:
            await response.aclose()

    async def _send(self, client: httpx.AsyncClient, content: bytes) -> httpx.Response:
        """Send with retries; return a 2xx response whose body is still unread."""
        attempt = 0
        while True:
            req = client.build_request("POST", self.url, content=content, headers=self._headers)
            try:
                response = await client.send(req, stream=True)
            except httpx.TimeoutException as exc:
                if isinstance(exc, httpx.ConnectTimeout) and attempt < self.max_retries:
                    await asyncio.sleep(self._backoff(attempt))
                    attempt += 1
                    continue
                raise _timeout_error() from exc
            except (*_RETRYABLE_TRANSPORT, *_STALE_CONNECTION) as exc:
                if attempt < self.max_retries:
                    await asyncio.sleep(self._backoff(attempt))
                    attempt += 1
                    continue
                raise UpstreamError(
                    502, f"Upstream error: could not reach the upstream ({type(exc).__name__})",
                    code="upstream_unavailable",
                ) from exc
            except httpx.HTTPError as exc:
                raise UpstreamError(
                    502, f"Upstream error: request failed ({type(exc).__name__})",
                    code="upstream_error",
                ) from exc
            status = response.status_code
            if status < 300:
                return response
            if status < 400:
                await response.aclose()
                raise UpstreamError(
                    502, f"Upstream error (HTTP {status}): unexpected redirect to "
                    f"{response.headers.get('location', '?')}; check the upstream base URL",
                    code="upstream_error",
                )
            try:
                error = await _http_error(response)
            finally:
                await response.aclose()
            if (status == 429 or status >= 500) and attempt < self.max_retries:
                delay = self._backoff(attempt)
                if error.retry_after is not None:
                    delay = min(max(error.retry_after, 0.0), self.retry_after_cap)
                await asyncio.sleep(delay)
                attempt += 1
                continue
            raise error

    def _backoff(self, attempt: int) -> float:
        """Exponential backoff with full jitter in its upper half."""
        base = min(self.backoff_base * (2**attempt), self.backoff_max)
        return base * (0.5 + random.random() * 0.5)

    async def _read_completion(self, response: httpx.Response) -> dict[str, Any]:
        with _read_errors("response"):
            raw = await response.aread()
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            body = None
        if body.__class__ is not dict:
            raise UpstreamError(
                502, "Upstream error: the upstream answered with a body that is not a JSON object",
                code="upstream_protocol_error",
            )
        if "error" in body and not body.get("choices"):
            message, code = _error_fields(body)
            raise UpstreamError(
                502, f"Upstream error (HTTP {response.status_code}): {message}",
                code=code or "upstream_error",
            )
        return body


async def _drain(body: AsyncIterator[bytes]) -> None:
    """Read to the end of the body after ``[DONE]`` so the connection returns to the pool."""
    try:
        async with asyncio.timeout(_DRAIN_SECONDS):
            async for _ in body:
                pass
    except (TimeoutError, httpx.HTTPError):
        pass  # the response is closed by the caller either way


async def _http_error(response: httpx.Response) -> UpstreamError:
    """An upstream 4xx/5xx as the same status with OpenAI's type and the upstream's code."""
    status = response.status_code
    try:
        raw = await response.aread()
    except httpx.HTTPError:
        raw = b""
    try:
        body: Any = orjson.loads(raw) if raw else None
    except orjson.JSONDecodeError:
        body = None
    if body is None:
        text = raw.decode("utf-8", "replace").strip()
        message = text[:_MAX_ERROR_TEXT] if text else (response.reason_phrase or "no details")
        code = None
    else:
        message, code = _error_fields(body)
    return UpstreamError(
        status,
        f"Upstream error (HTTP {status}): {message}",
        code=code,
        retry_after=parse_retry_after(response.headers),
    )


def _error_fields(body: Any) -> tuple[str, str | None]:
    """(message, code) from the error shapes servers send: OpenAI's, FastAPI's, lists, strings."""
    if isinstance(body, list) and body:
        body = body[0]
    if not isinstance(body, dict):
        return str(body)[:_MAX_ERROR_TEXT], None
    error = body.get("error", body)
    if isinstance(error, str):
        return error[:_MAX_ERROR_TEXT], None
    if not isinstance(error, dict):
        return str(error)[:_MAX_ERROR_TEXT], None
    message = error.get("message") or error.get("detail") or body.get("detail") or "no details"
    if not isinstance(message, str):
        message = orjson.dumps(message).decode()
    code = error.get("code")
    if code is not None and not isinstance(code, str):
        code = str(code)
    return message[:_MAX_ERROR_TEXT], code or None


def parse_retry_after(headers: httpx.Headers) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``Retry-After`` (seconds or an HTTP date)."""
    value = headers.get("retry-after-ms")
    if value:
        try:
            return max(float(value) / 1000.0, 0.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - time.time(), 0.0)
