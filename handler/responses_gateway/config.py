"""Configuration, read once from environment variables (declared in settings.py, listed in the
README's configuration table, which is generated from them).

Secrets (upstream key, gateway API keys, ...) may be given directly or, in AWS, by reference to
Secrets Manager / SSM (``*_SECRET_ARN`` / ``*_PARAMETER``): every setting declared
``secret=True`` may (see :mod:`responses_gateway.secrets`).

The settings object itself is settings.py (a leaf every layer may import), and each of its
fields declares its variable, default and format. This module reads them from the
environment, one loop over the declarations, and checks each value with its format: the
generic ones (numbers, switches, lists) and each feature's own (routes, limits, Knowledge
Bases, search providers, image backends), so it sits above those features and imports their
parsers lazily, only when their variable is set. A ``GATEWAY_*`` variable that is no setting
is kept, with the closest setting's name, for the start line's warning.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

import orjson

from responses_gateway.backends.kinds import KINDS as BACKEND_KINDS
from responses_gateway.settings import LOG_LEVELS, ApiKeys, Route, Setting, Settings, declared

__all__ = ["LOG_LEVELS", "Route", "Settings", "SettingsError", "settings_from_env"]

if TYPE_CHECKING:
    from responses_gateway.backends.route_config import Routes
    from responses_gateway.key_limits import Limits
    from responses_gateway.prices import Prices
    from responses_gateway.vectors.knowledge_bases import KnowledgeBase

T = TypeVar("T", int, float)
PREFIX = "GATEWAY_"
#: ``GATEWAY_*`` variables read outside the settings, so never "unknown".
OTHER_VARIABLES = frozenset({
    "GATEWAY_TEST_IMAGE_ALLOW_HOSTS",  # tests only: backends/bedrock/images.py
})


class SettingsError(ValueError):
    """A setting that cannot be used. Its message is one line that names the variable and
    what it accepts: ``responses-gateway serve`` prints it and exits with status 2."""


def settings_from_env(env: Mapping[str, str] | None = None) -> Settings:
    """Every setting read from ``env`` (default: the environment) and checked."""
    reading = Reading(os.environ if env is None else env)
    values = {name: reading.value(name) for name in _specs()}
    return Settings(**values, unknown_variables=reading.unknown())


class Reading:
    """One read of the environment: each setting parsed once, on demand, so a format may ask
    for another setting's value (routes need the default backend) whatever their order."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = env
        self._values: dict[str, Any] = {}
        self._secrets: set[str] = set()  # variables read as secrets (route api_key names too)
        self._failed: list[ValueError] = []  # errors already final: one setting's, as raised

    def get(self, name: str) -> str | None:
        """The variable's value; unset and empty are both None."""
        value = self.env.get(name)
        return value if value not in (None, "") else None

    def secret(self, name: str) -> str | None:
        """The variable, else the Secrets Manager / SSM value it references (AWS)."""
        self._secrets.add(name)
        value = self.get(name)
        if value is None and (self.get(name + "_SECRET_ARN") or self.get(name + "_PARAMETER")):
            from responses_gateway.secrets import resolve

            value = resolve(name, self.env)
        return value

    def value(self, name: str) -> Any:
        """Setting ``name`` (a field of Settings), parsed and checked."""
        if name not in self._values:
            spec = _specs()[name]
            setting = spec.setting
            try:
                # A secret's reference fails with its own error (secrets.SecretError),
                # outside the format's: it names the reference, not the setting.
                text = self.secret(spec.env) if setting.secret else self.get(spec.env)
                self._values[name] = _parsed(spec.env, FORMATS[setting.parse], text, spec, self)
            except ValueError as exc:  # as it is, also through a format that asked for it
                self._failed.append(exc)
                raise
        return self._values[name]

    def failed(self, exc: ValueError) -> bool:
        """Whether ``exc`` is a setting's own error, already as it should be raised."""
        return any(exc is failed for failed in self._failed)

    def unknown(self) -> tuple[tuple[str, str | None], ...]:
        """The ``GATEWAY_*`` variables no setting reads, each with the closest one's name."""
        specs = [spec.setting for spec in _specs().values()]
        known = {s.env for s in specs} | OTHER_VARIABLES
        for name in self._secrets | {s.env for s in specs if s.secret}:
            known |= {name, name + "_SECRET_ARN", name + "_PARAMETER"}
        unknown = sorted(k for k in self.env if k.startswith(PREFIX) and k not in known)
        if not unknown:
            return ()
        from difflib import get_close_matches

        # compared without the prefix, which every name shares
        names = {n.removeprefix(PREFIX): n for n in known - OTHER_VARIABLES}
        return tuple((k, next((names[m] for m in get_close_matches(
            k.removeprefix(PREFIX), names, n=1, cutoff=0.6)), None)) for k in unknown)


class _Spec:
    """What a format needs of the setting it reads: its variable, default and declaration."""

    __slots__ = ("env", "name", "setting")

    def __init__(self, name: str, setting: Setting) -> None:
        self.name, self.setting, self.env = name, setting, setting.env

    @property
    def default(self) -> Any:
        """The field's default (a fresh copy of a dict one)."""
        default = self.setting.default
        return default.copy() if isinstance(default, dict) else default


_SPECS: dict[str, _Spec] = {}


def _specs() -> dict[str, _Spec]:
    """Every declared setting by field name, in declaration order (read once per process)."""
    if not _SPECS:
        _SPECS.update((name, _Spec(name, s)) for name, s in declared().items())
    return _SPECS


Format = Callable[[str | None, _Spec, Reading], Any]


def _parsed(name: str, parse: Format, text: str | None, spec: _Spec, reading: Reading) -> Any:
    """``parse(text)``, its ValueError made a one-line :class:`SettingsError` naming ``name``,
    and raised to the setting's floor."""
    try:
        value = parse(text, spec, reading)
    except ValueError as exc:
        if isinstance(exc, SettingsError) or reading.failed(exc):
            raise
        reason = " ".join(str(exc).split())
        raise SettingsError(reason if reason.startswith(name) else f"{name}: {reason}") from None
    floor = spec.setting.floor
    return value if floor is None or value is None else max(floor, value)


# -- the generic formats ----------------------------------------------------------------------

_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def _text(text: str | None, spec: _Spec, reading: Reading) -> Any:
    return spec.default if text is None else text


def _number(kind: type[T], what: str) -> Format:
    """A non-negative number; unset or empty is the default."""
    def parse(text: str | None, spec: _Spec, reading: Reading) -> T | None:
        if text is None:
            return spec.default
        try:
            value = kind(text.strip())
        except ValueError:
            value = None
        if value is None or value < 0 or value != value:  # (NaN)
            raise SettingsError(f"{spec.env} must be {what} (0 or more), not {text!r}")
        return value
    return parse


def _switch(text: str | None, spec: _Spec, reading: Reading) -> bool:
    value = (text or "false").strip().lower()
    if value not in _TRUE + _FALSE:
        raise SettingsError(f"{spec.env} must be true or false, not {text!r}")
    return value in _TRUE


def _choice(text: str | None, spec: _Spec, reading: Reading) -> str | None:
    """One of the setting's choices (any case); unset is the default."""
    if text is None:
        return spec.default
    allowed = spec.setting.choices
    if text.strip().lower() not in allowed:
        accepts = ", ".join(allowed) if len(allowed) > 1 else f"{allowed[0]} (or unset)"
        raise SettingsError(f"{spec.env} must be {'one of ' * (len(allowed) > 1)}{accepts}, "
                            f"not {text!r}")
    return text.strip().lower()


def _names(text: str | None, spec: _Spec, reading: Reading) -> tuple[str, ...]:
    """A comma-separated list, blanks dropped."""
    return tuple(n.strip() for n in (text or "").split(",") if n.strip())


def _url(text: str | None, spec: _Spec, reading: Reading) -> str | None:
    """An http(s) URL with a host (a URL without a scheme fails every request later)."""
    if text is None and spec.default is None:
        return None
    url = (text or spec.default).strip().rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        from responses_gateway.net.policy import shown_url

        raise SettingsError(
            f"{spec.env} must be an http:// or https:// URL including the path up to "
            f"/chat/completions (like http://127.0.0.1:11434/v1), not {shown_url(url)!r}")
    return url


def _http_url(text: str | None, spec: _Spec, reading: Reading) -> str | None:
    """An http(s) URL with a host, or unset."""
    url = (text or "").strip().rstrip("/")
    parts = urlsplit(url)
    if url and (parts.scheme not in ("http", "https") or not parts.hostname):
        raise ValueError(f"must be an http:// or https:// URL (like http://127.0.0.1:8000/v1), "
                         f"not {url!r}")
    return url or None


# -- the formats of one setting or feature ----------------------------------------------------


def _backend(text: str | None, spec: _Spec, reading: Reading) -> str:
    backend = (text or spec.default).lower()
    if backend not in BACKEND_KINDS:
        raise ValueError(f"{spec.env} must be one of {', '.join(map(repr, BACKEND_KINDS))}"
                         f", not {backend!r}")
    return backend


def _dialect(text: str | None, spec: _Spec, reading: Reading) -> str:
    """``auto`` or a known dialect name (a typo fails at startup, not on the first request)."""
    name = (text or spec.default).strip().lower()
    if name != "auto":
        from responses_gateway.backends.dialects import dialect_named

        dialect_named(name)
    return name


def _model_map(text: str | None, spec: _Spec, reading: Reading) -> dict[str, str]:
    return parse_model_map(text or "")


def _windows(text: str | None, spec: _Spec, reading: Reading) -> dict[str, int]:
    return parse_windows(text or "")


def _routes(text: str | None, spec: _Spec, reading: Reading) -> Routes | None:
    """``GATEWAY_ROUTES`` parsed (backends/route_config.py), or None when unset. A
    deployment's ``api_key`` names a variable, read as a secret."""
    if not (text or "").strip():
        return None
    from responses_gateway.backends.route_config import parse_routes

    return parse_routes(text or "", default_kind=reading.value("backend"),
                        secret=reading.secret) or None


def _bedrock_region(text: str | None, spec: _Spec, reading: Reading) -> str | None:
    return text or reading.get("AWS_REGION")


def _store(text: str | None, spec: _Spec, reading: Reading) -> str:
    """A platform's form (platform/: ``PLATFORMS``)."""
    from responses_gateway.platform import declared as platform_declared

    text = text or spec.default
    try:
        platform_declared(text)
    except ValueError as exc:
        raise SettingsError(str(exc)) from None
    return text.strip()


#: what a key's name may be (GATEWAY_API_KEYS' JSON form): short, printable, no separator a
#: log line or the dashboard would trip on (compiled, by ``re``'s cache, when a key is named)
_KEY_NAME = r"[A-Za-z0-9][A-Za-z0-9._@ -]{0,63}"
_MIN_NAMED_KEY = 16
_NAME_RULE = ("1 to 64 letters, digits, '.', '_', '@', '-' or spaces, starting with a letter or "
              "digit")


def _api_keys(text: str | None, spec: _Spec, reading: Reading) -> ApiKeys:
    """The tenants' keys: a comma-separated list, or a JSON object naming each key
    (``{"team-a": "sk-…"}``). Errors name a position, never a key nor a name (a name and
    key swapped would put the key where the name goes)."""
    text = (text or "").strip()
    if text.startswith("["):
        raise SettingsError(f"{spec.env}: a JSON array is not accepted; give a JSON object "
                            '{"name": "key", ...} or a comma-separated list of keys')
    if not text.startswith("{"):
        return ApiKeys(_names(text, spec, reading))
    import json

    def pairs(items: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
        return items  # kept as a list: a name given twice is an error, not the last one

    try:
        document = json.loads(text, object_pairs_hook=pairs)
    except json.JSONDecodeError as exc:
        raise SettingsError(f"{spec.env}: not valid JSON ({exc.msg} at line {exc.lineno} "
                            f"column {exc.colno}); give a JSON object "
                            '{"name": "key", ...} or a comma-separated list of keys') from None
    if not isinstance(document, list) or not document:
        raise SettingsError(f"{spec.env}: the JSON form must be an object naming at least one "
                            'key, {"name": "key", ...}')
    named: dict[str, str] = {}
    seen: dict[str, int] = {}
    for n, (name, key) in enumerate(document, 1):
        where = f"the {_ordinal(n)} entry"
        if not re.fullmatch(_KEY_NAME, name):
            raise SettingsError(f"{spec.env}: the name of {where} is not a name ({_NAME_RULE})")
        if name in named:
            raise SettingsError(f"{spec.env}: the name of {where} is given twice")
        if not isinstance(key, str) or not key.strip() or key != key.strip():
            raise SettingsError(f"{spec.env}: the key of {where} must be a "
                                "non-empty string without surrounding spaces")
        if len(key) < _MIN_NAMED_KEY:
            # also what a name and key given the wrong way round look like: the name, shown
            # everywhere, would be the key
            raise SettingsError(
                f"{spec.env}: the key of {where} is shorter than "
                f"{_MIN_NAMED_KEY} characters; the JSON form is {{\"name\": \"key\"}}")
        if key in seen:
            raise SettingsError(f"{spec.env}: {where} has the same key as the "
                                f"{_ordinal(seen[key])}; each key is one tenant")
        seen[key] = n
        named[name] = key
    return ApiKeys.named(named)


def _admin_keys(text: str | None, spec: _Spec, reading: Reading) -> tuple[str, ...]:
    """The admin keys. One also a tenant's key is refused here: the admin routes take no
    tenant key (api/auth.py), so it would silently turn them off for that key (and for all
    of them when every admin key is shared). The error names the position, never the key."""
    admin_keys, api_keys = _names(text, spec, reading), reading.value("api_keys")
    shared = [n for n, key in enumerate(admin_keys, 1) if key in api_keys]
    if shared:
        which = ", ".join(_ordinal(n) for n in shared)
        raise SettingsError(
            f"{spec.env} and GATEWAY_API_KEYS share a key (the {which} of "
            f"{spec.env}): an admin key must not be an API key, or the admin routes "
            "refuse it; give the admin routes keys of their own")
    return admin_keys


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _limits(text: str | None, spec: _Spec, reading: Reading) -> Limits | None:
    """GATEWAY_LIMITS (key_limits.py, imported only when it is set)."""
    if text is None:
        return None
    from responses_gateway.key_limits import parse_limits

    return parse_limits(text)


def _prices(text: str | None, spec: _Spec, reading: Reading) -> Prices | None:
    """GATEWAY_PRICES (prices.py, imported only when it is set)."""
    if text is None:
        return None
    from responses_gateway.prices import parse_prices

    return parse_prices(text)


def _hosted_tools(text: str | None, spec: _Spec, reading: Reading) -> str:
    if text is None:
        return spec.default
    from responses_gateway.tools.hosted import policy_named

    return policy_named(text)


def _image_backend(text: str | None, spec: _Spec, reading: Reading) -> str | None:
    """``bedrock`` or ``openai`` (tools/image_generation/backends/), or None: unset. With
    DynamoDB the images need an S3 bucket (a DynamoDB item holds 400 KB)."""
    if text is None:
        return None
    from responses_gateway.tools.image_generation.backends import KINDS as IMAGE_KINDS

    name = text.strip().lower()
    if name not in IMAGE_KINDS:
        raise SettingsError(f"{spec.env} must be one of {', '.join(IMAGE_KINDS)} "
                            f"(or unset), not {name!r}")
    from responses_gateway.platform import declared as platform_declared

    platform = platform_declared(reading.value("store"))
    if platform.needs_image_bucket and not reading.value("image_bucket"):
        raise SettingsError("GATEWAY_IMAGE_BUCKET must name an S3 bucket for generated images "
                            f"when {spec.env} is set and GATEWAY_STORE is "
                            f"{platform.form.partition(':')[0]}")
    return name


def _web_search_url(text: str | None, spec: _Spec, reading: Reading) -> str | None:
    if text is None:
        return None
    from responses_gateway.tools.web_search.providers import provider_url

    return provider_url(text) or None


def _web_search_provider(text: str | None, spec: _Spec, reading: Reading) -> str | None:
    """The search provider; one lacking what it needs (SearXNG its URL, the others their key)
    refused here, naming the variable, not on every search."""
    if text is None:
        return None
    from responses_gateway.tools.web_search.providers import provider_lacks, provider_named

    url, key = reading.value("web_search_url"), reading.value("web_search_api_key")
    name = provider_named(text)
    lacks = provider_lacks(name, url, key)
    if lacks is not None:
        raise SettingsError(lacks)
    return name


def _embedding_model(text: str | None, spec: _Spec, reading: Reading) -> str:
    """The embedding model; on Bedrock (Titan Text Embeddings v2 by default) one whose request
    shape the gateway speaks (vectors/bedrock_embeddings.py)."""
    if reading.value("embedding_backend") != "bedrock":
        return text or spec.default
    from responses_gateway.vectors.bedrock_embeddings import FAMILIES, family_of

    model = text or "amazon.titan-embed-text-v2:0"
    if family_of(model) is None:
        raise SettingsError(f"{spec.env} must be a Bedrock embedding model of "
                            f"{' or '.join(FAMILIES)} when GATEWAY_EMBEDDING_BACKEND is "
                            f"bedrock, not {model!r}")
    return model


def _knowledge_bases(text: str | None, spec: _Spec,
                     reading: Reading) -> dict[str, KnowledgeBase]:
    """GATEWAY_KNOWLEDGE_BASES (vectors/knowledge_bases.py, imported only when it is set)."""
    if text is None or text == "{}":
        return {}
    from responses_gateway.vectors.knowledge_bases import parse_knowledge_bases

    return parse_knowledge_bases(text)


#: Each declared ``parse=`` name's parser: ``(text or None, the setting, the reading)``.
FORMATS: dict[str, Format] = {
    "text": _text,
    "seconds": _number(float, "a number of seconds"),
    "count": _number(int, "a whole number"),
    "switch": _switch,
    "choice": _choice,
    "names": _names,
    "api_keys": _api_keys,
    "url": _url,
    "http_url": _http_url,
    "backend": _backend,
    "dialect": _dialect,
    "model_map": _model_map,
    "context_windows": _windows,
    "routes": _routes,
    "bedrock_region": _bedrock_region,
    "store": _store,
    "admin_keys": _admin_keys,
    "limits": _limits,
    "prices": _prices,
    "hosted_tools": _hosted_tools,
    "image_backend": _image_backend,
    "web_search_url": _web_search_url,
    "web_search_provider": _web_search_provider,
    "embedding_model": _embedding_model,
    "knowledge_bases": _knowledge_bases,
}


def parse_windows(text: str) -> dict[str, int]:
    """``GATEWAY_CONTEXT_WINDOWS``: ``model=tokens,...`` (a model name may hold ``=`` only
    before the last one)."""
    windows: dict[str, int] = {}
    for part in text.split(","):
        if not part.strip():
            continue
        name, sep, value = part.strip().rpartition("=")
        if not sep or not name.strip() or not value.strip().isdigit() or int(value) < 1:
            raise ValueError(
                f"GATEWAY_CONTEXT_WINDOWS: {part.strip()!r} is not model=tokens (a positive "
                "integer)")
        windows[name.strip()] = int(value)
    return windows


def parse_model_map(text: str) -> dict[str, str]:
    """``{"a": "b"}`` JSON, or ``a=b,c=d``."""
    text = text.strip()
    if not text:
        return {}
    accepts = 'a JSON object ({"fast": "llama3.2"}) or name=model,name=model'
    if text.startswith("{"):
        try:
            value = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"GATEWAY_MODEL_MAP must be {accepts}: invalid JSON ({exc})") from None
        if not isinstance(value, dict):
            raise ValueError(f"GATEWAY_MODEL_MAP must be {accepts}")
        return {str(k): str(v) for k, v in value.items()}
    mapped: dict[str, str] = {}
    for part in filter(str.strip, text.split(",")):
        name, sep, target = part.partition("=")
        if not sep or not name.strip() or not target.strip():
            raise ValueError(f"GATEWAY_MODEL_MAP must be {accepts}; {part.strip()!r} is not "
                             "name=model")
        mapped[name.strip()] = target.strip()
    return mapped
