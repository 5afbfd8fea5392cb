"""The Bedrock backend: chat request in, chat chunks out, through boto3 Converse[Stream].

boto3 is blocking, so each stream runs in its own thread (a long stream must not occupy the
default executor) that iterates the botocore ``EventStream`` and hands events to the async
generator through a queue. Closing the generator shuts the socket down, which wakes the
blocked read at once, so Bedrock stops generating and the connection is released. The
Converse request is built in a worker thread too (:func:`_built`): it walks every message
and decodes every inline image and file.

Errors: a ``ClientError`` before the first event, or an exception frame / dropped connection
before any chunk was yielded, raises :class:`UpstreamError` (an HTTP error). After output
started, an exception frame is yielded as ``{"error": …}`` and a dropped connection raises;
either way the pipeline ends the response ``failed``. The role chunk of ``messageStart`` is
held until the next event arrived, so an exception frame right after it is still an HTTP error.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

from responses_gateway.backends.base import BackendRequest, BaseBackend
from responses_gateway.backends.bedrock import failures, models
from responses_gateway.backends.bedrock.images import DEFAULT_TOTAL_BYTES, Fetched, MediaFetcher
from responses_gateway.backends.bedrock.request import (
    ConverseCall,
    build_converse_request,
    remote_media,
)
from responses_gateway.backends.bedrock.response import completion_from_converse
from responses_gateway.backends.bedrock.stream import (
    CLAUDE_REASONING_FORMAT,
    OTHER_REASONING_FORMAT,
    StreamTranslator,
)
from responses_gateway.errors import UpstreamError

if TYPE_CHECKING:
    from responses_gateway.settings import Settings

_END = object()


class _Failure:
    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


async def _built(body: Mapping[str, Any], *, media: Mapping[str, Fetched],
                 stream: bool) -> ConverseCall:
    """:func:`build_converse_request` in a worker thread: it walks every message and decodes
    every inline image and file (175,000 messages: ~475 ms; four 3.7 MB images: ~47 ms),
    work the event loop must not wait for. A Bedrock call runs in threads anyway (the
    Converse call, the stream's pump), so one hop more costs nothing that shows."""
    return await asyncio.to_thread(partial(build_converse_request, body, media=media,
                                           stream=stream))


def _to_upstream(exc: BaseException) -> tuple[UpstreamError, bool]:
    """(error, whether it was a modeled in-stream exception frame)."""
    from botocore.exceptions import BotoCoreError, ClientError, EventStreamError

    if isinstance(exc, UpstreamError):
        return exc, False
    if isinstance(exc, EventStreamError):
        return failures.from_stream_exception(exc), True
    if isinstance(exc, ClientError):
        return failures.from_client_error(exc), False
    name = type(exc).__name__
    if name in ("ProtocolError", "ResponseStreamingError", "IncompleteRead"):
        return UpstreamError(502, f"The connection to Bedrock dropped mid-stream ({name}).",
                             code="server_error"), False
    if isinstance(exc, BotoCoreError | OSError) or name.endswith("Error"):
        return failures.from_botocore_error(exc), False
    return UpstreamError(502, f"Bedrock call failed ({name}).", code="server_error"), False


class _EventPump:
    """Calls ``converse_stream`` and iterates its events in a dedicated thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop, call: Callable[[], dict[str, Any]]):
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        self.request_id = ""
        self._loop = loop
        self._call = call
        self._closed = threading.Event()
        self._stream: Any = None
        self.thread = threading.Thread(target=self._run, name="bedrock-stream", daemon=True)

    def _put(self, item: Any) -> None:
        if self._closed.is_set():
            return
        with contextlib.suppress(RuntimeError):  # the loop is gone: nobody is listening
            self._loop.call_soon_threadsafe(self.queue.put_nowait, item)

    def _run(self) -> None:
        try:
            response = self._call()
            self.request_id = (response.get("ResponseMetadata") or {}).get("RequestId") or ""
            self._stream = response["stream"]
            if self._closed.is_set():
                return
            for event in self._stream:
                if self._closed.is_set():
                    return
                self._put(event)
            self._put(_END)
        except BaseException as exc:  # handed to the consumer, which decides
            self._put(_Failure(exc))
        finally:
            if self._stream is not None:
                with contextlib.suppress(Exception):
                    self._stream.close()

    def close(self) -> None:
        """Stop now: later events are dropped and a blocked socket read is woken up."""
        self._closed.set()
        stream = self._stream
        raw = getattr(stream, "_raw_stream", None)
        if raw is None:
            return
        with contextlib.suppress(Exception):
            raw.shutdown()  # urllib3 >= 2.3: shuts the socket for reading
            return
        with contextlib.suppress(Exception):
            raw._connection.sock.shutdown(socket.SHUT_RDWR)


class BedrockBackend(BaseBackend):
    """Backend over Amazon Bedrock Converse / ConverseStream."""

    name = "bedrock"

    @classmethod
    def from_settings(cls, settings: Settings) -> BedrockBackend:
        return cls(
            region=settings.bedrock_region,
            endpoint_url=settings.bedrock_endpoint_url,
            read_timeout=settings.read_timeout,
            connect_timeout=settings.connect_timeout,
            max_attempts=settings.max_retries + 1,  # botocore counts the first attempt
            media_budget_bytes=settings.bedrock_media_budget_bytes,
        )

    def __init__(
        self,
        region: str | None = None,
        client: Any = None,
        endpoint_url: str | None = None,
        image_fetcher: MediaFetcher | None = None,
        *,
        read_timeout: float = 300.0,
        connect_timeout: float = 10.0,
        max_attempts: int = 2,
        media_budget_bytes: int = DEFAULT_TOTAL_BYTES,
    ) -> None:
        self.region = region
        self.endpoint_url = endpoint_url
        self._control: Any = None  # the control plane's client (model listing)
        self.read_timeout = read_timeout
        self.connect_timeout = connect_timeout
        self.max_attempts = max_attempts
        self._client = client
        self._owns_client = client is None
        self._client_lock = threading.Lock()
        self.fetcher = image_fetcher or MediaFetcher.from_env(max_total_bytes=media_budget_bytes)

    def client(self) -> Any:
        """The boto3 client, created on first use (in a worker thread: creation is slow)."""
        with self._client_lock:
            if self._client is None:
                self._client = self._boto3_client("bedrock-runtime", self.endpoint_url)
            return self._client

    def control_client(self) -> Any:
        """The ``bedrock`` control-plane client (model listing), created on first use. Its
        endpoint is the Region's (or ``AWS_ENDPOINT_URL_BEDROCK``), not the runtime's."""
        with self._client_lock:
            if self._control is None:
                self._control = self._boto3_client("bedrock", None)
            return self._control

    def _boto3_client(self, service: str, endpoint_url: str | None) -> Any:
        from responses_gateway.aws_clients import make_client

        return make_client(service, region=self.region, endpoint_url=endpoint_url,
                           read_timeout=self.read_timeout, connect_timeout=self.connect_timeout,
                           max_attempts=self.max_attempts, pool=64)

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None and self._owns_client:
            with contextlib.suppress(Exception):
                client.close()
        control, self._control = self._control, None
        if control is not None:
            with contextlib.suppress(Exception):
                control.close()

    # -- what else the backend offers (backends/base.py) ---------------------------------------

    def reasoning_input(self, configured: str | None) -> str | None:
        """Converse always takes reasoning back (as ``reasoningContent``, from the chat
        ``reasoning_content`` the translator writes), whatever the setting says."""
        return "reasoning_content"

    async def context_window(self, model: str) -> int | None:
        return models.context_window(model)

    def takes_images(self, model: str) -> bool | None:
        return models.takes_images(model)

    async def count_tokens(self, body: dict[str, Any]) -> int | None:
        """``CountTokens`` on the Converse request :meth:`stream` would send."""
        if remote_media(body):
            return None  # images by URL would have to be downloaded just to be counted
        call = await _built({**body, "stream": False}, media={}, stream=False)
        kwargs = call.kwargs
        converse = {k: kwargs[k] for k in ("messages", "system", "toolConfig",
                                           "additionalModelRequestFields") if kwargs.get(k)}
        answer = await asyncio.to_thread(lambda: self.client().count_tokens(
            modelId=kwargs["modelId"], input={"converse": converse}))
        tokens = answer.get("inputTokens")
        return tokens if isinstance(tokens, int) else None

    async def list_models(self) -> list[dict[str, Any]]:
        """Foundation models with text output invoked on demand, then the active inference
        profiles (ListFoundationModels, ListInferenceProfiles)."""
        try:
            return await asyncio.to_thread(self._list_models)
        except Exception as exc:
            raise _to_upstream(exc)[0] from exc

    def _list_models(self) -> list[dict[str, Any]]:
        client = self.control_client()
        listed: list[dict[str, Any]] = []
        answer = client.list_foundation_models(byOutputModality="TEXT")
        for summary in answer.get("modelSummaries") or ():
            if "ON_DEMAND" in (summary.get("inferenceTypesSupported") or ()):
                owner = str(summary.get("providerName") or "bedrock").lower()
                listed.append(_model_object(summary["modelId"], 0, owner))
        token: str | None = None
        while True:
            page = client.list_inference_profiles(**({"nextToken": token} if token else {}))
            for profile in page.get("inferenceProfileSummaries") or ():
                if profile.get("status", "ACTIVE") != "ACTIVE":
                    continue
                created = profile.get("createdAt")
                model_id = profile["inferenceProfileId"]
                owner = models.model_info(model_id).base.partition(".")[0] or "bedrock"
                listed.append(_model_object(
                    model_id, int(created.timestamp()) if created else 0, owner))
            token = page.get("nextToken")
            if not token:
                return listed

    async def _fetch_media(self, body: Mapping[str, Any]) -> dict[str, Fetched]:
        wanted = remote_media(body)  # refuses too many parts before any download
        return await self.fetcher.fetch_all(wanted) if wanted else {}

    async def prepare(self, request: BackendRequest) -> None:
        """Fetch the remote images and files now: a URL refused or unfetchable is the client's
        mistake, an HTTP 400 before ``response.created`` leaves, as OpenAI answers it."""
        request.extra["media"] = await self._fetch_media(request.body)

    async def stream(self, request: BackendRequest) -> AsyncIterator[list[dict[str, Any]]]:
        body = request.body
        streaming = bool(body.get("stream", request.stream))
        media = request.extra.get("media")
        if media is None:  # a background job: nothing was prepared
            media = await self._fetch_media(body)
        call = await _built(body, media=media, stream=streaming)
        model = str(body.get("model") or call.model.model_id)
        fmt = CLAUDE_REASONING_FORMAT if call.model.is_claude else OTHER_REASONING_FORMAT
        if not streaming:
            try:
                response = await asyncio.to_thread(lambda: self.client().converse(**call.kwargs))
            except Exception as exc:
                raise _to_upstream(exc)[0] from exc
            yield [completion_from_converse(response, model=model, tool_names=call.tool_names,
                                            reasoning_format=fmt)]
            return

        pump = _EventPump(asyncio.get_running_loop(),
                          lambda: self.client().converse_stream(**call.kwargs))
        pump.thread.start()
        queue = pump.queue
        try:
            translator: StreamTranslator | None = None
            held: dict[str, Any] | None = None  # the role chunk, until the next event
            yielded = False
            ended = False
            while not ended:
                items = [await queue.get()]  # and whatever else has arrived: one batch
                while not queue.empty():
                    items.append(queue.get_nowait())
                out: list[dict[str, Any]] = []
                for item in items:
                    if item is _END:
                        ended = True
                        break
                    if isinstance(item, _Failure):
                        error, in_band = _to_upstream(item.exc)
                        if translator is not None and translator.finished:
                            ended = True  # only usage was still to come; the answer is whole
                            break
                        if (yielded or out) and in_band:
                            out.append(failures.error_chunk(error))
                            yield out
                            return
                        if out:
                            yield out
                        raise error from item.exc
                    if translator is None:
                        translator = StreamTranslator(
                            chunk_id=f"chatcmpl-{pump.request_id}", model=model,
                            created=int(time.time()), tool_names=call.tool_names,
                            reasoning_format=fmt)
                    chunk = translator.feed(item)
                    if chunk is None:
                        continue
                    if not (yielded or out) and held is None and "messageStart" in item:
                        held = chunk
                        continue
                    if held is not None:
                        out.append(held)
                        held = None
                    out.append(chunk)
                    if translator.failed:
                        yield out
                        return
                if out:
                    yielded = True
                    yield out
            if translator is None or not translator.finished:
                raise UpstreamError(502, "The Bedrock stream ended before messageStop.",
                                    code="server_error")
        finally:
            pump.close()


def _model_object(model_id: str, created: int, owned_by: str) -> dict[str, Any]:
    return {"id": model_id, "object": "model", "created": created, "owned_by": owned_by}
