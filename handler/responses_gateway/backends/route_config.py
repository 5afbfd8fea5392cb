"""``GATEWAY_ROUTES``: client model names, each served by an ordered list of deployments.

Pure parsing, no backend imported: config.py reads this at start so a broken route is a
one-line error then, not on the first request. backends/router.py runs what it describes.

The value is JSON, or the path of a file holding it::

    {"claude": [
        {"backend": "bedrock", "model": "us.anthropic.claude-sonnet-4-…", "region": "us-east-1"},
        {"backend": "bedrock", "model": "us.anthropic.claude-sonnet-4-…", "region": "us-west-2"},
        "openai:llama3.3"]}

or ``{"routes": {…}, "cooldown_after": 3, "cooldown_seconds": 30}``. A deployment is an
object or the shorthand ``"kind:model"``. What a deployment may carry beside ``backend`` and
``model`` (:data:`OPTIONS`) builds its own backend instance; a deployment with none of them
uses the backend ``GATEWAY_*`` configures. An API key is never written in the route: ``api_key``
names the variable that holds it (which may itself be a ``…_SECRET_ARN`` / ``…_PARAMETER``
reference, as for ``GATEWAY_UPSTREAM_API_KEY``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from responses_gateway.backends.kinds import KINDS

#: Options a deployment may set, by backend kind (both: either kind).
OPTIONS: dict[str, tuple[str, ...]] = {
    "openai": ("url", "api_key", "dialect"),
    "bedrock": ("region", "endpoint_url"),
    "*": ("connect_timeout", "read_timeout", "max_retries"),
}
_KEYS = frozenset({"backend", "model", "weight", "name"})
#: A deployment failing this many times in a row is skipped for the cool-down.
COOLDOWN_AFTER = 3
COOLDOWN_SECONDS = 30.0
_NAME = "GATEWAY_ROUTES"


@dataclass(frozen=True, slots=True)
class Deployment:
    """One place a routed model can be served: a backend kind, its model, its options."""

    name: str  # unique within its route; logs and the x-gateway-deployment header show it
    kind: str
    model: str
    weight: float | None = None  # None: no weight given (the list order decides)
    # What differs from the GATEWAY_* backend (OPTIONS), as (option, value) pairs, sorted.
    options: tuple[tuple[str, Any], ...] = ()
    api_key: str | None = field(default=None, repr=False)  # resolved from its variable

    @property
    def instance_key(self) -> str:
        """Deployments with the same kind and options share one backend instance."""
        return json.dumps([self.kind, self.options, bool(self.api_key)], default=str)

    def option(self, name: str) -> Any:
        return dict(self.options).get(name)


@dataclass(frozen=True, slots=True)
class Routes:
    """Every route, and when a failing deployment is skipped."""

    routes: Mapping[str, tuple[Deployment, ...]] = field(default_factory=dict)
    cooldown_after: int = COOLDOWN_AFTER
    cooldown_seconds: float = COOLDOWN_SECONDS

    def __bool__(self) -> bool:
        return bool(self.routes)


Secret = Callable[[str], "str | None"]


def parse_routes(text: str, *, default_kind: str, secret: Secret) -> Routes:
    """``GATEWAY_ROUTES`` (JSON, or a file holding it); ValueError names what is wrong.

    ``secret(variable)`` reads the variable an ``api_key`` names (or its reference)."""
    text = text.strip()
    if not text:
        return Routes()
    if not text.startswith("{"):
        try:
            with open(text, encoding="utf-8") as file:
                text = file.read()
        except OSError as exc:
            raise ValueError(f"{_NAME}: cannot read the file {text!r} ({exc.strerror})") from None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{_NAME} must be JSON (or a file of it): {exc}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{_NAME} must be a JSON object of model name -> deployments")
    after, seconds = COOLDOWN_AFTER, COOLDOWN_SECONDS
    if isinstance(value.get("routes"), dict):
        unknown = set(value) - {"routes", "cooldown_after", "cooldown_seconds"}
        if unknown:
            raise ValueError(f"{_NAME}: unknown key {sorted(unknown)[0]!r} beside 'routes'")
        after = _number(value.get("cooldown_after", after), "cooldown_after", integer=True,
                        minimum=1)
        seconds = _number(value.get("cooldown_seconds", seconds), "cooldown_seconds")
        value = value["routes"]
    routes: dict[str, tuple[Deployment, ...]] = {}
    for model, listed in value.items():
        if not isinstance(listed, list) or not listed:
            raise ValueError(f"{_NAME}: {model!r} must map to a non-empty list of deployments")
        deployments = tuple(_deployment(model, i, entry, default_kind, secret)
                            for i, entry in enumerate(listed))
        names = [d.name for d in deployments]
        duplicate = next((n for n in names if names.count(n) > 1), None)
        if duplicate is not None:
            raise ValueError(f"{_NAME}: {model!r} has two deployments named {duplicate!r}; "
                             "give them distinct \"name\"s")
        routes[model] = deployments
    return Routes(routes, cooldown_after=int(after), cooldown_seconds=float(seconds))


def _deployment(model: str, index: int, entry: Any, default_kind: str,
                secret: Secret) -> Deployment:
    label = f"{model!r}[{index}]"
    where = f"{_NAME}: {label}"
    if isinstance(entry, str):
        kind, sep, name = entry.partition(":")
        entry = {"backend": kind, "model": name} if sep and kind in KINDS else {"model": entry}
    if not isinstance(entry, dict):
        raise ValueError(f"{where} must be an object or \"kind:model\"")
    kind = entry.get("backend", default_kind)
    if kind not in KINDS:
        raise ValueError(f"{where}.backend must be one of {', '.join(map(repr, KINDS))}, "
                         f"not {kind!r}")
    target = entry.get("model")
    if not isinstance(target, str) or not target.strip():
        raise ValueError(f"{where}.model must be a non-empty string")
    allowed = set(OPTIONS[kind]) | set(OPTIONS["*"])
    options: dict[str, Any] = {}
    for key, option in entry.items():
        if key in _KEYS:
            continue
        if key not in allowed:
            raise ValueError(f"{where}: {key!r} is not an option of a {kind} deployment "
                             f"(options: {', '.join(sorted(allowed))})")
        options[key] = _option(label, key, option)
    weight = entry.get("weight")
    if weight is not None:
        weight = _number(weight, f"{label}.weight")
    api_key = None
    if "api_key" in options:
        api_key = secret(options["api_key"])
        if not api_key:
            raise ValueError(f"{where}.api_key names {options['api_key']!r}, which is not set")
    name = entry.get("name")
    if name is None:
        name = _default_name(kind, target.strip(), options)
    elif not isinstance(name, str) or not name.strip() or not name.isprintable():
        raise ValueError(f"{where}.name must be a non-empty printable string")
    return Deployment(name=name.strip(), kind=kind, model=target.strip(), weight=weight,
                      options=tuple(sorted(options.items())), api_key=api_key)


def _option(label: str, key: str, value: Any) -> Any:
    where = f"{_NAME}: {label}"
    if key in ("connect_timeout", "read_timeout"):
        return _number(value, f"{label}.{key}")
    if key == "max_retries":
        return int(_number(value, f"{label}.{key}", integer=True))
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where}.{key} must be a non-empty string")
    value = value.strip()
    if key in ("url", "endpoint_url"):
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{where}.{key} must be an http:// or https:// URL")
        value = value.rstrip("/")
    if key == "dialect" and value.lower() != "auto":
        from responses_gateway.backends.dialects import dialect_named

        try:
            dialect_named(value)
        except ValueError as exc:
            raise ValueError(f"{where}.dialect must {str(exc).partition(' must ')[2]}") from None
    return value


def _number(value: Any, what: str, *, integer: bool = False, minimum: float = 0) -> float:
    ok = isinstance(value, int) if integer else isinstance(value, (int, float))
    if not ok or isinstance(value, bool) or value < minimum or value != value:
        kind = "a whole number" if integer else "a number"
        raise ValueError(f"{_NAME}: {what} must be {kind} ({minimum:g} or more), not {value!r}")
    return value


def _default_name(kind: str, model: str, options: Mapping[str, Any]) -> str:
    """``bedrock:model@us-west-2``, ``openai:model@host:port``: no path, no credentials."""
    name = f"{kind}:{model}"
    url = options.get("url") or options.get("endpoint_url")
    if options.get("region"):
        name += f"@{options['region']}"
    elif url:
        parts = urlsplit(url)
        name += f"@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    return name
