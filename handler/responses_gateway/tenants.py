"""Tenant ids and the names keys were given: what every record, log line and admin answer
shows of a key (never the key itself).

A tenant id is ``t_`` and the first 32 hex digits of the key's SHA-256 (api/auth.py derives it
per request; store records are kept under it). A key may also have a name, given in
``GATEWAY_API_KEYS``' JSON form (``{"team-a": "sk-…"}``, settings.ApiKeys): the admin routes,
the dashboard and the log lines show it beside the tenant id. A leaf (hashlib only), so the
store, observability and api layers all read one derivation.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

_names_cache: dict[int, tuple[Any, dict[str, str]]] = {}


def tenant_of_digest(digest: bytes) -> str:
    """A key's tenant id from its SHA-256 digest."""
    return "t_" + digest.hex()[:32]


def tenant_of_key(key: str) -> str:
    """A key's tenant id."""
    return tenant_of_digest(hashlib.sha256(key.encode()).digest())


def names_by_tenant(keys: Iterable[str]) -> dict[str, str]:
    """Each named key's name by its tenant id (``{}`` for keys given as a plain list).

    ``keys`` is ``settings.api_keys``: a settings.ApiKeys carries ``names`` (key to name); a
    plain tuple has none. Computed once per keys object (a digest per key)."""
    names: dict[str, str] = getattr(keys, "names", None) or {}
    if not names:
        return {}
    cached = _names_cache.get(id(keys))
    if cached is not None and cached[0] is keys:
        return cached[1]
    by_tenant = {tenant_of_key(key): name for key, name in names.items()}
    _names_cache[id(keys)] = (keys, by_tenant)
    return by_tenant
