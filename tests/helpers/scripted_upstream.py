"""A real Chat Completions server for tests: real HTTP and SSE on 127.0.0.1, scripted answers.

Usage::

    with ScriptedUpstream() as up:
        client = OpenAI(base_url=up.base_url, api_key="x")   # http://127.0.0.1:PORT/v1
        ...
        up.requests        # every request body received (list of dicts, a copy)
        up.reset()

The behaviour is chosen by the request, first match wins:
1. a directive ``[[script:NAME key=value ...]]`` in the last user message's text;
2. the model name ``script/NAME key=value ...``;
3. a directive in a system / developer message;
4. otherwise ``text`` (or, when tool results follow the last user message, a text answer that
   quotes them, so tool round trips are observable).

Arguments are shell-like (``text="two words"``, ``args='{"a": 1}'``); a bare word is ``=1``.
Scripts (details in each ``s_*`` docstring):

    text text= n=            echo n=                 deltas n=500 ("0 1 2 ... ")
    tool names=a,b name= args='{json}' n=            parallel names=a,b
    steps calls=B64 text=B64 quote=1 name= n=  (base64url JSON list of arguments, a turn each)
    reasoning reasoning= text= field=reasoning_content|reasoning
    refusal text=            length text=            huge size= piece= random=
    rate_limit|429 retry_after=S|none retry_after_ms= retry_after_date=S code= message=
    error|500 status= code= type= message= raw="non-JSON body"
    drop after= clean=1      slow delay= n=          stall after= seconds=
    keepalive after= every= seconds=
    malformed after=         error_event after= code= message= done=1
    fixture:<file> (or fixture file=<file>) from tests/fixtures/chat-streams/
    facts total=N            an agent that remembers FACT:... tokens (s_facts)
    crlf / multiline / comments: text with that framing

Generic arguments, any script: ``times=K [key=K] [then=NAME]`` (only the first K matching
requests get this script, later ones get ``then``, default text; counted per key, default the
directive text, until reset()), ``delay=S`` (before each item), ``first_delay=S`` (before
the body, or before an error status), ``eol=lf|crlf|cr``, ``multiline=1``, ``comments=1``,
``done=0``, ``usage=1|0`` (default: the request's ``stream_options.include_usage``). Tool
call ids are ``call_<request index>_<i>``. A request's ``max_completion_tokens`` (or
``max_tokens``) holds as a server holds it: a script's output past that many tokens (one per
delta, as its usage counts them) is not sent, and the choice ends ``finish_reason: "length"``.

Every behaviour also answers ``stream=false`` with a ``chat.completion`` aggregated from the
same chunks (usage always included); stall/slow delay it, drop cuts the JSON body mid-way,
malformed sends a non-JSON 200, error_event a 200 whose body is the error object.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
import re
import shlex
import socket
import string
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from email.utils import formatdate
from pathlib import Path
from typing import Any

import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

FIXTURES_DIR = Path(__file__).resolve().parent.parent / "fixtures" / "chat-streams"
DIRECTIVE = re.compile(r"\[\[script:(.*?)\]\]", re.S)
DEFAULT_TEXT = "Hello from the scripted upstream."
DEFAULT_REASONING = "Let me think about this step by step."
DEFAULT_REFUSAL = "I'm sorry, but I can't help with that."
CITIES = ("Paris", "Tokyo", "Lima", "Oslo")


# -- plans ---------------------------------------------------------------------------------


@dataclass(slots=True)
class Sleep:
    seconds: float


@dataclass(slots=True)
class Drop:
    """Close the socket here: no more bytes, no end of the chunked body, no [DONE]."""


@dataclass(slots=True)
class EndBody:
    """End the HTTP body cleanly here, without a finish_reason or [DONE]."""


Item = dict[str, Any] | bytes | Sleep | Drop | EndBody


@dataclass
class Plan:
    """What to send: an HTTP error, or a list of items streamed as SSE (or aggregated)."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    error: Any = None  # JSON error body (or str: a non-JSON body) when status != 200
    items: list[Item] = field(default_factory=list)
    done: bool = True  # send data: [DONE]
    delay: float = 0.0  # before each item
    first_delay: float = 0.0  # before the first byte of the body
    eol: bytes = b"\n"
    multiline: bool = False  # split each chunk's JSON over several data: lines
    comments: bool = False  # a ": comment" line and an id: field before each event
    nonstream_body: bytes | None = None  # a raw body for stream=false (e.g. malformed JSON)
    usage: dict[str, Any] = field(default_factory=dict)  # for the stream=false answer


class _Chunks:
    """Builds chat.completion.chunk dicts for one response."""

    def __init__(self, model: str, rid: str, created: int) -> None:
        self.model = model
        self.id = rid
        self.created = created

    def chunk(self, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": "fp_scripted",
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }

    def usage(self, usage: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": "fp_scripted",
            "choices": [],
            "usage": usage,
        }


def split_text(text: str, n: int) -> list[str]:
    """``text`` in ``n`` nearly equal consecutive pieces (fewer if the text is shorter)."""
    n = max(1, min(n, len(text))) if text else 1
    size, rest = divmod(len(text), n)
    pieces, start = [], 0
    for i in range(n):
        end = start + size + (1 if i < rest else 0)
        pieces.append(text[start:end])
        start = end
    return pieces


def message_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part.get("text", "") for part in content
            if isinstance(part, dict) and part.get("type") in ("text", "input_text")
        )
    return ""


@dataclass
class Context:
    """The request as a script sees it."""

    body: dict[str, Any]
    index: int  # this request's position in ``requests``
    chunks: _Chunks

    @property
    def messages(self) -> list[dict[str, Any]]:
        messages = self.body.get("messages")
        return messages if isinstance(messages, list) else []

    def last_user_index(self) -> int:
        for i in range(len(self.messages) - 1, -1, -1):
            if self.messages[i].get("role") == "user":
                return i
        return -1

    def since_last_user(self) -> list[dict[str, Any]]:
        return self.messages[self.last_user_index() + 1:]

    def tool_outputs(self) -> list[str]:
        return [message_text(m) for m in self.since_last_user() if m.get("role") == "tool"]

    def tool_names(self) -> list[str]:
        names = []
        for tool in self.body.get("tools") or []:
            fn = tool.get("function") if isinstance(tool, dict) else None
            if isinstance(fn, dict) and fn.get("name"):
                names.append(fn["name"])
        return names

    def prompt_tokens(self) -> int:
        return sum(len(message_text(m).split()) + 1 for m in self.messages)


# -- scripts -------------------------------------------------------------------------------

Args = dict[str, str]


def _int(args: Args, key: str, default: int) -> int:
    return int(args[key]) if key in args else default


def _float(args: Args, key: str, default: float) -> float:
    return float(args[key]) if key in args else default


def _text_items(ctx: Context, text: str, n: int, finish: str = "stop",
                field_name: str = "content") -> list[Item]:
    items: list[Item] = [ctx.chunks.chunk({"role": "assistant", "content": ""})]
    items += [ctx.chunks.chunk({field_name: p}) for p in split_text(text, n)]
    items.append(ctx.chunks.chunk({}, finish))
    return items


def _tool_answer(ctx: Context, args: Args) -> Plan:
    outputs = ctx.tool_outputs()
    text = "Tool output: " + " | ".join(outputs)
    return Plan(items=_text_items(ctx, text, _int(args, "n", 4)))


def s_text(ctx: Context, args: Args) -> Plan:
    """text="..." (default DEFAULT_TEXT) in n deltas (default 4), finish stop."""
    return Plan(items=_text_items(ctx, args.get("text", DEFAULT_TEXT), _int(args, "n", 4)))


def s_echo(ctx: Context, args: Args) -> Plan:
    """The last user message's text, directive removed, in n deltas."""
    i = ctx.last_user_index()
    text = DIRECTIVE.sub("", message_text(ctx.messages[i])).strip() if i >= 0 else ""
    return Plan(items=_text_items(ctx, text or DEFAULT_TEXT, _int(args, "n", 4)))


def s_deltas(ctx: Context, args: Args) -> Plan:
    """n deltas (default 500), delta i is "{i} " (ordering is checkable)."""
    n = _int(args, "n", 500)
    items: list[Item] = [ctx.chunks.chunk({"role": "assistant", "content": ""})]
    items += [ctx.chunks.chunk({"content": f"{i} "}) for i in range(n)]
    items.append(ctx.chunks.chunk({}, "stop"))
    return Plan(items=items)


def _call_items(ctx: Context, calls: list[tuple[str, str]], n: int) -> list[Item]:
    items: list[Item] = [ctx.chunks.chunk({"role": "assistant", "content": None})]
    for i, (name, arguments) in enumerate(calls):
        call_id = f"call_{ctx.index}_{i}"
        items.append(ctx.chunks.chunk({"tool_calls": [{
            "index": i, "id": call_id, "type": "function",
            "function": {"name": name, "arguments": ""},
        }]}))
        for piece in split_text(arguments, n):
            items.append(ctx.chunks.chunk(
                {"tool_calls": [{"index": i, "function": {"arguments": piece}}]}
            ))
    items.append(ctx.chunks.chunk({}, "tool_calls"))
    return items


def s_tool(ctx: Context, args: Args) -> Plan:
    """One function call per turn: names=a,b (default: the request's first tool, else
    get_weather) called one after the other, args='{json}' (default {"city": "Paris"}) in n
    fragments (default 3); once every name has a result, a text answer quoting the outputs.
    reasoning="..." puts it in n reasoning_content deltas before each turn's output (a
    reasoning model's tool loop); signature=SIG ends it with a signed reasoning_details block
    (OpenRouter / Claude style), which a client must send back for the next turn."""
    names = args["names"].split(",") if "names" in args else ctx.tool_names()[:1] or [
        "get_weather"]
    if "name" in args:
        names = [args["name"]]
    done_steps = sum(
        1 for m in ctx.since_last_user() if m.get("role") == "assistant" and m.get("tool_calls")
    )
    if done_steps >= len(names) or (ctx.tool_outputs() and done_steps == 0):
        plan = _tool_answer(ctx, args)
    else:
        arguments = args.get("args", '{"city": "Paris"}')
        plan = Plan(items=_call_items(ctx, [(names[done_steps], arguments)], _int(args, "n", 3)))
    if "reasoning" in args:
        thoughts = [{"reasoning_content": p}
                    for p in split_text(args["reasoning"], _int(args, "n", 3))]
        if "signature" in args:
            thoughts[-1]["reasoning_details"] = [{
                "type": "reasoning.text", "text": "", "signature": args["signature"],
                "format": "anthropic-claude-v1", "index": 0}]
        plan.items[1:1] = [ctx.chunks.chunk(delta) for delta in thoughts]
    return plan


def _seen_images(ctx: Context) -> list[str]:
    """``image:<sha256 of the url, 12 hex>`` for each image a user message showed the model
    after its first tool call (a tool's screenshot: tools the client runs)."""
    import hashlib

    seen, after_call = [], False
    for message in ctx.messages:
        after_call = after_call or bool(message.get("tool_calls"))
        content = message.get("content")
        if not after_call or message.get("role") != "user" or not isinstance(content, list):
            continue
        for part in content:
            url = (part.get("image_url") or {}).get("url") if isinstance(part, dict) else None
            if isinstance(url, str):
                seen.append("image:" + hashlib.sha256(url.encode()).hexdigest()[:12])
    return seen


def s_call(ctx: Context, args: Args) -> Plan:
    """Calls the functions names=a,b (or name=a) one per turn, the i-th (from 1) with
    argsI='{json}' (else args='{json}', else {}), in n fragments (default 3); once each has
    been called, a text answer quoting every tool message and naming each image shown after
    the first call: "Tool output: <t1> | <t2> | image:<hash>". Reads the whole conversation,
    so it also works from a system message (a screenshot's user message comes last)."""
    names = args["names"].split(",") if "names" in args else [args.get("name", "get_weather")]
    done_steps = sum(1 for m in ctx.messages if m.get("role") == "assistant"
                     and m.get("tool_calls"))
    if done_steps >= len(names):
        outputs = [message_text(m) for m in ctx.messages if m.get("role") == "tool"]
        text = "Tool output: " + " | ".join([*outputs, *_seen_images(ctx)])
        return Plan(items=_text_items(ctx, text, _int(args, "n", 4)))
    arguments = args.get(f"args{done_steps + 1}", args.get("args", "{}"))
    return Plan(items=_call_items(ctx, [(names[done_steps], arguments)], _int(args, "n", 3)))


def s_steps(ctx: Context, args: Args) -> Plan:
    """A tool loop of arguments too rich for a directive: calls=B64 (base64url of a JSON list
    of argument strings) calls name= (default: the request's first tool) once per turn with
    each in turn, in n fragments (default 5), counted since the last user message; then
    text=B64 (base64url of the answer's text; default "Done."), followed by every tool output
    of this turn when quote=1 ("... Tool output: <t1> | <t2>")."""
    import base64
    import json

    def unpacked(key: str) -> str:
        return base64.urlsafe_b64decode(args[key].encode()).decode()

    calls = json.loads(unpacked("calls")) if "calls" in args else []
    name = args.get("name") or (ctx.tool_names()[:1] or ["get_weather"])[0]
    done_steps = sum(1 for m in ctx.since_last_user()
                     if m.get("role") == "assistant" and m.get("tool_calls"))
    if done_steps < len(calls):
        return Plan(items=_call_items(ctx, [(name, calls[done_steps])], _int(args, "n", 5)))
    text = unpacked("text") if "text" in args else "Done."
    if args.get("quote") == "1":
        text += " Tool output: " + " | ".join(ctx.tool_outputs())
    return Plan(items=_text_items(ctx, text, _int(args, "n", 4)))


def s_parallel(ctx: Context, args: Args) -> Plan:
    """Several calls in one turn: names=a,b (default: the request's first two tools, else
    get_weather,get_time), each with {"city": CITIES[i]}; then a text answer with the outputs."""
    if ctx.tool_outputs():
        return _tool_answer(ctx, args)
    names = args["names"].split(",") if "names" in args else ctx.tool_names()[:2]
    if len(names) < 2:
        names = ["get_weather", "get_time"]
    calls = [(name, orjson.dumps({"city": CITIES[i % len(CITIES)]}).decode())
             for i, name in enumerate(names)]
    return Plan(items=_call_items(ctx, calls, _int(args, "n", 2)))


def s_reasoning(ctx: Context, args: Args) -> Plan:
    """reasoning="..." in n deltas of field=reasoning_content (or reasoning), then text=..."""
    n = _int(args, "n", 4)
    field_name = args.get("field", "reasoning_content")
    items: list[Item] = [ctx.chunks.chunk({"role": "assistant", "content": ""})]
    items += [ctx.chunks.chunk({field_name: p})
              for p in split_text(args.get("reasoning", DEFAULT_REASONING), n)]
    items += [ctx.chunks.chunk({"content": p})
              for p in split_text(args.get("text", DEFAULT_TEXT), n)]
    items.append(ctx.chunks.chunk({}, "stop"))
    return Plan(items=items)


def s_refusal(ctx: Context, args: Args) -> Plan:
    """A refusal (delta.refusal) in n deltas, finish stop."""
    items: list[Item] = [ctx.chunks.chunk({"role": "assistant", "content": None, "refusal": ""})]
    items += [ctx.chunks.chunk({"refusal": p})
              for p in split_text(args.get("text", DEFAULT_REFUSAL), _int(args, "n", 4))]
    items.append(ctx.chunks.chunk({}, "stop"))
    return Plan(items=items)


def s_length(ctx: Context, args: Args) -> Plan:
    """Text cut short: finish_reason length."""
    return Plan(items=_text_items(
        ctx, args.get("text", "This answer is cut"), _int(args, "n", 4), finish="length"))


def _error_body(message: str, type_: str, code: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": None, "code": code}}


def s_rate_limit(ctx: Context, args: Args) -> Plan:
    """HTTP 429, OpenAI-shaped body, retry_after=SECONDS header (default 1; "none" omits it),
    retry_after_ms=MS, retry_after_date=SECONDS (an HTTP date that far ahead), code=..."""
    headers: dict[str, str] = {}
    retry_after = args.get("retry_after", "1")
    if retry_after != "none":
        headers["retry-after"] = retry_after
    if "retry_after_ms" in args:
        headers["retry-after-ms"] = args["retry_after_ms"]
    if "retry_after_date" in args:
        headers["retry-after"] = formatdate(
            time.time() + float(args["retry_after_date"]), usegmt=True)
    message = args.get("message", "Rate limit reached for scripted-model on requests per min "
                       "(RPM): Limit 3, Used 3, Requested 1. Please try again in 1s.")
    body = _error_body(message, "requests", args.get("code", "rate_limit_exceeded"))
    return Plan(status=429, headers=headers, error=body)


def s_error(ctx: Context, args: Args) -> Plan:
    """HTTP status=N (default 500) with an OpenAI-shaped body (message=, type=, code=), or
    raw="text" for a non-JSON body."""
    status = _int(args, "status", 500)
    if "raw" in args:
        return Plan(status=status, error=args["raw"])
    default_type = "server_error" if status >= 500 else "invalid_request_error"
    message = args.get("message", "The server had an error while processing your request.")
    return Plan(status=status,
                error=_error_body(message, args.get("type", default_type), args.get("code")))


def s_drop(ctx: Context, args: Args) -> Plan:
    """after=N text deltas (default 3), then the socket is closed (clean=1: the HTTP body ends
    properly instead, still without finish_reason or [DONE])."""
    items = _text_items(ctx, args.get("text", DEFAULT_TEXT), _int(args, "n", 8))
    items = items[: 1 + _int(args, "after", 3)]
    items.append(EndBody() if args.get("clean") == "1" else Drop())
    return Plan(items=items, done=False)


def s_slow(ctx: Context, args: Args) -> Plan:
    """Text in n deltas (default 5) with delay=SECONDS (default 0.2) before each."""
    plan = s_text(ctx, {"n": "5", **args})
    plan.delay = _float(args, "delay", 0.2)
    return plan


def s_stall(ctx: Context, args: Args) -> Plan:
    """after=N deltas (default 2), then silence for seconds=S (default 5), then the rest."""
    items = _text_items(ctx, args.get("text", DEFAULT_TEXT), _int(args, "n", 4))
    after = 1 + _int(args, "after", 2)
    items.insert(after, Sleep(_float(args, "seconds", 5.0)))
    return Plan(items=items)


def s_keepalive(ctx: Context, args: Args) -> Plan:
    """after=N deltas (default 2), then only SSE comments every=S seconds (default 0.1) for
    seconds=T (default 30): never silent long enough for a read timeout; then the rest."""
    items = _text_items(ctx, args.get("text", DEFAULT_TEXT), _int(args, "n", 4))
    after = 1 + _int(args, "after", 2)
    every = _float(args, "every", 0.1)
    beats: list[Item] = []
    for _ in range(max(1, int(_float(args, "seconds", 30.0) / every))):
        beats += [Sleep(every), b": keep-alive\n\n"]
    items[after:after] = beats
    return Plan(items=items)


def s_malformed(ctx: Context, args: Args) -> Plan:
    """after=N deltas (default 2), a data: line that is not JSON, then the rest and [DONE].
    stream=false: a 200 whose body is not JSON."""
    items = _text_items(ctx, args.get("text", DEFAULT_TEXT), _int(args, "n", 4))
    items.insert(1 + _int(args, "after", 2), b'data: {"id": "chatcmpl-broken", "choices": [\n\n')
    return Plan(items=items, nonstream_body=b'{"id": "chatcmpl-broken", "choices": [')


def s_error_event(ctx: Context, args: Args) -> Plan:
    """after=N deltas (default 2), an ``event: error`` frame (message=, type=, code=), then the
    body ends (done=1 adds [DONE]). stream=false: a 200 whose body is the error object."""
    items = _text_items(ctx, args.get("text", DEFAULT_TEXT), _int(args, "n", 4))
    items = items[: 1 + _int(args, "after", 2)]
    error = _error_body(args.get("message", "The model produced invalid output."),
                        args.get("type", "server_error"), args.get("code", "model_error"))
    items.append(b"event: error\ndata: " + orjson.dumps(error) + b"\n\n")
    return Plan(items=items, done=args.get("done") == "1", nonstream_body=orjson.dumps(error))


def s_huge(ctx: Context, args: Args) -> Plan:
    """size=BYTES of text (default 4 MiB) in deltas of piece=BYTES (default 64 KiB);
    random=1: letters that do not compress (a deterministic pseudo-random sequence)."""
    size, piece = _int(args, "size", 4 * 1024 * 1024), _int(args, "piece", 64 * 1024)
    pattern = "0123456789abcdefghijklmnopqrstuvwxyz\n"
    text = (pattern * (size // len(pattern) + 1))[:size]
    if args.get("random"):  # random bytes mapped onto the 62 letters: ~10x random.choices
        text = random.Random(size).randbytes(size).translate(_LETTERS).decode("ascii")
    return Plan(items=_text_items(ctx, text, math.ceil(size / piece)))


#: each byte value to one of the 62 letters and digits (s_huge's text that does not compress)
_LETTERS = bytes((string.ascii_letters + string.digits).encode()[i % 62] for i in range(256))


def s_fixture(ctx: Context, args: Args) -> Plan:
    """file=NAME (or NAME in ``fixture:NAME``) from tests/fixtures/chat-streams/: ``.sse`` bodies
    replayed byte for byte, event by event; ``.jsonl`` chunks sent as data: frames + [DONE]."""
    path = FIXTURES_DIR / args["file"]
    raw = path.read_bytes()
    if path.suffix == ".jsonl":
        return Plan(items=[orjson.loads(line) for line in raw.splitlines() if line.strip()])
    normalised = raw.replace(b"\r\n", b"\n")
    events = [e + b"\n\n" for e in normalised.split(b"\n\n") if e.strip()]
    return Plan(items=list(events), done=False)


FACT = re.compile(r"FACT:[\w-]+")
STEP = re.compile(r"FACT:step(\d+)")


def context_facts(ctx: Context) -> list[str]:
    """Every ``FACT:...`` token in the request's messages, first seen first."""
    found: dict[str, None] = {}
    for message in ctx.messages:
        for fact in FACT.findall(message_text(message)):
            found[fact] = None
    return list(found)


def s_facts(ctx: Context, args: Args) -> Plan:
    """A model that remembers what it was told. With tools offered (and tool_choice not
    "none") it works through total=N steps, one call of the first tool per turn with
    {"step": K} (K: one past the highest ``FACT:stepK`` in its context); otherwise it answers
    "FACTS: " and every ``FACT:...`` token in its context, in order (the newest that fit
    ``max_completion_tokens``). Asked for a compaction summary, it so writes one that carries
    the facts on."""
    facts = context_facts(ctx)
    done = max((int(m[1]) for f in facts if (m := STEP.fullmatch(f))), default=0)
    tools = ctx.tool_names()
    if tools and ctx.body.get("tool_choice") != "none" and done < _int(args, "total", 0):
        step = orjson.dumps({"step": done + 1}).decode()
        return Plan(items=_call_items(ctx, [(tools[0], step)], _int(args, "n", 2)))
    limit = ctx.body.get("max_completion_tokens") or ctx.body.get("max_tokens")
    while limit and facts and scripted_tokens("FACTS: " + " ".join(facts)) > limit:
        facts = facts[1:]  # a limited answer keeps the newest (finish_reason stays "stop")
    return Plan(items=_text_items(ctx, "FACTS: " + " ".join(facts), _int(args, "n", 2)))


# -- token counting, as vLLM's and llama.cpp's own routes answer it ---------------------------

_TOKEN = re.compile(r"\w+|[^\w\s]")


def scripted_tokens(text: str) -> int:
    """This server's tokenizer: a word or a punctuation mark is a token."""
    return len(_TOKEN.findall(text))


def render_prompt(messages: list[Any]) -> str:
    """This server's chat template (what llama.cpp's /apply-template answers)."""
    out = []
    for message in messages:
        if not isinstance(message, dict):
            continue
        functions = [c.get("function") or {} for c in message.get("tool_calls") or []
                     if isinstance(c, dict)]
        calls = "".join(f" {f.get('name')}({f.get('arguments')})" for f in functions)
        out.append(f"<|{message.get('role')}|>\n{message_text(message)}{calls}\n")
    return "".join(out) + "<|assistant|>\n"


def prompt_count(body: dict[str, Any]) -> int:
    """The prompt tokens of a chat (or vLLM /tokenize) body: template, then tools."""
    count = scripted_tokens(render_prompt(body.get("messages") or []))
    if body.get("tools"):
        count += scripted_tokens(orjson.dumps(body["tools"]).decode())
    return count


SCRIPTS: dict[str, Callable[[Context, Args], Plan]] = {
    "text": s_text,
    "echo": s_echo,
    "deltas": s_deltas,
    "tool": s_tool,
    "steps": s_steps,
    "parallel": s_parallel,
    "call": s_call,
    "reasoning": s_reasoning,
    "refusal": s_refusal,
    "length": s_length,
    "rate_limit": s_rate_limit,
    "429": s_rate_limit,
    "error": s_error,
    "500": s_error,
    "drop": s_drop,
    "slow": s_slow,
    "stall": s_stall,
    "keepalive": s_keepalive,
    "malformed": s_malformed,
    "error_event": s_error_event,
    "huge": s_huge,
    "fixture": s_fixture,
    "facts": s_facts,
    # text with one framing argument preset (see _FRAMING_DEFAULTS)
    "crlf": s_text,
    "multiline": s_text,
    "comments": s_text,
}
_FRAMING_DEFAULTS = {"crlf": {"eol": "crlf"}, "multiline": {"multiline": "1"},
                     "comments": {"comments": "1"}}


def parse_directive(text: str) -> tuple[str, Args]:
    """``NAME k=v k2="v 2" flag`` -> (NAME, args). ``fixture:FILE`` -> ("fixture", file=FILE)."""
    tokens = shlex.split(text)
    if not tokens:
        return "text", {}
    name, args = tokens[0], {}
    for token in tokens[1:]:
        key, sep, value = token.partition("=")
        args[key] = value if sep else "1"
    if name.startswith("fixture:"):
        name, args["file"] = "fixture", name[len("fixture:"):]
    return name, args


def find_directive(body: dict[str, Any]) -> str | None:
    messages = body.get("messages") if isinstance(body.get("messages"), list) else []
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            match = DIRECTIVE.search(message_text(message))
            if match:
                return match.group(1).strip()
            break
    model = body.get("model")
    if isinstance(model, str) and model.startswith("script/"):
        return model[len("script/"):]
    for message in messages:
        if isinstance(message, dict) and message.get("role") in ("system", "developer"):
            match = DIRECTIVE.search(message_text(message))
            if match:
                return match.group(1).strip()
    return None


# -- aggregation (stream=false) ------------------------------------------------------------


def aggregate(chunks: list[dict[str, Any]], usage: dict[str, Any]) -> dict[str, Any]:
    """A chat.completion equal to what the chunks stream."""
    content: list[str] = []
    refusal: list[str] = []
    reasoning: dict[str, list[str]] = {}
    calls: dict[int, dict[str, Any]] = {}
    finish = None
    first = chunks[0] if chunks else {}
    for chunk in chunks:
        if chunk.get("usage"):
            usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if isinstance(delta.get("content"), str):
                content.append(delta["content"])
            if delta.get("refusal"):
                refusal.append(delta["refusal"])
            for key in ("reasoning_content", "reasoning"):
                if isinstance(delta.get(key), str):
                    reasoning.setdefault(key, []).append(delta[key])
            for call in delta.get("tool_calls") or []:
                slot = calls.setdefault(call.get("index", len(calls)), {
                    "id": "", "type": "function", "function": {"name": "", "arguments": ""}})
                slot["id"] = call.get("id") or slot["id"]
                fn = call.get("function") or {}
                slot["function"]["name"] += fn.get("name") or ""
                slot["function"]["arguments"] += fn.get("arguments") or ""
            finish = choice.get("finish_reason") or finish
    message: dict[str, Any] = {
        "role": "assistant",
        "content": "".join(content) or None,
        "refusal": "".join(refusal) or None,
    }
    for key, parts in reasoning.items():
        message[key] = "".join(parts)
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return {
        "id": first.get("id", "chatcmpl-scripted"),
        "object": "chat.completion",
        "created": first.get("created", int(time.time())),
        "model": first.get("model", "scripted"),
        "system_fingerprint": "fp_scripted",
        "choices": [{"index": 0, "message": message, "logprobs": None,
                     "finish_reason": finish or "stop"}],
        "usage": usage,
    }


def _chunk_tokens(chunk: dict[str, Any]) -> tuple[int, int]:
    """(output, reasoning) tokens one chunk counts: one per delta that carries text or a
    call fragment, one per delta that carries reasoning."""
    completion = reasoning = 0
    for choice in chunk.get("choices") or []:
        delta = choice.get("delta") or {}
        if delta.get("reasoning_content") or delta.get("reasoning"):
            reasoning += 1
        if delta.get("content") or delta.get("refusal") or delta.get("tool_calls"):
            completion += 1
    return completion, reasoning


def _capped(ctx: Context, items: list[Item], cap: int) -> list[Item]:
    """What a Chat Completions server sends under ``max_completion_tokens`` (``max_tokens``):
    it stops generating before the token past ``cap`` (reasoning included, as OpenAI counts
    them) and ends the choice with ``finish_reason: "length"``. The chunks it did not
    generate are left out; the rest of the plan (pauses, framing) stays."""
    spent = 0
    for n, item in enumerate(items):
        if isinstance(item, dict) and item.get("choices"):
            cost = sum(_chunk_tokens(item))
            if spent + cost > cap:
                rest = [i for i in items[n + 1:] if not (isinstance(i, dict) and i.get("choices"))]
                return [*items[:n], ctx.chunks.chunk({}, "length"), *rest]
            spent += cost
    return items


def _usage(ctx: Context, chunks: list[dict[str, Any]]) -> dict[str, Any]:
    completion = reasoning = 0
    for chunk in chunks:
        more, thought = _chunk_tokens(chunk)
        completion += more
        reasoning += thought
    prompt = ctx.prompt_tokens()
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion + reasoning,
        "total_tokens": prompt + completion + reasoning,
        "prompt_tokens_details": {"cached_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": reasoning},
    }


# -- the server ----------------------------------------------------------------------------


@dataclass
class StreamRecord:
    """One streaming response's connection, as the server saw it (monotonic times)."""

    script: str
    opened_at: float
    closed_at: float | None = None
    completed: bool = False  # everything the script meant to send was sent
    client_disconnected: bool = False  # the client went away first
    items_sent: int = 0


class _DropConnection(Exception):
    """Raised after headers so uvicorn closes the transport mid-body."""


class _QuietDrops(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, _DropConnection)


def _encode(chunk: dict[str, Any], plan: Plan, seq: int) -> bytes:
    eol = plan.eol
    data = orjson.dumps(chunk)
    if plan.multiline:
        # JSON allows a newline between tokens: split after the first comma.
        head, sep, tail = data.partition(b",")
        lines = [b"data: " + head + sep, b"data: " + tail] if sep else [b"data: " + data]
    else:
        lines = [b"data: " + data]
    if plan.comments:
        lines = [b": scripted keep-alive", b"id: " + str(seq).encode(), *lines]
    return eol.join(lines) + eol + eol


class ScriptedUpstream:
    """The server; a context manager. See the module docstring."""

    def __init__(
        self,
        *,
        api_key: str | None = None,
        host: str = "127.0.0.1",
        tls: tuple[str, str] | None = None,
        owned_by: str = "scripted",
        validate: Callable[[dict[str, Any]], tuple[int, Any] | None] | None = None,
        context_window: int | None = None,
        tokenizer: str | None = None,
    ) -> None:
        # Dialect tests: what GET /v1/models says owns the models (llama-server: "llamacpp"),
        # and a request check standing in for a real server's own (a status and error body
        # to answer with, None to go on with the script).
        self.owned_by = owned_by
        self.validate = validate
        # Context windows (issue 19): a window reported in GET /v1/models (vLLM's
        # max_model_len; llama.cpp's meta.n_ctx with tokenizer="llama.cpp") and enforced as
        # vLLM does (400 past it); tokenizer="vllm" / "llama.cpp" serves that server's
        # /tokenize (and /apply-template) at the root. tokenize_requests: what they were asked.
        self.context_window = context_window
        self.tokenizer = tokenizer
        self.tokenize_requests: list[tuple[str, Any]] = []
        self.api_key = api_key  # when set, requests without "Bearer <api_key>" get a 401
        self.host = host
        self.tls = tls  # (certificate file, key file): serve https
        self.port = 0
        self._lock = threading.Lock()
        self._requests: list[dict[str, Any]] = []
        self._headers: list[dict[str, str]] = []
        self._clients: list[tuple[str, int] | None] = []
        self._streams: list[StreamRecord] = []
        self._completions: list[StreamRecord] = []  # stream=false answers, likewise
        self._counters: dict[str, int] = {}
        self._active = 0
        self._idle = threading.Condition(self._lock)
        #: set each time a streaming response's connection closes (cleared by reset())
        self.stream_closed = threading.Event()
        #: when set to an Event, every stream=false answer (a compaction's summarising call)
        #: waits until it is set: a test holds the call while it reads the client's stream
        self.completions_gate: threading.Event | None = None
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.app = Starlette(routes=[
            Route("/v1/chat/completions", self._chat, methods=["POST"]),
            Route("/v1/models", self._models, methods=["GET"]),
            Route("/tokenize", self._tokenize, methods=["POST"]),
            Route("/apply-template", self._apply_template, methods=["POST"]),
        ])

    # -- public surface -------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}/v1"

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Every chat request body received, in arrival order (a copy)."""
        with self._lock:
            return list(self._requests)

    @property
    def request_headers(self) -> list[dict[str, str]]:
        """Headers of each request (lower-case names), parallel to ``requests``."""
        with self._lock:
            return list(self._headers)

    @property
    def request_clients(self) -> list[tuple[str, int] | None]:
        """(host, port) of the connection each request came on: shows connection reuse."""
        with self._lock:
            return list(self._clients)

    @property
    def streams(self) -> list[StreamRecord]:
        with self._lock:
            return list(self._streams)

    @property
    def completions(self) -> list[StreamRecord]:
        """Each ``stream=false`` answer's connection, as the server saw it (whether the client
        went away while the answer was delayed)."""
        with self._lock:
            return list(self._completions)

    @property
    def active_streams(self) -> int:
        with self._lock:
            return self._active

    def wait_streams_closed(self, timeout: float) -> bool:
        """Block until no streaming response is open; False on timeout."""
        with self._idle:
            return self._idle.wait_for(lambda: self._active == 0, timeout)

    def attempts(self, key: str) -> int:
        """How many requests a ``times=`` script with this key has seen."""
        with self._lock:
            return self._counters.get(key, 0)

    def reset(self) -> None:
        with self._lock:
            self._requests.clear()
            self._headers.clear()
            self._clients.clear()
            self._streams.clear()
            self._completions.clear()
            self._counters.clear()
            self.stream_closed.clear()
            self.completions_gate = None

    def start(self) -> ScriptedUpstream:
        # IPPROTO_TCP explicitly: only then does asyncio set TCP_NODELAY on accepted sockets.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, 0))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self.app, log_config=None, access_log=False, lifespan="off",
            timeout_graceful_shutdown=1, timeout_keep_alive=30,
            **({"ssl_certfile": self.tls[0], "ssl_keyfile": self.tls[1]} if self.tls else {}),
        )
        self._server = uvicorn.Server(config)
        logging.getLogger("uvicorn.error").addFilter(_QuietDrops())
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, daemon=True,
            name=f"scripted-upstream-{self.port}",
        )
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("scripted upstream did not start")
            time.sleep(0.005)
        self._sock = sock
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
            self._server.force_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        with contextlib.suppress(OSError):
            self._sock.close()
        self._server = self._thread = None

    def __enter__(self) -> ScriptedUpstream:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- handlers -------------------------------------------------------------------------

    async def _models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [
            {"id": name, "object": "model", "created": 0, "owned_by": self.owned_by,
             **self._window_fields()}
            for name in ("scripted", *(f"script/{s}" for s in SCRIPTS))
        ]})

    def _window_fields(self) -> dict[str, Any]:
        if self.context_window is None:
            return {}
        if self.tokenizer == "llama.cpp":
            return {"meta": {"n_ctx": self.context_window, "n_vocab": 32000}}
        return {"max_model_len": self.context_window}

    async def _tokenize(self, request: Request) -> Response:
        body = orjson.loads(await request.body())
        with self._lock:
            self.tokenize_requests.append(("tokenize", body))
        if self.tokenizer == "vllm" and isinstance(body.get("messages"), list):
            count = prompt_count(body)
            return JSONResponse({"count": count, "max_model_len": self.context_window or 4096,
                                 "tokens": list(range(count))})
        if self.tokenizer in ("vllm", "llama.cpp") and isinstance(body.get("content"), str):
            count = scripted_tokens(body["content"])
            return JSONResponse({"tokens": list(range(count)), "count": count})
        return JSONResponse({"detail": "Not Found"}, status_code=404)

    async def _apply_template(self, request: Request) -> Response:
        body = orjson.loads(await request.body())
        with self._lock:
            self.tokenize_requests.append(("apply-template", body))
        if self.tokenizer != "llama.cpp":
            return JSONResponse({"detail": "Not Found"}, status_code=404)
        return JSONResponse({"prompt": render_prompt(body.get("messages") or [])})

    def _over_window(self, body: dict[str, Any]) -> tuple[int, Any] | None:
        """vLLM's answer to a request past the context window, when one is set."""
        if self.context_window is None:
            return None
        prompt = prompt_count(body)
        limit = body.get("max_completion_tokens") or body.get("max_tokens") or 0
        if prompt + limit <= self.context_window:
            return None
        return 400, {"object": "error", "type": "BadRequestError", "param": None, "code": 400,
                     "message": f"This model's maximum context length is {self.context_window} "
                     f"tokens. However, you requested {prompt + limit} tokens ({prompt} in the "
                     f"messages, {limit} in the completion). Please reduce the length of the "
                     "messages or completion."}

    async def _chat(self, request: Request) -> Response:
        raw = await request.body()
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            body = None
        headers = {k.lower(): v for k, v in request.headers.items()}
        with self._lock:
            index = len(self._requests)
            if isinstance(body, dict):
                self._requests.append(body)
                self._headers.append(headers)
                self._clients.append(tuple(request.client) if request.client else None)
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return JSONResponse(_error_body(
                "We could not parse the JSON body of your request.", "invalid_request_error",
                None), status_code=400)
        if self.api_key and headers.get("authorization") != f"Bearer {self.api_key}":
            return JSONResponse(_error_body(
                "Incorrect API key provided.", "invalid_request_error", "invalid_api_key"),
                status_code=401)
        rejected = self.validate(body) if self.validate is not None else None
        rejected = rejected or self._over_window(body)
        if rejected is not None:
            return JSONResponse(rejected[1], status_code=rejected[0])
        directive = find_directive(body) or ""
        try:
            plan = self._plan(body, index, directive)
        except Exception as exc:  # a mistyped directive: say so instead of a bare 500
            plan = Plan(status=400, error=_error_body(
                f"bad script directive {directive!r}: {exc!r}", "invalid_request_error",
                "bad_script"))
        if plan.status != 200:
            if plan.first_delay:  # a slow refusal
                await asyncio.sleep(plan.first_delay)
            if isinstance(plan.error, str):
                return Response(plan.error, status_code=plan.status, headers=plan.headers,
                                media_type="text/html")
            return JSONResponse(plan.error, status_code=plan.status, headers=plan.headers)
        if body.get("stream"):
            record = StreamRecord(script=directive, opened_at=time.monotonic())
            with self._lock:
                self._streams.append(record)
                self._active += 1
            return _SSEResponse(self, plan, record)  # type: ignore[return-value]
        record = StreamRecord(script=directive, opened_at=time.monotonic())
        with self._lock:
            self._completions.append(record)
        return _CompletionResponse(plan, record, self.completions_gate)  # type: ignore[return-value]

    def _plan(self, body: dict[str, Any], index: int, directive: str) -> Plan:
        model = body.get("model") if isinstance(body.get("model"), str) else "scripted"
        ctx = Context(body, index, _Chunks(model, f"chatcmpl-scripted{index}", int(time.time())))
        name, args = parse_directive(directive) if directive else ("text", {})
        if not directive and ctx.tool_outputs():
            name = "tool_answer"
        if "times" in args:
            # Fail only the first K matching requests, then behave as then=NAME (default text).
            key = args.get("key", directive)
            with self._lock:
                seen = self._counters[key] = self._counters.get(key, 0) + 1
            if seen > int(args["times"]):
                name = args.get("then", "text")
        args = {**_FRAMING_DEFAULTS.get(name, {}), **args}
        script = _tool_answer if name == "tool_answer" else SCRIPTS.get(name)
        if script is None:
            return Plan(status=400, error=_error_body(
                f"unknown script {name!r}; known: {', '.join(SCRIPTS)}",
                "invalid_request_error", "unknown_script"))
        plan = script(ctx, args)
        # Generic framing and timing arguments, valid for every script.
        plan.delay = _float(args, "delay", plan.delay)
        plan.first_delay = _float(args, "first_delay", plan.first_delay)
        plan.eol = {"lf": b"\n", "crlf": b"\r\n", "cr": b"\r"}[args.get("eol", "lf")]
        plan.multiline = args.get("multiline") == "1" or plan.multiline
        plan.comments = args.get("comments") == "1" or plan.comments
        if args.get("done") == "0":
            plan.done = False
        cap = body.get("max_completion_tokens") or body.get("max_tokens")
        if isinstance(cap, int) and cap > 0 and name != "fixture":
            plan.items = _capped(ctx, plan.items, cap)
        chunks = [i for i in plan.items if isinstance(i, dict)]
        stream_options = body.get("stream_options")
        want_usage = isinstance(stream_options, dict) and stream_options.get("include_usage")
        plan.usage = _usage(ctx, chunks)  # once: a 500-chunk script's walk is not free
        if args.get("usage", "1" if want_usage else "0") == "1" and name != "fixture" and not any(
                isinstance(i, Drop | EndBody) for i in plan.items):
            insert_at = len(plan.items)
            if plan.items and isinstance(plan.items[-1], bytes) and not plan.done:
                insert_at -= 1
            plan.items.insert(insert_at, ctx.chunks.usage(plan.usage))
        return plan

    def _closed(self, record: StreamRecord, *, completed: bool, disconnected: bool) -> None:
        with self._idle:
            if record.closed_at is None:
                record.closed_at = time.monotonic()
                record.completed = completed
                record.client_disconnected = disconnected
                self._active -= 1
                self._idle.notify_all()
        self.stream_closed.set()


class _SSEResponse:
    """Streams a plan as SSE while watching for the client's disconnect (a raw ASGI app, so a
    disconnect is seen even while the script sleeps)."""

    def __init__(self, upstream: ScriptedUpstream, plan: Plan, record: StreamRecord) -> None:
        self.upstream, self.plan, self.record = upstream, plan, record

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        producer = asyncio.ensure_future(self._produce(send))
        watcher = asyncio.ensure_future(self._watch(receive))
        try:
            await asyncio.wait({producer, watcher}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            producer.cancel()
            watcher.cancel()
            self.upstream._closed(self.record, completed=False, disconnected=False)
            raise
        if producer.done():
            watcher.cancel()
            exc = producer.exception()
            self.upstream._closed(self.record, completed=exc is None, disconnected=False)
            if exc is not None:
                raise exc
        else:
            self.upstream._closed(self.record, completed=False, disconnected=True)
            producer.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await producer

    @staticmethod
    async def _watch(receive: Any) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass

    async def _produce(self, send: Any) -> None:
        plan, record = self.plan, self.record
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-cache"),
        ]})
        if plan.first_delay:
            await asyncio.sleep(plan.first_delay)
        seq = 0
        for item in plan.items:
            if plan.delay:
                await asyncio.sleep(plan.delay)
            if isinstance(item, dict):
                data = _encode(item, plan, seq)
                seq += 1
            elif isinstance(item, bytes):
                data = item
            elif isinstance(item, Sleep):
                await asyncio.sleep(item.seconds)
                continue
            elif isinstance(item, Drop):
                raise _DropConnection()
            else:  # EndBody
                break
            await send({"type": "http.response.body", "body": data, "more_body": True})
            record.items_sent += 1
            if not plan.delay:
                await asyncio.sleep(0)  # interleave concurrent streams, as a real server does
        else:
            if plan.done:
                await send({"type": "http.response.body",
                            "body": b"data: [DONE]" + plan.eol + plan.eol, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def _frame_chunks(frame: bytes) -> list[dict[str, Any]]:
    """The chunk in one raw SSE event of a replayed fixture (none for [DONE] or errors)."""
    lines = frame.replace(b"\r\n", b"\n").split(b"\n")
    if b"event: error" in lines:
        return []
    data = b"\n".join(line[5:].strip() for line in lines if line.startswith(b"data:"))
    if not data or data == b"[DONE]":
        return []
    try:
        chunk = orjson.loads(data)
    except orjson.JSONDecodeError:
        return []
    return [chunk] if isinstance(chunk, dict) and "choices" in chunk else []


class _CompletionResponse:
    """A stream=false answer: the plan's chunks aggregated into one chat.completion."""

    def __init__(self, plan: Plan, record: StreamRecord,
                 gate: threading.Event | None = None) -> None:
        self.plan, self.record, self.gate = plan, record, gate

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        plan, record = self.plan, self.record
        while self.gate is not None and not self.gate.is_set():  # held by the test
            await asyncio.sleep(0.01)
        pause = plan.first_delay + sum(i.seconds for i in plan.items if isinstance(i, Sleep))
        pause += plan.delay * len(plan.items)
        if pause:  # a client that leaves meanwhile is seen (and recorded) at once
            watcher = asyncio.ensure_future(_SSEResponse._watch(receive))
            await asyncio.wait({watcher}, timeout=pause)
            if watcher.done():
                record.closed_at, record.client_disconnected = time.monotonic(), True
                return
            watcher.cancel()
        record.closed_at, record.completed = time.monotonic(), True
        chunks: list[dict[str, Any]] = []
        for item in plan.items:
            if isinstance(item, dict):
                chunks.append(item)
            elif isinstance(item, bytes):
                chunks += _frame_chunks(item)
        if plan.nonstream_body is not None:
            body = plan.nonstream_body
        else:
            body = orjson.dumps(aggregate(chunks, plan.usage))
        dropped = any(isinstance(i, Drop | EndBody) for i in plan.items)
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ]})
        if dropped:
            await send({"type": "http.response.body", "body": body[: len(body) // 2],
                        "more_body": True})
            raise _DropConnection()
        await send({"type": "http.response.body", "body": body, "more_body": False})
