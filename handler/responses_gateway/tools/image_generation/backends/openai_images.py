"""An OpenAI-compatible images server: ``POST {GATEWAY_IMAGE_URL}/images/generations`` (JSON)
and ``/images/edits`` (multipart), as OpenAI's Images API and self-hosted servers speak it.

Models other than OpenAI's GPT image models are asked for ``response_format: b64_json``
(servers answer a URL otherwise). The tool's parameters pass through as they are (the server
refuses what it cannot do, and its 400 becomes the failed call's error). With
``partial_images`` > 0 the request streams (``stream: true``) and each ``*.partial_image``
event becomes a ``response.image_generation_call.partial_image``; a server that answers JSON
instead simply gives none. The server's error messages are redacted before anyone sees them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import orjson

from responses_gateway.net.bodies import read_capped
from responses_gateway.tools.image_generation.backends.base import (
    Drawing,
    Drawn,
    ImageBackend,
    ImageFailure,
    Partial,
    image_usage,
)
from responses_gateway.tools.image_generation.backends.convert import format_of
from responses_gateway.tools.image_generation.params import MEDIA_TYPES

if TYPE_CHECKING:
    import httpx


DEFAULT_MODEL = "gpt-image-1"


class OpenAIImages(ImageBackend):
    name = "openai"
    partials = True

    @classmethod
    def from_settings(cls, settings: Any) -> OpenAIImages:
        return cls(settings.image_url or settings.upstream_url,
                   model=settings.image_model or DEFAULT_MODEL,
                   api_key=settings.image_api_key, timeout=settings.image_timeout,
                   connect_timeout=settings.connect_timeout,
                   max_bytes=settings.image_max_bytes)

    def __init__(self, url: str, *, model: str = DEFAULT_MODEL, api_key: str | None = None,
                 timeout: float = 120.0, connect_timeout: float = 10.0,
                 max_bytes: int = 20 * 1024 * 1024) -> None:
        self.url = url.rstrip("/")
        self.model = model
        self.api_key = api_key
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        #: what one answer (or one SSE line) may hold: one image of GATEWAY_IMAGE_MAX_BYTES
        #: in base64, and its JSON around it; more is never read into memory
        self.max_answer = max_bytes * 4 // 3 + 64 * 1024 if max_bytes else 0

    def _fields(self, drawing: Drawing, stream: bool) -> dict[str, Any]:
        params = drawing.params
        fields: dict[str, Any] = {"model": self.model, "prompt": drawing.prompt, "n": 1}
        for name in ("size", "quality", "background", "output_format", "output_compression",
                     "moderation"):
            value = getattr(params, name)
            if value is not None and not (name == "moderation" and drawing.image is not None):
                fields[name] = value
        if not self.model.startswith(("gpt-image", "chatgpt-image")):
            # DALL-E and most self-hosted servers answer a URL unless asked for base64; the
            # GPT image models always answer base64 and refuse the parameter.
            fields["response_format"] = "b64_json"
        if stream:
            fields["stream"] = True
            fields["partial_images"] = params.partial_images
        return fields

    async def draw(self, drawing: Drawing) -> AsyncIterator[Partial | Drawn]:
        import httpx

        stream = drawing.params.partial_images > 0
        fields = self._fields(drawing, stream)
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        timeout = httpx.Timeout(self.timeout, connect=self.connect_timeout)
        try:
            async with httpx.AsyncClient(timeout=timeout, trust_env=False) as client:
                request = self._request(client, drawing, fields, headers)
                response = await client.send(request, stream=True)
                try:
                    if response.status_code >= 400:
                        raise self._http_failure(response, await self._read(response))
                    if "text/event-stream" in response.headers.get("content-type", ""):
                        async for item in self._events(response, drawing):
                            yield item
                        return
                    yield self._drawn(_json(await self._read(response)), drawing)
                finally:
                    await response.aclose()
        except httpx.TimeoutException:
            raise ImageFailure("The image model did not answer in time.",
                               code="timeout") from None
        except httpx.HTTPError as exc:
            raise ImageFailure(f"Could not reach the image model ({type(exc).__name__}).",
                               code="image_generation_failed") from None

    async def _read(self, response: httpx.Response) -> bytes:
        """The answer's body, at most :attr:`max_answer` bytes (else the call fails)."""
        return await read_capped(response, self.max_answer,
                                 lambda: _too_large(self.max_answer))

    async def _lines(self, response: httpx.Response) -> AsyncIterator[str]:
        """The stream's lines, each at most :attr:`max_answer` bytes (httpx's own line reader
        would hold a line of any length)."""
        pending: list[bytes] = []  # the open line's pieces
        size = 0
        async for chunk in response.aiter_bytes():
            *ended, rest = chunk.split(b"\n")
            for piece in ended:
                yield _line([*pending, piece])
                pending, size = [], 0
            pending.append(rest)
            size += len(rest)
            if self.max_answer and size > self.max_answer:
                raise _too_large(self.max_answer)
        if size:
            yield _line(pending)

    def _request(self, client: httpx.AsyncClient, drawing: Drawing, fields: dict[str, Any],
                 headers: dict[str, str]) -> httpx.Request:
        if drawing.image is None:
            return client.build_request("POST", f"{self.url}/images/generations", json=fields,
                                        headers=headers)
        kind = format_of(drawing.image) or "png"  # the Images API's edits take jpeg, webp too
        files = [("image", (f"image.{kind}", drawing.image, MEDIA_TYPES[kind]))]
        if drawing.mask is not None:
            files.append(("mask", ("mask.png", drawing.mask, MEDIA_TYPES["png"])))
        data = {k: (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in fields.items()}
        return client.build_request("POST", f"{self.url}/images/edits", data=data, files=files,
                                    headers=headers)

    async def _events(self, response: httpx.Response, drawing: Drawing
                      ) -> AsyncIterator[Partial | Drawn]:
        """``image_generation.partial_image`` / ``image_edit.partial_image`` events, then the
        ``*.completed`` one (SSE ``data:`` lines, one JSON object each)."""
        async for line in self._lines(response):
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if not data or data == "[DONE]":
                continue
            try:
                event = orjson.loads(data)
            except orjson.JSONDecodeError:
                continue
            kind = str(event.get("type") or "")
            if kind.endswith(".partial_image") and isinstance(event.get("b64_json"), str):
                yield Partial(event["b64_json"], int(event.get("partial_image_index") or 0))
            elif kind.endswith(".completed"):
                yield self._drawn({"data": [event], **event}, drawing)
                return
            elif kind == "error" or "error" in event:
                raise self._failure_of(event.get("error") or event, 502)
        raise ImageFailure("The image model's stream ended before the image was complete.",
                           code="image_generation_failed")

    def _drawn(self, answer: dict[str, Any], drawing: Drawing) -> Drawn:
        data = answer.get("data")
        first = data[0] if isinstance(data, list) and data and isinstance(data[0], dict) else {}
        b64 = first.get("b64_json")
        if not isinstance(b64, str) or not b64:
            raise ImageFailure("The image model answered without base64 image data "
                               "('b64_json').", code="image_generation_failed")
        params = drawing.params

        def used(name: str, default: str) -> str:
            value = answer.get(name) or first.get(name)
            return str(value) if value else default

        return Drawn(b64, size=used("size", params.size), quality=used("quality", params.quality),
                     output_format=used("output_format", params.output_format),
                     background=used("background", params.background),
                     revised_prompt=first.get("revised_prompt") or drawing.prompt,
                     usage=image_usage(answer.get("usage")))

    def _http_failure(self, response: httpx.Response, content: bytes) -> ImageFailure:
        try:
            body = orjson.loads(content)
        except orjson.JSONDecodeError:
            body = {}
        error = body.get("error") if isinstance(body, dict) else None
        if not isinstance(error, dict):
            error = {"message": f"The image model answered HTTP {response.status_code}."}
        return self._failure_of(error, response.status_code)

    def _failure_of(self, error: Any, status: int) -> ImageFailure:
        error = error if isinstance(error, dict) else {"message": str(error)}
        message = str(error.get("message") or f"The image model failed (HTTP {status}).")
        code = error.get("code")
        if code == "moderation_blocked" or "safety" in message.lower():
            return ImageFailure(message, code="moderation_blocked",
                                type="image_generation_user_error", secrets=(self.api_key,))
        if status == 429:
            code = "rate_limit_exceeded"
        if status == 400 and error.get("type") == "invalid_request_error":
            # the server refused what the client asked (a size its model does not make): the
            # client's 400 naming the field, as OpenAI's own answer, not the gateway's 502
            param = error.get("param")
            return ImageFailure(message, code=str(code or "invalid_value"),
                                type="invalid_request_error", secrets=(self.api_key,),
                                param=param if isinstance(param, str) else None)
        return ImageFailure(message, code=str(code or "image_generation_failed"),
                            secrets=(self.api_key,))


def _line(pieces: list[bytes]) -> str:
    return b"".join(pieces).rstrip(b"\r").decode("utf-8", "replace")


def _too_large(limit: int) -> ImageFailure:
    return ImageFailure(f"The image model's answer is larger than the {limit} bytes one image "
                        "may take (GATEWAY_IMAGE_MAX_BYTES).", code="image_too_large")


def _json(content: bytes) -> dict[str, Any]:
    try:
        answer = orjson.loads(content)
    except orjson.JSONDecodeError:
        raise ImageFailure("The image model's answer is not JSON.",
                           code="image_generation_failed") from None
    return answer if isinstance(answer, dict) else {}
