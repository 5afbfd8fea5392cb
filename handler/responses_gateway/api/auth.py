"""Bearer API keys and tenants.

Keys are kept only as SHA-256 digests and compared in constant time. A tenant is derived from
the digest of the key that made a request, so every stored record belongs to one key and another
key sees a 404. Without configured keys the gateway is open (local use) and the tenant is
``default``.
"""

from __future__ import annotations

import hashlib
import hmac

from responses_gateway.errors import GatewayError
from responses_gateway.tenants import names_by_tenant, tenant_of_digest

__all__ = ["OPEN_TENANT", "Authenticator", "tenant_of_digest"]

OPEN_TENANT = "default"


class Authenticator:
    def __init__(self, keys: tuple[str, ...] | list[str],
                 admin_keys: tuple[str, ...] | list[str] = ()) -> None:
        self._digests = [hashlib.sha256(key.encode()).digest() for key in keys]
        #: the names keys were given (GATEWAY_API_KEYS' JSON form), by tenant id
        self.names: dict[str, str] = names_by_tenant(keys)
        # Admin keys (GATEWAY_ADMIN_KEYS) open the admin routes only; a tenant key never does.
        self._admin = [hashlib.sha256(key.encode()).digest() for key in admin_keys
                       if key not in keys]
        # config.py refuses shared keys at start; settings built otherwise are told apart here.
        self._admin_all_shared = bool(admin_keys) and not self._admin

    def tenant(self, authorization: str | None) -> str:
        """The tenant for an ``Authorization`` header, or a 401 GatewayError."""
        if not self._digests:
            return OPEN_TENANT
        scheme, _, key = (authorization or "").partition(" ")
        key = key.strip()
        if scheme.lower() != "bearer" or not key:
            raise GatewayError(
                401,
                "You didn't provide an API key. You need to provide your API key in an "
                "Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
                type="invalid_request_error",
                code=None,
            )
        digest = hashlib.sha256(key.encode()).digest()
        if not _known(digest, self._digests):
            raise GatewayError(
                401,
                "Incorrect API key provided. You can find your API key in your gateway's "
                "configuration (GATEWAY_API_KEYS).",
                type="invalid_request_error",
                code="invalid_api_key",
            )
        return tenant_of_digest(digest)

    def admin(self, authorization: str | None) -> None:
        """Pass an admin key; a 401 without a known key, a 403 for a tenant key (or when no
        admin key is configured: the admin routes are off)."""
        if not self._admin:
            raise GatewayError(
                403, "The admin routes are off: every key in GATEWAY_ADMIN_KEYS is also in "
                "GATEWAY_API_KEYS, and a tenant's key never opens them; give them keys of "
                "their own." if self._admin_all_shared else
                "The admin routes are off: set GATEWAY_ADMIN_KEYS to turn them on.",
                type="invalid_request_error", code="admin_disabled",
            )
        scheme, _, key = (authorization or "").partition(" ")
        key = key.strip()
        if scheme.lower() != "bearer" or not key:
            raise GatewayError(401, "You didn't provide an admin key in an Authorization "
                               "header using Bearer auth.", type="invalid_request_error")
        digest = hashlib.sha256(key.encode()).digest()
        if _known(digest, self._admin):
            return
        if _known(digest, self._digests):
            raise GatewayError(
                403, "You have insufficient permissions for this operation: it needs an admin "
                "key (GATEWAY_ADMIN_KEYS), not an API key.",
                type="invalid_request_error", code="insufficient_permissions",
            )
        raise GatewayError(401, "Incorrect admin key provided.",
                           type="invalid_request_error", code="invalid_api_key")


def _known(digest: bytes, digests: list[bytes]) -> bool:
    match = False
    for known in digests:  # no early exit: the time does not depend on which key
        match |= hmac.compare_digest(digest, known)
    return match
