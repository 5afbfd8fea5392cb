"""Sealed reasoning: what a backend needs back next turn, carried by the client.

Reasoning signatures and redacted blocks must return to the model verbatim on the next turn,
also with ``store=false``, so they travel in the reasoning item's ``encrypted_content``.
AES-GCM authenticates them and binds them to the tenant (associated data), so a client can
neither forge a blob nor replay another tenant's. The cipher (the ``cryptography`` package,
a few milliseconds to import) is built on first use, not with the gateway's services at start;
the key is fixed when the sealer is made.
"""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from responses_gateway.errors import invalid_request

_VERSION = b"rg1"


class Sealer:
    def __init__(self, key: bytes) -> None:
        self._key = hashlib.sha256(key).digest()
        self._cipher: Any = None

    @property
    def _aead(self) -> Any:
        """The AES-GCM cipher, built on first use."""
        if self._cipher is None:
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM

            self._cipher = AESGCM(self._key)
        return self._cipher

    def ready(self) -> None:
        """Build the cipher now (api/warm_start.py: in Lambda's init, before a request)."""
        self._aead  # noqa: B018 (built on first read)

    @classmethod
    def from_secret(cls, secret: str | None) -> Sealer:
        """A sealer from configuration; without one, a per-process key (blobs die with it)."""
        return cls(secret.encode() if secret else os.urandom(32))

    def seal(self, payload: dict[str, Any], tenant: str) -> str:
        nonce = os.urandom(12)
        sealed = self._aead.encrypt(nonce, orjson.dumps(payload), _VERSION + tenant.encode())
        return _b64(_VERSION + nonce + sealed)

    def unseal(self, blob: str, tenant: str, param: str | None = None) -> dict[str, Any]:
        from cryptography.exceptions import InvalidTag

        try:
            raw = base64.urlsafe_b64decode(blob.encode() + b"=" * (-len(blob) % 4))
            if not raw.startswith(_VERSION):
                raise ValueError("unknown format")
            plain = self._aead.decrypt(raw[3:15], raw[15:], _VERSION + tenant.encode())
            value = orjson.loads(plain)
        except (InvalidTag, ValueError, TypeError, orjson.JSONDecodeError) as exc:
            raise invalid_request(
                "The encrypted content of a reasoning item could not be verified; it was not "
                "produced by this gateway for this API key, or it was modified.",
                param=param,
                code="invalid_encrypted_content",
            ) from exc
        if not isinstance(value, dict):
            raise invalid_request("Malformed encrypted content.", param=param)
        return value


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def with_sealed_reasoning(
    items: Iterable[dict[str, Any]], sealed: Mapping[str, str]
) -> list[dict[str, Any]]:
    """Output items as they go back upstream or into a conversation: a reasoning item gets
    its sealed blob (``sealed``: item id to blob), which its output copy lacks unless the
    client asked for ``reasoning.encrypted_content``."""
    return [
        dict(item, encrypted_content=sealed[item["id"]])
        if item.get("type") == "reasoning" and item.get("id") in sealed
        and "encrypted_content" not in item
        else item
        for item in items
    ]
