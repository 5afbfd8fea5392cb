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

OPEN_TENANT = "default"


class Authenticator:
    def __init__(self, keys: tuple[str, ...] | list[str]) -> None:
        self._digests = [hashlib.sha256(key.encode()).digest() for key in keys]

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
        match = False
        for known in self._digests:  # no early exit: the time does not depend on which key
            match |= hmac.compare_digest(digest, known)
        if not match:
            raise GatewayError(
                401,
                "Incorrect API key provided. You can find your API key in your gateway's "
                "configuration (GATEWAY_API_KEYS).",
                type="invalid_request_error",
                code="invalid_api_key",
            )
        return "t_" + digest.hex()[:32]
