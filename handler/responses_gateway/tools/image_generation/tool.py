"""``image_generation`` as a server tool (tools/server.py).

The chat model is offered one function, ``image_generation``, with a ``prompt`` it writes
(and ``edit``: change the latest image rather than draw a new one). When it calls it, the
configured image backend draws, and the response gets an ``image_generation_call`` item with
``result`` (base64), ``status``, ``revised_prompt`` and the parameters used, through the
events OpenAI sends: ``response.image_generation_call.in_progress``, ``.generating``,
``.partial_image`` (only with ``partial_images`` > 0 and a backend that has intermediate
images) and ``.completed``. A failure of the image model (content filter, throttling, timeout)
is a ``failed`` item with the reason in ``error``, never a failed response.

Edits across turns: the latest image in the conversation (an ``image_generation_call`` with
a result in the previous response, the conversation or this input; or a data-URL
``input_image`` the user sent) is what an edit changes, as OpenAI does.

How an image reads to the model later: its call (the prompt it drew) with a text note ("the
image was shown to the user") as the tool result, and, for a model that reads images
(responses/fitting/vision.py), the image itself as an image part after it (a chat tool result
carries text only); the same in the next turn of this response and in later ones.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from responses_gateway import ids
from responses_gateway.errors import GatewayError, invalid_request
from responses_gateway.tools.catalog import ToolCatalog, ToolSpec
from responses_gateway.tools.image_generation import CALL_ID_PREFIX, ITEM
from responses_gateway.tools.image_generation.backends import image_backend
from responses_gateway.tools.image_generation.backends.base import (
    Drawing,
    Drawn,
    ImageBackend,
    ImageFailure,
    Partial,
)
from responses_gateway.tools.image_generation.backends.convert import check_image
from responses_gateway.tools.image_generation.params import MEDIA_TYPES, ImageParams, image_bytes
from responses_gateway.tools.server import (
    Event,
    HistoryCall,
    ItemWriter,
    Rebuild,
    RequestTools,
    Seal,
    ServerCall,
    ServerTool,
)

KIND = "image_generation"
FUNCTION = "image_generation"
_EVENT = "response.image_generation_call"


@dataclass
class ImageGenerationTool(ServerTool):
    """One response's image tool: the client's parameters, the image an edit starts from."""

    kind = KIND

    params: ImageParams
    backend: ImageBackend
    #: the latest image in the conversation (base64), what ``edit`` changes
    source: str | None = None
    #: GATEWAY_IMAGE_MAX_BYTES: the largest image a call may return
    max_bytes: int = 20 * 1024 * 1024

    # -- building (before response.created) ---------------------------------------------------

    @classmethod
    async def for_request(cls, request: RequestTools) -> ImageGenerationTool:
        if len(request.tools) > 1:
            raise invalid_request("Only one 'image_generation' tool may be given.",
                                  param="tools", code="invalid_value")
        index = request.indexes[0] if request.indexes else 0
        params = ImageParams.of(request.tools[0], f"tools[{index}]")
        if request.settings.image_backend is None:  # (hosted.py keeps the tool out then)
            raise invalid_request("No image backend is configured (GATEWAY_IMAGE_BACKEND).",
                                  param=f"tools[{index}].type", code="invalid_value")
        backend = image_backend(request.settings)
        source = latest_image([*request.history, *request.items])
        if params.action == "edit" and source is None:
            raise invalid_request(
                "The image_generation tool's action is 'edit', but there is no image in the "
                "input or the conversation to edit.", param=params.named("action"),
                code="invalid_value")
        backend.check(params, editing=source is not None and params.action != "generate")
        return cls(params, backend, source, request.settings.image_max_bytes)

    def functions(self) -> list[tuple[str | None, dict[str, Any]]]:
        properties: dict[str, Any] = {"prompt": {
            "type": "string",
            "description": "A full description of the image to draw, or of the change to "
                           "make when editing."}}
        required = ["prompt"]
        if self.source is not None and self.params.action == "auto" and self.backend.edits:
            properties["edit"] = {
                "type": "boolean",
                "description": "true to change the latest image in the conversation, false "
                               "to draw a new one."}
            required.append("edit")
        what = ("Edit the latest image in the conversation" if self.params.action == "edit"
                else "Generate an image")
        return [(None, {
            "name": FUNCTION,
            "description": f"{what} from a text prompt. The image is shown to the user.",
            "parameters": {"type": "object", "properties": properties, "required": required,
                           "additionalProperties": False},
        })]

    def tool_choice(self, choice: Any, catalog: ToolCatalog) -> dict[str, Any] | None:
        """``{"type": "image_generation"}``: the model must draw."""
        kind = choice.get("type") if isinstance(choice, Mapping) else getattr(choice, "type", None)
        if kind != KIND:
            return None
        return {"type": "function", "function": {"name": catalog.chat_name(KIND, FUNCTION, None)}}

    def to_record(self, seal: Seal) -> dict[str, Any]:
        return {"params": self.params.to_record(), "source": self.source}

    @classmethod
    def from_record(cls, data: Mapping[str, Any], rebuild: Rebuild) -> ImageGenerationTool:
        return cls(ImageParams.from_record(data.get("params") or {}),
                   image_backend(rebuild.settings), data.get("source"),
                   rebuild.settings.image_max_bytes)

    # -- running -------------------------------------------------------------------------------

    async def run(self, call: ServerCall, items: ItemWriter) -> AsyncIterator[list[Event]]:
        prompt, edit = _arguments(call.arguments)
        params = self.params
        editing = self.source is not None and self.backend.edits and (
            params.action == "edit" or (params.action == "auto" and edit))
        item: dict[str, Any] = {"id": ids.new_id(CALL_ID_PREFIX), "type": ITEM,
                                "status": "in_progress", "result": None}
        events = items.start_tool_item(item, f"{_EVENT}.in_progress")
        events.append(items.tool_item_event(f"{_EVENT}.generating"))
        yield events
        if prompt is None:
            yield _failed(items, ImageFailure(
                "The model called image_generation without a 'prompt'.",
                code="invalid_prompt", type="invalid_request_error"))
            return
        try:
            drawing = Drawing(prompt, params,
                              await asyncio.to_thread(_decoded, self.source) if editing else None,
                              image_bytes(params.mask, params.named("input_image_mask"))
                              if editing and params.mask else None)
        except GatewayError as exc:  # the image to edit is not base64 (a client's item)
            yield _failed(items, ImageFailure(exc.message, code="invalid_image",
                                              type="invalid_request_error"))
            return
        try:
            async for step in self.backend.draw(drawing):
                if isinstance(step, Partial):
                    if step.index < params.partial_images and await self._fits(
                            step.b64, params.output_format):
                        yield [items.tool_item_event(
                            f"{_EVENT}.partial_image", partial_image_b64=step.b64,
                            partial_image_index=step.index, background=params.background,
                            output_format=params.output_format, quality=params.quality,
                            size=params.size)]
                    continue
                if step.usage:
                    call.usage = {"image_gen": step.usage}
                await asyncio.to_thread(check_image, step.b64, step.output_format,
                                        self.max_bytes)
                yield _completed(items, step, drawing.action)
                self.source = step.b64  # a later call in this response edits this one
                return
        except ImageFailure as failure:
            yield _failed(items, failure)
            return
        yield _failed(items, ImageFailure("The image model returned no image.",
                                          code="image_generation_failed"))

    async def _fits(self, b64: str, output_format: str) -> bool:
        """Whether an intermediate image is one (:func:`check_image`); one that is not is
        left out, the final image decides the call."""
        try:
            await asyncio.to_thread(check_image, b64, output_format, self.max_bytes)
        except ImageFailure:
            return False
        return True

    async def aclose(self) -> None:
        """The backend is shared by every response of the process (backends/__init__.py)."""

    # -- history -------------------------------------------------------------------------------

    @classmethod
    def history_reader(cls, items: Sequence[Mapping[str, Any]],
                       reads: Mapping[str, str]) -> ImageHistory:
        return ImageHistory()


def _arguments(arguments: str) -> tuple[str | None, bool]:
    try:
        parsed = orjson.loads(arguments or "{}")
    except orjson.JSONDecodeError:
        return None, False
    if not isinstance(parsed, dict):
        return None, False
    prompt = parsed.get("prompt")
    return (prompt if isinstance(prompt, str) and prompt.strip() else None,
            parsed.get("edit") is True)


def _decoded(b64: str | None) -> bytes | None:
    if b64 is None:
        return None
    return image_bytes(b64, "input")


def _completed(items: ItemWriter, drawn: Drawn, action: str) -> list[Event]:
    item = items.tool_item
    assert item is not None and item.get("type") == ITEM, "no image_generation_call is open"
    item.update({"action": action, "background": drawn.background,
                 "output_format": drawn.output_format, "quality": drawn.quality,
                 "result": drawn.b64, "revised_prompt": drawn.revised_prompt,
                 "size": drawn.size})
    return items.end_tool_item("completed", f"{_EVENT}.completed")


def _failed(items: ItemWriter, failure: ImageFailure) -> list[Event]:
    item = items.tool_item
    assert item is not None and item.get("type") == ITEM, "no image_generation_call is open"
    item["error"] = failure.to_error()
    return items.end_tool_item("failed", None)


def latest_image(items: Sequence[Mapping[str, Any]]) -> str | None:
    """The base64 of the newest image in ``items``: a generated one, or one the user sent as
    a data URL."""
    for item in reversed(items):
        if item.get("type") == ITEM and isinstance(item.get("result"), str) and item["result"]:
            return str(item["result"])
        if item.get("type", "message") == "message" and item.get("role") == "user":
            content = item.get("content")
            for part in reversed(content if isinstance(content, list) else ()):
                url = part.get("image_url") if isinstance(part, Mapping) else None
                if (part.get("type") == "input_image" and isinstance(url, str)
                        and url.startswith("data:image/")):
                    return url.partition(",")[2]
    return None


class ImageHistory:
    """``image_generation_call`` items as the model reads them: its call, a note of what was
    drawn (or why not), and the image as a data URL for a model that reads images."""

    def read(self, item: Mapping[str, Any], param: str) -> HistoryCall | None:
        call_id = item.get("id")
        if not isinstance(call_id, str):
            raise invalid_request("An 'image_generation_call' item needs an 'id'.", param=param)
        prompt = item.get("revised_prompt")
        arguments = orjson.dumps({"prompt": prompt if isinstance(prompt, str) else ""}).decode()
        image = None
        result = item.get("result")
        if item.get("status") == "failed" or not isinstance(result, str) or not result:
            error = item.get("error")
            reason = error.get("message") if isinstance(error, Mapping) else None
            output = f"No image was made{': ' + str(reason) if reason else '.'}"
        else:
            size = item.get("size")
            output = (f"An image{' of ' + str(size) if size else ''} was generated and shown "
                      f"to the user (image_generation_call {call_id}).")
            media = MEDIA_TYPES.get(str(item.get("output_format")), "image/png")
            image = f"data:{media};base64,{result}"
        return HistoryCall(call_id, ToolSpec(KIND, FUNCTION, None), arguments, output, image)

