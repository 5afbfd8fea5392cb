"""Secrets out of text that came from an upstream, before a client, a record or a log sees it.

Upstreams echo credentials in their error messages ("Incorrect API key provided: sk-…",
"Invalid header: Bearer …"). Every upstream message the gateway passes on goes through
:func:`redact`: the secrets the gateway itself holds are replaced wherever they appear, and
anything shaped like a bearer token or a provider API key is replaced even when the gateway
does not know it (a proxy's own key, a masked echo such as ``sk-proj-****wxyz``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

REDACTED = "[redacted]"

# A bearer or basic credential, a `key=value` style secret (the label is kept so the message
# still says what was wrong), and provider key shapes: OpenAI sk-/sk-proj-, Anthropic sk-ant-,
# OpenRouter sk-or-, Groq gsk_, xAI xai-, rk_/pk_ keys, masked echoes included.
_PATTERN = re.compile(
    r"(?P<label>(?i:\b(?:bearer|basic)\s+)"
    r"|(?i:\b(?:api[-_ ]?key|access[-_ ]?token|secret|password)\b\s*[=:]\s*))[^\s\"',;]{4,}"
    r"|\b(?:sk|gsk|xai|rk|pk)[-_][A-Za-z0-9_\-*.]{6,}",
)


def redact(text: str, secrets: Iterable[str | None] = ()) -> str:
    """``text`` with each known secret and each key-shaped token replaced by ``[redacted]``."""
    for secret in secrets:
        if secret and len(secret) >= 4 and secret in text:
            text = text.replace(secret, REDACTED)
    return _PATTERN.sub(lambda m: (m.group("label") or "") + REDACTED, text)
