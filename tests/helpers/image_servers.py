"""Image models for tests, on 127.0.0.1, making real PNGs (built with zlib, no image library).

- :class:`FakeBedrockImages`: Bedrock runtime's ``InvokeModel`` (``POST /model/<id>/invoke``)
  for Amazon Nova Canvas and Titan Image Generator v2, validating the request body as
  strictly as Bedrock does (unknown keys, task types, sizes per model, prompt lengths, seeds,
  base64 images, exactly one of maskImage / maskPrompt) and answering ``{"images": [...]}``;
  a prompt containing ``forbidden`` is blocked by the "content filter", and ``error(...)``
  scripts a failure for the next calls. boto3 reaches it through ``endpoint_url``.
- :class:`FakeImagesServer`: an OpenAI-compatible ``/v1/images/generations`` (JSON, or SSE
  with ``partial_images``) and ``/v1/images/edits`` (multipart), with OpenAI's field checks.

Each image's colour says what made it: :func:`colour_of` reads it back, so a test can see that
an edit of a lighthouse "at night" went through the model with the right source image.
"""

from __future__ import annotations

import base64
import binascii
import email.parser
import email.policy
import hashlib
import json
import struct
import threading
import time
import zlib
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
NOVA = "amazon.nova-canvas-v1:0"
TITAN = "amazon.titan-image-generator-v2:0"
STABILITY_SD35 = "stability.sd3-5-large-v1:0"
STABILITY = (STABILITY_SD35, "stability.stable-image-core-v1:1",
             "stability.stable-image-ultra-v1:1")
TITAN_SIZES = {
    (1024, 1024), (768, 768), (512, 512), (768, 1152), (384, 576), (1152, 768), (576, 384),
    (768, 1280), (384, 640), (1280, 768), (640, 384), (896, 1152), (448, 576), (1152, 896),
    (576, 448), (768, 1408), (384, 704), (1408, 768), (704, 384), (640, 1408), (320, 704),
    (1408, 640), (704, 320), (1152, 640), (1173, 640),
}


# -- PNG ---------------------------------------------------------------------------------------


def _chunk(kind: bytes, data: bytes) -> bytes:
    return (struct.pack("!I", len(data)) + kind + data
            + struct.pack("!I", zlib.crc32(kind + data) & 0xFFFFFFFF))


def png(width: int, height: int, rgb: tuple[int, int, int], noise_rows: int = 0,
        seed: str = "") -> bytes:
    """A valid RGB PNG of one colour; the first ``noise_rows`` rows are noise (so the file is
    large, as real images are: they do not compress)."""
    row = b"\x00" + bytes(rgb) * width
    rows = []
    stream = hashlib.shake_256(seed.encode()).digest(noise_rows * width * 3) if noise_rows else b""
    for y in range(height):
        if y < noise_rows:
            rows.append(b"\x00" + stream[y * width * 3:(y + 1) * width * 3])
        else:
            rows.append(row)
    return (PNG_SIGNATURE + _chunk(b"IHDR", struct.pack("!IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + _chunk(b"IDAT", zlib.compress(b"".join(rows), 9)) + _chunk(b"IEND", b""))


def rgba_png(width: int, height: int, transparent_rows: int) -> bytes:
    """An RGBA PNG (filter 1, "sub", as encoders write) whose first rows are fully transparent:
    an OpenAI inpainting mask for the top of the image."""
    rows = []
    for y in range(height):
        alpha = 0 if y < transparent_rows else 255
        pixels = bytes([0, 0, 0, alpha]) * width
        filtered = bytes((pixels[i] - (pixels[i - 4] if i >= 4 else 0)) & 0xFF
                         for i in range(len(pixels)))
        rows.append(b"\x01" + filtered)
    return (PNG_SIGNATURE + _chunk(b"IHDR", struct.pack("!IIBBBBB", width, height, 8, 6, 0, 0, 0))
            + _chunk(b"IDAT", zlib.compress(b"".join(rows))) + _chunk(b"IEND", b""))


def grey_rows(data: bytes) -> list[bytes]:
    """The rows of an 8-bit greyscale PNG written with filter 0 (the gateway's masks)."""
    width, height = struct.unpack("!II", data[16:24])
    assert data[25] == 0, "not greyscale"
    (length,) = struct.unpack("!I", data[33:37])
    raw = zlib.decompress(data[41:41 + length])
    return [raw[y * (width + 1) + 1:(y + 1) * (width + 1)] for y in range(height)]


def png_info(data: bytes) -> tuple[int, int, tuple[int, int, int]]:
    """(width, height, colour of the last row's first pixel) of a PNG made by :func:`png`."""
    assert data.startswith(PNG_SIGNATURE), "not a PNG"
    width, height = struct.unpack("!II", data[16:24])
    pos, idat = 8, b""
    while pos < len(data):
        (length,) = struct.unpack("!I", data[pos:pos + 4])
        kind = data[pos + 4:pos + 8]
        if kind == b"IDAT":
            idat += data[pos + 8:pos + 8 + length]
        pos += 12 + length
    raw = zlib.decompress(idat)
    last = raw[-(width * 3 + 1):]
    return width, height, (last[1], last[2], last[3])


def colour_for(prompt: str, source: tuple[int, int, int] | None = None) -> tuple[int, int, int]:
    """What the fakes draw: night is dark blue, blue is blue, else a warm day colour; an edit
    keeps the source's red channel (so a test sees what was edited)."""
    text = prompt.lower()
    colour = (10, 10, 60) if "night" in text else (0, 0, 255) if "blue" in text else (250, 200, 40)
    if source is not None:
        colour = (source[0] // 2, colour[1], colour[2])
    return colour


def colour_of(b64: str) -> tuple[int, int, int]:
    return png_info(base64.b64decode(b64))[2]


def _decode_image(value: Any) -> bytes | None:
    if not isinstance(value, str):
        return None
    try:
        data = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None
    return data if data.startswith(PNG_SIGNATURE) or data.startswith(b"\xff\xd8") else None


# -- Bedrock InvokeModel ------------------------------------------------------------------------


class Invalid(Exception):
    pass


@dataclass
class Invocation:
    model_id: str
    body: dict[str, Any]
    headers: dict[str, str]


@dataclass
class FakeBedrockImages:
    noise_rows: int = 40
    invocations: list[Invocation] = field(default_factory=list)
    errors: list[tuple[int, str, str]] = field(default_factory=list)  # next calls fail
    _server: ThreadingHTTPServer | None = None

    def error(self, status: int, error_type: str, message: str, times: int = 1) -> None:
        self.errors.extend([(status, error_type, message)] * times)

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> FakeBedrockImages:
        fake = self

        class Handler(_BedrockHandler):
            owner = fake

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()

    # -- Bedrock's checks and the answer -------------------------------------------------------

    def answer(self, model_id: str, body: Any) -> dict[str, Any]:
        if model_id in STABILITY:
            return self.stability(model_id, body)
        if model_id not in (NOVA, TITAN):
            raise LookupError(f"Model {model_id} not found")
        titan = model_id == TITAN
        if not isinstance(body, dict):
            raise Invalid("Malformed input request: expected type: JSONObject")
        _keys(body, {"taskType", "textToImageParams", "imageVariationParams",
                     "inpaintingParams", "imageGenerationConfig"}, "")
        task = body.get("taskType")
        params_key = {"TEXT_IMAGE": "textToImageParams", "IMAGE_VARIATION": "imageVariationParams",
                      "INPAINTING": "inpaintingParams"}.get(task)  # type: ignore[arg-type]
        if params_key is None:
            raise Invalid(f"Malformed input request: #/taskType: {task} is not a valid enum "
                          "value")
        params = body.get(params_key)
        if not isinstance(params, dict):
            raise Invalid(f"Malformed input request: #: required key [{params_key}] not found")
        extra = {k for k in body if k.endswith("Params")} - {params_key}
        if extra:
            raise Invalid(f"Malformed input request: #: extraneous key [{extra.pop()}] is not "
                          "permitted")
        text = params.get("text")
        limit = 512 if titan else 1024
        if not isinstance(text, str) or not 1 <= len(text) <= limit:
            raise Invalid(f"Malformed input request: #/{params_key}/text: expected minLength: 1,"
                          f" maxLength: {limit}")
        if "forbidden" in text.lower():
            raise Invalid("This request has been blocked by our content filters.")
        source: bytes | None = None
        if task == "TEXT_IMAGE":
            _keys(params, {"text", "negativeText", "style"} if not titan
                  else {"text", "negativeText"}, params_key)
        elif task == "IMAGE_VARIATION":
            _keys(params, {"images", "text", "negativeText", "similarityStrength"}, params_key)
            images = params.get("images")
            if not isinstance(images, list) or not 1 <= len(images) <= 5:
                raise Invalid("Malformed input request: #/imageVariationParams/images: expected "
                              "minItems: 1, maxItems: 5")
            source = _decode_image(images[0])
            strength = params.get("similarityStrength", 0.7)
            if not isinstance(strength, (int, float)) or not 0.2 <= strength <= 1.0:
                raise Invalid("Malformed input request: #/imageVariationParams/"
                              "similarityStrength: must be between 0.2 and 1.0")
        else:
            _keys(params, {"image", "text", "negativeText", "maskPrompt", "maskImage"},
                  params_key)
            source = _decode_image(params.get("image"))
            if ("maskPrompt" in params) == ("maskImage" in params):
                raise Invalid("Malformed input request: exactly one of maskPrompt or maskImage "
                              "is required")
            if "maskImage" in params and _decode_image(params["maskImage"]) is None:
                raise Invalid("Malformed input request: maskImage is not a valid image")
        if task != "TEXT_IMAGE" and source is None:
            raise Invalid("Malformed input request: the input image is not a valid PNG or JPEG")
        config = body.get("imageGenerationConfig") or {}
        _keys(config, {"numberOfImages", "width", "height", "quality", "cfgScale", "seed"},
              "imageGenerationConfig")
        width, height = config.get("width", 1024), config.get("height", 1024)
        if titan and (width, height) not in TITAN_SIZES:
            raise Invalid(f"Malformed input request: {width}x{height} is not a supported size")
        if not titan and not (320 <= width <= 4096 and 320 <= height <= 4096 and width % 16 == 0
                              and height % 16 == 0 and width * height <= 4_194_304):
            raise Invalid("Malformed input request: width and height must be 320-4096, "
                          "divisible by 16")
        if config.get("quality", "standard") not in ("standard", "premium"):
            raise Invalid("Malformed input request: #/imageGenerationConfig/quality: not a "
                          "valid enum value")
        if not 1 <= config.get("numberOfImages", 1) <= 5:
            raise Invalid("Malformed input request: numberOfImages must be 1-5")
        seed = config.get("seed", 0)
        if not isinstance(seed, int) or not 0 <= seed <= 858_993_459:
            raise Invalid("Malformed input request: seed must be 0-858993459")
        colour = colour_for(text, png_info(source)[2] if source else None)
        image = png(width, height, colour, self.noise_rows, seed=text)
        return {"images": [base64.b64encode(image).decode()] * config.get("numberOfImages", 1),
                "error": None}


    def stability(self, model_id: str, body: Any) -> dict[str, Any]:
        """Stability's request checks: prompt, aspect_ratio (text-to-image only), mode,
        image + strength (image-to-image, SD3.5 Large only), output_format, seed."""
        if not isinstance(body, dict):
            raise Invalid("Malformed input request: expected type: JSONObject")
        edits = model_id == STABILITY_SD35
        _keys(body, {"prompt", "negative_prompt", "aspect_ratio", "output_format", "seed",
                     "mode", "image", "strength"} if edits
              else {"prompt", "negative_prompt", "aspect_ratio", "output_format", "seed"}, "")
        prompt = body.get("prompt")
        if not isinstance(prompt, str) or not 1 <= len(prompt) <= 10_000:
            raise Invalid("Malformed input request: #/prompt: expected minLength: 1")
        mode = body.get("mode", "text-to-image")
        ratios = {"16:9": (1344, 768), "1:1": (1024, 1024), "21:9": (1536, 640),
                  "2:3": (832, 1216), "3:2": (1216, 832), "4:5": (896, 1088),
                  "5:4": (1088, 896), "9:16": (768, 1344), "9:21": (640, 1536)}
        source = None
        if mode == "image-to-image":
            if "aspect_ratio" in body:
                raise Invalid("aspect_ratio is not allowed with image-to-image")
            source = _decode_image(body.get("image"))
            strength = body.get("strength")
            if source is None or not isinstance(strength, (int, float)) or not 0 <= strength <= 1:
                raise Invalid("image-to-image needs a valid image and a strength 0-1")
            size = png_info(source)[:2]
        elif mode == "text-to-image":
            if "image" in body or "strength" in body:
                raise Invalid("image and strength are for image-to-image")
            ratio = body.get("aspect_ratio", "1:1")
            if ratio not in ratios:
                raise Invalid(f"#/aspect_ratio: {ratio} is not a valid enum value")
            size = ratios[ratio]
        else:
            raise Invalid(f"#/mode: {mode} is not a valid enum value")
        if body.get("output_format", "png") not in ("png", "jpeg"):
            raise Invalid("#/output_format: not a valid enum value")
        seed = body.get("seed", 0)
        if not isinstance(seed, int) or not 0 <= seed <= 4_294_967_294:
            raise Invalid("#/seed: out of range")
        if "forbidden" in prompt.lower():
            return {"seeds": [seed], "finish_reasons": ["Filter reason: prompt"], "images": []}
        colour = colour_for(prompt, png_info(source)[2] if source else None)
        image = png(size[0], size[1], colour, self.noise_rows, seed=prompt)
        return {"seeds": [seed], "finish_reasons": [None],
                "images": [base64.b64encode(image).decode()]}


def _keys(obj: dict[str, Any], allowed: set[str], where: str) -> None:
    for key in obj:
        if key not in allowed:
            raise Invalid(f"Malformed input request: #/{where}: extraneous key [{key}] is not "
                          "permitted")


class _BedrockHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    owner: FakeBedrockImages

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        parts = self.path.split("/")
        if len(parts) != 4 or parts[1] != "model" or parts[3] != "invoke":
            self._send(404, {"message": f"no route {self.path}"}, "UnknownOperationException")
            return
        model_id = unquote(parts[2])
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        self.owner.invocations.append(Invocation(model_id, body, dict(self.headers.items())))
        if self.owner.errors:
            status, kind, message = self.owner.errors.pop(0)
            self._send(status, {"message": message}, kind)
            return
        try:
            self._send(200, self.owner.answer(model_id, body))
        except Invalid as exc:
            self._send(400, {"message": str(exc)}, "ValidationException")
        except LookupError as exc:
            self._send(404, {"message": str(exc)}, "ResourceNotFoundException")

    def _send(self, status: int, payload: Any, error_type: str | None = None) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("x-amzn-RequestId", "fake-image-request")
        if error_type:
            self.send_header("x-amzn-ErrorType", f"{error_type}:http://internal.amazon.com/")
        self.end_headers()
        self.wfile.write(body)


# -- OpenAI-compatible images server ------------------------------------------------------------

_GEN_FIELDS = {"model", "prompt", "n", "size", "quality", "background", "output_format",
               "output_compression", "moderation", "stream", "partial_images", "user",
               "response_format", "style"}
_EDIT_FIELDS = _GEN_FIELDS - {"style"} | {"input_fidelity"}


@dataclass
class ImageCall:
    path: str
    fields: dict[str, Any]
    files: dict[str, bytes]
    headers: dict[str, str]


@dataclass
class FakeImagesServer:
    api_key: str | None = None
    noise_rows: int = 40
    delay: float = 0.0  # seconds before answering (a slow image model)
    calls: list[ImageCall] = field(default_factory=list)
    errors: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None

    @property
    def base_url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> FakeImagesServer:
        fake = self

        class Handler(_ImagesHandler):
            owner = fake

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()


def _multipart(content_type: str, raw: bytes) -> tuple[dict[str, Any], dict[str, bytes]]:
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        f"Content-Type: {content_type}\r\n\r\n".encode() + raw)
    fields: dict[str, Any] = {}
    files: dict[str, bytes] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True) or b""
        if part.get_filename():
            files[str(name)] = payload
        else:
            fields[str(name)] = payload.decode()
    for key in ("n", "output_compression", "partial_images"):
        if key in fields:
            fields[key] = int(fields[key])
    if "stream" in fields:
        fields["stream"] = fields["stream"] == "true"
    return fields, files


class _ImagesHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    owner: FakeImagesServer

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        owner = self.owner
        if owner.api_key and self.headers.get("Authorization") != f"Bearer {owner.api_key}":
            self._json(401, {"error": {"message": "Incorrect API key provided: "
                                                  f"{self.headers.get('Authorization')}",
                                       "type": "invalid_request_error", "code": "invalid_api_key"}})
            return
        if self.path == "/v1/images/generations":
            fields, files = json.loads(raw), {}
            allowed = _GEN_FIELDS
        elif self.path == "/v1/images/edits":
            fields, files = _multipart(self.headers["Content-Type"], raw)
            allowed = _EDIT_FIELDS
        else:
            self._json(404, {"error": {"message": "not found"}})
            return
        owner.calls.append(ImageCall(self.path, fields, files, dict(self.headers.items())))
        if owner.delay:
            time.sleep(owner.delay)
        if owner.errors:
            status, error = owner.errors.pop(0)
            self._json(status, {"error": error})
            return
        problem = _check(fields, files, allowed, edit=self.path.endswith("edits"))
        if problem:
            self._json(400, {"error": {"message": problem[0], "type": "invalid_request_error",
                                       "param": problem[1], "code": "invalid_value"}})
            return
        if "forbidden" in fields["prompt"]:
            self._json(400, {"error": {"message": "Your request was rejected by the safety "
                                                  "system.", "type": "image_generation_user_error",
                                       "code": "moderation_blocked", "param": None}})
            return
        size = fields.get("size", "auto")
        width, height = (1024, 1024) if size == "auto" else map(int, size.split("x"))
        source = png_info(files["image"])[2] if "image" in files else None
        colour = colour_for(fields["prompt"], source)
        final = base64.b64encode(png(width, height, colour, owner.noise_rows,
                                     seed=fields["prompt"])).decode()
        used = {"size": f"{width}x{height}",
                "quality": "medium" if fields.get("quality", "auto") == "auto"
                else fields["quality"],
                "output_format": fields.get("output_format", "png"),
                "background": "opaque" if fields.get("background", "auto") == "auto"
                else fields["background"]}
        if fields.get("stream"):
            prefix = "image_edit" if self.path.endswith("edits") else "image_generation"
            events = [{"type": f"{prefix}.partial_image", "partial_image_index": i,
                       "b64_json": base64.b64encode(png(16, 16, (i * 60, i * 60, i * 60)))
                       .decode(), **used}
                      for i in range(fields.get("partial_images", 0))]
            events.append({"type": f"{prefix}.completed", "b64_json": final, **used,
                           "usage": {"input_tokens": 5, "output_tokens": 100,
                                     "total_tokens": 105}})
            self._sse(events)
            return
        if not str(fields.get("model", "")).startswith("gpt-image") and fields.get(
                "response_format") != "b64_json":  # as DALL-E and most servers: a URL
            self._json(200, {"created": 1, "data": [{"url": "http://127.0.0.1:1/image.png"}]})
            return
        if str(fields.get("model", "")).startswith("gpt-image") and "response_format" in fields:
            self._json(400, {"error": {"message": "Unknown parameter: 'response_format'.",
                                       "type": "invalid_request_error",
                                       "param": "response_format", "code": "unknown_parameter"}})
            return
        self._json(200, {"created": 1, "data": [{"b64_json": final, "revised_prompt":
                                                 "Revised: " + fields["prompt"]}], **used,
                         "usage": {"input_tokens": 7, "output_tokens": 100,
                                   "total_tokens": 107,
                                   "input_tokens_details": {"image_tokens": 2,
                                                            "text_tokens": 5}}})

    def _json(self, status: int, payload: Any) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _sse(self, events: list[dict[str, Any]]) -> None:
        body = b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def _check(fields: dict[str, Any], files: dict[str, bytes], allowed: set[str], *, edit: bool
           ) -> tuple[str, str] | None:
    for key in fields:
        if key not in allowed:
            return f"Unknown parameter: '{key}'.", key
    if not isinstance(fields.get("prompt"), str) or not fields["prompt"]:
        return "Missing required parameter: 'prompt'.", "prompt"
    if fields.get("n", 1) != 1:
        return "n must be 1 here", "n"
    size = fields.get("size", "auto")
    if size not in ("auto", "1024x1024", "1024x1536", "1536x1024"):
        return f"Invalid value: '{size}'.", "size"
    if fields.get("quality", "auto") not in ("low", "medium", "high", "auto"):
        return "Invalid quality", "quality"
    if fields.get("output_format", "png") not in ("png", "jpeg", "webp"):
        return "Invalid output_format", "output_format"
    if fields.get("background", "auto") not in ("transparent", "opaque", "auto"):
        return "Invalid background", "background"
    if not 0 <= fields.get("partial_images", 0) <= 3:
        return "Invalid partial_images", "partial_images"
    if "partial_images" in fields and not fields.get("stream"):
        return "partial_images requires stream", "partial_images"
    if edit:
        if "image" not in files or not files["image"].startswith(PNG_SIGNATURE):
            return "Missing required parameter: 'image'.", "image"
        if "mask" in files and not files["mask"].startswith(PNG_SIGNATURE):
            return "Invalid mask", "mask"
    return None
