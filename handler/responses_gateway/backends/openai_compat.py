"""Backend for any OpenAI-compatible Chat Completions server, over one pooled httpx client per loop.

Why it is shaped this way:
- Retries happen only for failures a retry can fix (connect errors, 408, 429, 502/503/504,
  "overloaded", a 500 that does not say the request was invalid), only before the first byte
  of a successful body, so a client never sees output twice; ``Retry-After`` is honoured up
  to a cap.
- The body is rewritten for the upstream's dialect (``backends/dialects.py``) once per
  request; a 400/422 naming a parameter the upstream does not support gets one more try
  without it, and the upstream is remembered to reject it.
- Every upstream message is redacted (``redaction.py``) before it becomes an error, a
  ``response.failed`` or a log line: servers echo the key they were sent. An upstream that
  rejects the gateway's own credentials (401/403) is a 502 ``upstream_auth_failed``, not a
  401 that would tell the client its key is wrong.
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
import logging
import random
import re
import ssl
import time
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any

import httpx
import orjson

from responses_gateway.backends import dialects, server_info
from responses_gateway.backends.base import BackendRequest, BaseBackend
from responses_gateway.backends.chunks import Chunk, ChunkDecoder, parse_chunk
from responses_gateway.backends.dialects import Dialect, Learned
from responses_gateway.backends.http11 import (
    Http11Transport,
    body_pieces,
    direct_transport,
    new_client,
)
from responses_gateway.errors import UpstreamError
from responses_gateway.heavy import heavy_items
from responses_gateway.net.policy import shown_url
from responses_gateway.redaction import redact

if TYPE_CHECKING:
    from responses_gateway.settings import Settings

logger = logging.getLogger("responses_gateway.upstream")

_RETRYABLE_TRANSPORT = (httpx.ConnectError, httpx.ConnectTimeout)
# Raised while the request is sent and headers awaited on a pooled connection the server had
# already closed: nothing was processed, so a retry is safe.
_STALE_CONNECTION = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)
_DROPPED = (httpx.RemoteProtocolError, httpx.ReadError)
_DRAIN_SECONDS = 1.0  # after [DONE], how long to wait for the body's end (keeps the conn pooled)
_MAX_ERROR_TEXT = 500
_RETRY_STATUSES = frozenset({408, 429, 502, 503, 504, 529})
# A 500 that says the request itself was bad (llama-cpp-python answers its validation errors
# with 500): sending it again cannot help.
_INVALID_REQUEST = re.compile(
    r"validation error|field required|input should be|invalid|not supported|unsupported|"
    r"expected|must (?:be|contain|have)|missing|unknown|unrecognized|bad request",
    re.I,
)
# A 404 that names a model is about the client's model name (OpenAI's model_not_found,
# Ollama's 'model "x" not found', vLLM's 'The model `x` does not exist').
_ABOUT_A_MODEL = re.compile(r"\bmodel", re.I)
_OVERLOADED = re.compile(r"overloaded|try again|temporarily unavailable", re.I)
_DETECT_SECONDS = 5.0  # reading GET /models when the dialect is chosen by asking


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


class OpenAICompatBackend(BaseBackend):
    """POSTs to ``{base_url}/chat/completions`` and yields lists of chunks (see
    ``backends.base``)."""

    name = "openai"

    @classmethod
    def from_settings(cls, settings: Settings) -> OpenAICompatBackend:
        return cls(
            settings.upstream_url,
            settings.upstream_api_key,
            connect_timeout=settings.connect_timeout,
            read_timeout=settings.read_timeout,
            max_retries=settings.max_retries,
            dialect=settings.upstream_dialect,
        )

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
        dialect: str = "auto",
    ) -> None:
        self.url = _endpoint(base_url, "chat/completions")
        self._models_url = _endpoint(base_url, "models")
        self._secrets = (api_key,)
        # The dialect: named, recognised from the URL, or (None) asked of GET /models once.
        self.dialect: Dialect | None = (
            dialects.dialect_from_url(base_url) if dialect == "auto"
            else dialects.dialect_named(dialect)
        )
        self._learned: dict[str, Learned] = {}  # per model: what this upstream rejected
        self._detecting: asyncio.Lock | None = None
        self._models: tuple[Any] | None = None  # GET /models's body, once asked (windows)
        self._root = _server_root(base_url)
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
            if self.dialect is not None and self.dialect.key_header:
                self._headers[self.dialect.key_header] = api_key
        self._owns_client = client is None
        self._client = client
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ssl: ssl.SSLContext | None = None  # built once: each costs ~15 ms
        # The owned client's transport for self.url when no proxy applies, and what a POST to
        # it carries: the completion request is sent straight to it (``_post``).
        self._direct: Http11Transport | None = None
        self._post_url = httpx.URL(self.url)
        self._post_headers = httpx.Headers(self._headers)
        self._post_extensions = {"timeout": self._timeout.as_dict()}

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
                client = self._client = new_client(
                    Http11Transport(ssl_context=self._ssl,
                                    max_connections=self._max_connections),
                    timeout=self._timeout, verify=self._ssl, limits=limits,
                )  # the limits apply to proxied requests; direct ones share the transport's
                self._direct = direct_transport(client, self._post_url)
                self._post_headers = httpx.Headers(client.headers)  # user-agent, encodings
                self._post_headers.update(self._headers)
                self._loop = loop
                self._detecting = None  # a lock belongs to its loop as well
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
        client = self._http()
        dialect = self.dialect or await self._detect(client)
        response = await self._send(client, dialect, request.body)
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
                        if b'"error"' in data:  # once per read, not per chunk
                            batch = self._redact_errors(batch)
                        yield batch
                    if decoder.done:
                        await _drain(body)
                        return
            # The body ended without [DONE]: take a last unterminated event, then say so. The
            # caller judges it: after a finish_reason the response is whole all the same.
            batch = decoder.end()
            if batch:
                yield self._redact_errors(batch)
            if not decoder.done:
                raise _closed_error()
        finally:
            await response.aclose()

    async def _send(
        self, client: httpx.AsyncClient, dialect: Dialect, body: dict[str, Any]
    ) -> httpx.Response:
        """Send with retries; return a 2xx response whose body is still unread."""
        model = str(body.get("model"))
        sent, content = await self._encoded(dialect, body, model)
        adapted = False
        attempt = 0
        while True:
            try:
                response = await self._post(client, content)
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
                    502, f"Upstream error: could not reach the upstream at "
                    f"{shown_url(self.url.partition('?')[0])} ({type(exc).__name__}); is it "
                    "running, and is GATEWAY_UPSTREAM_URL right?",
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
                error, detail, message = await _http_error(response, self._secrets, self.url)
            finally:
                await response.aclose()
            invalid = status in (400, 422) or (status == 500 and _INVALID_REQUEST.search(message))
            if invalid and not adapted:
                change = dialects.adaptation_for(detail, message, sent)
                if change is not None:
                    self._learn(model, *change, message)
                    sent, content = await self._encoded(dialect, body, model)
                    adapted = True
                    continue
            if _retryable(status, message, invalid) and attempt < self.max_retries:
                delay = self._backoff(attempt)
                if error.retry_after is not None:
                    delay = min(max(error.retry_after, 0.0), self.retry_after_cap)
                await asyncio.sleep(delay)
                attempt += 1
                continue
            raise error

    async def _encoded(self, dialect: Dialect, body: dict[str, Any], model: str,
                       ) -> tuple[dict[str, Any], bytes]:
        """The body as ``dialect`` sends it to ``model``, and its JSON; in a worker thread
        when its messages are heavy (heavy.py: 175,000 of them took ~56 ms to prepare and
        ~20 ms to encode on the event loop)."""
        def encoded() -> tuple[dict[str, Any], bytes]:
            sent = dialect.prepare(body, self._learned.get(model))
            return sent, orjson.dumps(sent)

        return await asyncio.to_thread(encoded) if heavy_items(body.get("messages")) else encoded()

    async def _post(self, client: httpx.AsyncClient, content: bytes) -> httpx.Response:
        """POST ``content`` to the completions URL; the response's body is still unread."""
        direct = self._direct
        if direct is not None and client is self._client:
            request = httpx.Request("POST", self._post_url, content=content,
                                    headers=self._post_headers, extensions=self._post_extensions)
            response = await direct.handle_async_request(request)
            response.request = request
            return response
        request = client.build_request("POST", self.url, content=content, headers=self._headers)
        return await client.send(request, stream=True)

    def _learn(self, model: str, drops: set[str], renames: dict[str, str], why: str) -> None:
        learned = self._learned.setdefault(model, Learned())
        # new sets, not changed ones: a heavy body's prepare may be reading them in a thread
        learned.drops = learned.drops | drops
        learned.renames = {**learned.renames, **renames}
        logger.warning(
            "upstream rejected a parameter; retrying without it and from now on",
            extra={"upstream": self.url, "model": model, "dropped": sorted(drops),
                   "renamed": renames, "upstream_message": why},
        )

    async def _detect(self, client: httpx.AsyncClient) -> Dialect:
        """Ask ``GET /models`` once which server this is; :data:`GENERIC` when it cannot say."""
        if self._detecting is None:
            self._detecting = asyncio.Lock()
        async with self._detecting:
            if self.dialect is not None:
                return self.dialect
            found: Dialect | None = None
            body: Any = None
            try:
                async with asyncio.timeout(_DETECT_SECONDS):
                    response = await client.get(self._models_url, headers=self._headers)
                    body = orjson.loads(response.content) if response.status_code == 200 else None
                    found = dialects.dialect_from_models(body, response.headers)
            except (TimeoutError, httpx.HTTPError, orjson.JSONDecodeError):
                pass
            self._models = (body,)  # kept: context windows read the same answer
            self.dialect = found or dialects.GENERIC
            logger.info("upstream dialect", extra={"upstream": self.url,
                                                   "dialect": self.dialect.name})
            return self.dialect

    # -- what else the server says: its models, their windows, token counts (server_info.py)

    async def context_window(self, model: str) -> int | None:
        return server_info.window_from_models(await self.models_answer(), model)

    async def count_tokens(self, body: dict[str, Any]) -> int | None:
        dialect = self.dialect or await self._detect(self._http())
        return await server_info.count_tokens(dialect, body, self.server_json)

    async def list_models(self) -> list[dict[str, Any]]:
        """``GET /models``'s entries, asked afresh (a listing should not go stale)."""
        answer = await self._side_request(self._http(), "GET", self._models_url)
        data = answer.get("data") if isinstance(answer, dict) else None
        if not isinstance(data, list):
            raise UpstreamError(
                502, "Upstream error: the upstream did not list its models (GET /models).",
                code="upstream_error")
        return [e for e in data if isinstance(e, dict) and isinstance(e.get("id"), str)]

    async def models_answer(self) -> Any:
        """``GET /models``'s body (None if it failed), asked at most once per process: the
        dialect probe's own answer when it ran."""
        if self._models is None:
            client = self._http()
            if self.dialect is None:
                await self._detect(client)
            if self._models is None:
                self._models = (await self._side_request(client, "GET", self._models_url),)
        return self._models[0]

    async def server_json(self, path: str, body: dict[str, Any]) -> Any:
        """POST ``body`` to ``path`` at the server's root (llama.cpp's and vLLM's
        ``/tokenize`` live beside ``/v1``, not under it): the parsed 200 answer, else None."""
        return await self._side_request(self._http(), "POST", self._root + path, body)

    async def _side_request(
        self, client: httpx.AsyncClient, method: str, url: str, body: Any = None
    ) -> Any:
        try:
            async with asyncio.timeout(_DETECT_SECONDS):
                response = await client.request(
                    method, url, headers=self._headers,
                    content=None if body is None else orjson.dumps(body))
                return orjson.loads(response.content) if response.status_code == 200 else None
        except (TimeoutError, httpx.HTTPError, orjson.JSONDecodeError):
            return None

    def _redact_errors(self, batch: list[Chunk]) -> list[Chunk]:
        """Error frames in a batch with their messages redacted; other chunks as they are."""
        out: list[Chunk] = []
        for chunk in batch:
            if chunk.__class__ is bytes and b'"error"' in chunk:  # type: ignore[operator]
                chunk = parse_chunk(None, chunk) or chunk  # type: ignore[arg-type]
            error = chunk.get("error") if chunk.__class__ is dict else None  # type: ignore[union-attr]
            if isinstance(error, dict) and isinstance(error.get("message"), str):
                chunk = {**chunk, "error": {**error,  # type: ignore[dict-item]
                                            "message": redact(error["message"], self._secrets)}}
            elif isinstance(error, str):
                chunk = {**chunk, "error": redact(error, self._secrets)}  # type: ignore[dict-item]
            out.append(chunk)
        return out

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
                502, f"Upstream error (HTTP {response.status_code}): "
                f"{redact(message, self._secrets)}",
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


async def _http_error(
    response: httpx.Response, secrets: tuple[str | None, ...], url: str = ""
) -> tuple[UpstreamError, Any, str]:
    """An upstream 4xx/5xx as (the error to raise, the parsed body, its redacted message).

    The status, OpenAI's type and the upstream's code pass on, except the gateway's own
    failures, which are 502s: the upstream refusing the gateway's credentials (401/403), and
    a 404 that is not about a model (the chat path does not exist: GATEWAY_UPSTREAM_URL is
    wrong; a client's SDK must not raise NotFoundError for it).
    """
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
    message = redact(message, secrets)
    if status in (401, 403):
        error = UpstreamError(
            502,
            f"Upstream error (HTTP {status}): the upstream rejected the gateway's credentials "
            f"({message})",
            code="upstream_auth_failed",
        )
    elif status == 404 and code != "model_not_found" and not _ABOUT_A_MODEL.search(message):
        error = UpstreamError(
            502,
            f"Upstream error (HTTP 404): the upstream has no {shown_url(url.partition('?')[0])} "
            f"({message}); GATEWAY_UPSTREAM_URL must be the base URL of a Chat Completions API, "
            "usually ending in /v1",
            code="upstream_misconfigured",
        )
    else:
        error = UpstreamError(
            status,
            f"Upstream error (HTTP {status}): {message}",
            code=code,
            retry_after=parse_retry_after(response.headers),
        )
    return error, body, message


def _retryable(status: int, message: str, invalid: Any) -> bool:
    """Whether sending the same request again can succeed."""
    if status in _RETRY_STATUSES:
        return True
    if status == 500:
        return not invalid
    return bool(_OVERLOADED.search(message)) and status >= 500


def _server_root(base_url: str) -> str:
    """``http://host:8000/v1`` -> ``http://host:8000``: where a server's own routes live."""
    base = base_url.partition("?")[0].rstrip("/")
    return base[: -len("/v1")] if base.endswith("/v1") else base


def _endpoint(base_url: str, path: str) -> str:
    """``{base_url}/{path}``, keeping a query the base URL carries (Azure's api-version)."""
    base, sep, query = base_url.partition("?")
    return f"{base.rstrip('/')}/{path}{sep}{query}"


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
