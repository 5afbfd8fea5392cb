"""Image models for tests, on 127.0.0.1, making real PNGs (built with zlib, no image library).

- :class:`FakeBedrockImages`: Bedrock runtime's ``InvokeModel`` (``POST /model/<id>/invoke``)
  for Amazon Nova Canvas, Titan Image Generator v2 and Stability's models, answering
  ``{"images": [...]}`` (Stability: ``{"seeds", "finish_reasons", "images"}``); a prompt
  containing ``forbidden`` is blocked by the "content filter", and ``error(...)`` scripts a
  failure for the next calls. boto3 reaches it through ``endpoint_url``.

  Its rules are AWS's documented request bodies written as JSON schemas (:data:`NOVA_SCHEMA`,
  :data:`TITAN_SCHEMA`, :data:`STABILITY_SCHEMA`, :data:`STABILITY_SD35_SCHEMA`), not the
  gateway's reading of them: ``taskType`` TEXT_IMAGE / COLOR_GUIDED_GENERATION /
  IMAGE_VARIATION / INPAINTING / OUTPAINTING / BACKGROUND_REMOVAL with exactly its parameters
  object (``textToImageParams``, ``colorGuidedGenerationParams``, ``imageVariationParams``,
  ``inPaintingParams``, ``outPaintingParams``, ``backgroundRemovalParams``: note the capital
  P), exactly one of ``maskPrompt`` / ``maskImage``, ``imageGenerationConfig`` {numberOfImages,
  height, width, cfgScale, seed, quality}; unknown keys and wrong types are refused with
  Bedrock's ValidationException words ("Malformed input request: #/...: extraneous key [...]
  is not permitted"). Then what a schema cannot say: sizes per model, decodable images.
  Sources:
  https://docs.aws.amazon.com/nova/latest/userguide/image-gen-req-resp-structure.html,
  https://docs.aws.amazon.com/nova/latest/userguide/image-gen-access.html,
  https://docs.aws.amazon.com/bedrock/latest/userguide/model-parameters-titan-image.html,
  https://docs.aws.amazon.com/bedrock/latest/userguide/model-parameters-diffusion-3-5-large.html
  (and the Stable Image Core / Ultra pages beside it). VIRTUAL_TRY_ON is not modelled (the
  gateway never asks for it; the fake refuses it as an unknown task).
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
    """The rows of an 8-bit greyscale PNG (the gateway's masks), decoded as any PNG reader
    decodes them (its rows may use any of PNG's filters)."""
    import io

    from PIL import Image

    assert data.startswith(PNG_SIGNATURE) and data[25] == 0, "not a greyscale PNG"
    with Image.open(io.BytesIO(data), formats=["PNG"]) as image:
        assert image.mode == "L", image.mode
        raw = image.tobytes()
        width, height = image.size
    return [raw[y * width:(y + 1) * width] for y in range(height)]


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

# The request bodies, as AWS documents them (the sources are in the module docstring). Every
# object refuses keys it does not list, as Bedrock's validator does ("extraneous key [...] is
# not permitted").

_B64 = {"type": "string", "minLength": 1}
_MASKED = {"oneOf": [{"required": ["maskPrompt"]}, {"required": ["maskImage"]}]}


def _obj(properties: dict[str, Any], required: tuple[str, ...] = (), **more: Any
         ) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(required),
            "additionalProperties": False, **more}


def _amazon_schema(*, text_max: int, seed_max: int, styles: bool, tasks: tuple[str, ...]
                   ) -> dict[str, Any]:
    """Nova Canvas' and Titan Image Generator v2's body: one ``taskType``, its parameters
    object (and no other), ``imageGenerationConfig``."""
    text = {"type": "string", "minLength": 1, "maxLength": text_max}
    t2i = {"text": text, "negativeText": text, "conditionImage": _B64,
           "controlMode": {"enum": ["CANNY_EDGE", "SEGMENTATION"]},
           "controlStrength": {"type": "number", "minimum": 0, "maximum": 1}}
    if styles:
        t2i["style"] = {"enum": ["3D_ANIMATED_FAMILY_FILM", "DESIGN_SKETCH",
                                 "FLAT_VECTOR_ILLUSTRATION", "GRAPHIC_NOVEL_ILLUSTRATION",
                                 "MAXIMALISM", "MIDCENTURY_RETRO", "PHOTOREALISM",
                                 "SOFT_DIGITAL_PAINTING"]}
    masked = {"image": _B64, "text": text, "negativeText": text, "maskPrompt": text,
              "maskImage": _B64, "returnMask": {"type": "boolean"}}
    params = {
        "textToImageParams": _obj(t2i, ("text",)),
        "colorGuidedGenerationParams": _obj(
            {"colors": {"type": "array", "minItems": 1, "maxItems": 10,
                        "items": {"type": "string", "pattern": "^#[0-9A-Fa-f]{6}$"}},
             "referenceImage": _B64, "text": text, "negativeText": text},
            ("colors", "text")),
        "imageVariationParams": _obj(
            {"images": {"type": "array", "minItems": 1, "maxItems": 5, "items": _B64},
             "similarityStrength": {"type": "number", "minimum": 0.2, "maximum": 1.0},
             "text": text, "negativeText": text}, ("images",)),
        "inPaintingParams": _obj(masked, ("image",), **_MASKED),
        "outPaintingParams": _obj(
            {**masked, "outPaintingMode": {"enum": ["DEFAULT", "PRECISE"]}},
            ("image", "text"), **_MASKED),
        "backgroundRemovalParams": _obj({"image": _B64}, ("image",)),
    }
    config = _obj({"numberOfImages": {"type": "integer", "minimum": 1, "maximum": 5},
                   "width": {"type": "integer"}, "height": {"type": "integer"},
                   "quality": {"enum": ["standard", "premium"]},
                   "cfgScale": {"type": "number", "minimum": 1.1, "maximum": 10},
                   "seed": {"type": "integer", "minimum": 0, "maximum": seed_max}})
    return _obj({"taskType": {"enum": list(tasks)}, "imageGenerationConfig": config, **params},
                ("taskType",), allOf=[
                    {"if": {"properties": {"taskType": {"const": task}},
                            "required": ["taskType"]},
                     "then": {"required": [TASK_PARAMS[task]],
                              "propertyNames": {"enum": ["taskType", "imageGenerationConfig",
                                                         TASK_PARAMS[task]]}}}
                    for task in tasks])


TASK_PARAMS = {"TEXT_IMAGE": "textToImageParams",
               "COLOR_GUIDED_GENERATION": "colorGuidedGenerationParams",
               "IMAGE_VARIATION": "imageVariationParams", "INPAINTING": "inPaintingParams",
               "OUTPAINTING": "outPaintingParams", "BACKGROUND_REMOVAL": "backgroundRemovalParams"}
NOVA_SCHEMA = _amazon_schema(text_max=1024, seed_max=858_993_459, styles=True,
                             tasks=tuple(TASK_PARAMS))
TITAN_SCHEMA = _amazon_schema(text_max=512, seed_max=2_147_483_646, styles=False,
                              tasks=tuple(TASK_PARAMS))
_STABILITY_FIELDS = {
    "prompt": {"type": "string", "minLength": 1, "maxLength": 10_000},
    "negative_prompt": {"type": "string", "maxLength": 10_000},
    "aspect_ratio": {"enum": ["16:9", "1:1", "21:9", "2:3", "3:2", "4:5", "5:4", "9:16",
                              "9:21"]},
    "output_format": {"enum": ["jpeg", "png"]},
    "seed": {"type": "integer", "minimum": 0, "maximum": 4_294_967_294},
}
STABILITY_SCHEMA = _obj(_STABILITY_FIELDS, ("prompt",))
#: SD3.5 Large also takes ``mode``; image-to-image needs ``image`` and ``strength`` and takes
#: no ``aspect_ratio`` (text-to-image takes neither image nor strength).
STABILITY_SD35_SCHEMA = _obj(
    {**_STABILITY_FIELDS, "mode": {"enum": ["text-to-image", "image-to-image"]},
     "image": _B64, "strength": {"type": "number", "minimum": 0, "maximum": 1}},
    ("prompt",), **{
        "if": {"properties": {"mode": {"const": "image-to-image"}}, "required": ["mode"]},
        "then": {"required": ["image", "strength"], "not": {"required": ["aspect_ratio"]}},
        "else": {"allOf": [{"not": {"required": ["image"]}},
                           {"not": {"required": ["strength"]}}]}})

_JSON_TYPES = {"object": "JSONObject", "array": "JSONArray", "string": "String",
               "integer": "Integer", "number": "Number", "boolean": "Boolean", "null": "Null"}


def _json_type(value: Any) -> str:
    if value is None:
        return "Null"
    if isinstance(value, bool):
        return "Boolean"
    return {dict: "JSONObject", list: "JSONArray", str: "String", int: "Integer",
            float: "BigDecimal"}.get(type(value), type(value).__name__)


def _violation(error: Any) -> str:
    """One jsonschema error in the words of Bedrock's validator (everit's JSON schema
    messages: ``#/imageGenerationConfig/width: expected type: Integer, found: String``)."""
    import jsonschema

    where = "#" + "".join(f"/{part}" for part in error.absolute_path)
    kind, value, schema = error.validator, error.instance, error.schema
    if "propertyNames" in error.schema_path:  # a key the task's body may not hold
        return f"{where}: extraneous key [{value}] is not permitted"
    if kind == "additionalProperties":
        key = sorted(set(value) - set(schema.get("properties", {})))[0]
        return f"{where}: extraneous key [{key}] is not permitted"
    if kind == "not" and "required" in error.validator_value:
        return f"{where}: extraneous key [{error.validator_value['required'][0]}] is not permitted"
    if kind == "oneOf":
        matched = sum(jsonschema.Draft202012Validator(sub).is_valid(value)
                      for sub in error.validator_value)
        return f"{where}: {matched} subschemas matched instead of one"
    if kind == "required":
        missing = [k for k in error.validator_value if k not in value]
        return f"{where}: required key [{missing[0]}] not found"
    if kind == "type":
        return (f"{where}: expected type: {_JSON_TYPES[error.validator_value]}, "
                f"found: {_json_type(value)}")
    if kind in ("enum", "const"):
        return f"{where}: {value} is not a valid enum value"
    if kind == "minLength":
        return f"{where}: expected minLength: {error.validator_value}, actual: {len(value)}"
    if kind == "maxLength":
        return f"{where}: expected maxLength: {error.validator_value}, actual: {len(value)}"
    if kind == "minimum":
        return f"{where}: {value} is not greater or equal to {error.validator_value}"
    if kind == "maximum":
        return f"{where}: {value} is not less or equal to {error.validator_value}"
    if kind == "minItems":
        return f"{where}: expected minimum item count: {error.validator_value}, found: {len(value)}"
    if kind == "maxItems":
        return f"{where}: expected maximum item count: {error.validator_value}, found: {len(value)}"
    if kind == "pattern":
        return f"{where}: string [{value}] does not match pattern {error.validator_value}"
    return f"{where}: {error.message}"


def validate(body: Any, schema: dict[str, Any]) -> None:
    """Raise :class:`Invalid` with Bedrock's ValidationException message for a body the
    schema refuses: one violation named, several counted, as Bedrock words them."""
    import jsonschema

    if not isinstance(body, dict):
        raise Invalid("Malformed input request: expected type: JSONObject, found: "
                      f"{_json_type(body)}, please reformat your input and try again.")
    validator = jsonschema.Draft202012Validator(schema)
    errors = list(validator.iter_errors(body))
    if not errors:
        return
    leaves: list[str] = []
    for error in errors:  # if/then and allOf report their inner violations
        leaves.extend(m for m in map(_violation, _leaves(error)) if m not in leaves)
    detail = (leaves[0] if len(leaves) == 1
              else f"{len(leaves)} schema violations found")
    raise Invalid(f"Malformed input request: {detail}, please reformat your input and try "
                  "again.")


def _leaves(error: Any) -> list[Any]:
    if error.validator in ("allOf", "then", "else", "if") and error.context:
        return [leaf for inner in error.context for leaf in _leaves(inner)]
    return [error]




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
        threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True).start()
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
        validate(body, TITAN_SCHEMA if titan else NOVA_SCHEMA)
        task = body["taskType"]
        params = body[TASK_PARAMS[task]]
        text = params.get("text", "")
        if "forbidden" in text.lower():
            raise Invalid("This request has been blocked by our content filters.")
        source: bytes | None = None
        if task == "IMAGE_VARIATION":
            source = _decode_image(params["images"][0])
        elif task in ("INPAINTING", "OUTPAINTING"):
            source = _decode_image(params["image"])
            if "maskImage" in params and _decode_image(params["maskImage"]) is None:
                raise Invalid("Malformed input request: maskImage is not a valid image")
        elif task != "TEXT_IMAGE":
            raise Invalid(f"The fake draws no {task}")  # valid, but not what the gateway asks
        if task != "TEXT_IMAGE" and source is None:
            raise Invalid("Malformed input request: the input image is not a valid PNG or JPEG")
        config = body.get("imageGenerationConfig") or {}
        width, height = config.get("width", 1024), config.get("height", 1024)
        if titan and (width, height) not in TITAN_SIZES:
            raise Invalid(f"Malformed input request: {width}x{height} is not a supported size")
        if not titan and not (320 <= width <= 4096 and 320 <= height <= 4096 and width % 16 == 0
                              and height % 16 == 0 and width * height <= 4_194_304):
            raise Invalid("Malformed input request: width and height must be 320-4096, "
                          "divisible by 16")
        colour = colour_for(text, png_info(source)[2] if source else None)
        image = png(width, height, colour, self.noise_rows, seed=text)
        return {"images": [base64.b64encode(image).decode()] * config.get("numberOfImages", 1),
                "error": None}

    def stability(self, model_id: str, body: Any) -> dict[str, Any]:
        """Stability's request (STABILITY_SCHEMA, image-to-image for SD3.5 Large only)."""
        edits = model_id == STABILITY_SD35
        validate(body, STABILITY_SD35_SCHEMA if edits else STABILITY_SCHEMA)
        prompt = body["prompt"]
        ratios = {"16:9": (1344, 768), "1:1": (1024, 1024), "21:9": (1536, 640),
                  "2:3": (832, 1216), "3:2": (1216, 832), "4:5": (896, 1088),
                  "5:4": (1088, 896), "9:16": (768, 1344), "9:21": (640, 1536)}
        source = None
        if body.get("mode") == "image-to-image":
            source = _decode_image(body["image"])
            if source is None:
                raise Invalid("image-to-image needs a valid PNG or JPEG image")
            size = png_info(source)[:2]
        else:
            size = ratios[body.get("aspect_ratio", "1:1")]
        seed = body.get("seed", 0)
        if "forbidden" in prompt.lower():
            return {"seeds": [seed], "finish_reasons": ["Filter reason: prompt"], "images": []}
        colour = colour_for(prompt, png_info(source)[2] if source else None)
        image = png(size[0], size[1], colour, self.noise_rows, seed=prompt)
        return {"seeds": [seed], "finish_reasons": [None],
                "images": [base64.b64encode(image).decode()]}


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
    #: the next calls' 200 answers, as they are (a broken image server's JSON)
    replies: list[Any] = field(default_factory=list)
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
        threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True).start()
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
        # The call takes its queued answer as it arrives, before any delay: a call its client
        # gave up on (a timeout test) must not wake later and take the next test's answer.
        error = owner.errors.pop(0) if owner.errors else None
        replied = error is None and bool(owner.replies)
        reply = owner.replies.pop(0) if replied else None
        if owner.delay:
            time.sleep(owner.delay)
        if error is not None:
            status, body = error
            self._json(status, {"error": body})
            return
        if replied:
            self._json(200, reply)
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
