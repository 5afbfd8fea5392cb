"""The cyclic garbage collector tuned for a long-lived server process.

Startup freezes what exists (modules, clients, settings: they live as long as the process), so
later collections skip it, and young collections come ten times less often than CPython's
default: streaming makes short-lived dicts and lists per event, and collecting them at the
default pace took ~5% of the gateway's CPU under load (under 1% at this threshold).

Much is still built at the first response, not at startup, to keep the cold import small: the
backend's client, the request models' validators (pydantic builds them on first use), the
modules imported on first use. Those objects would otherwise sit in the oldest generation and
be scanned again by every full collection (44-82 ms each under load). So the first time the
process has no response open after its first one, it collects once (only what is not frozen)
and freezes what survived: once per process.
"""

from __future__ import annotations

import gc

# Young collections happen every this many container allocations (CPython's default: 700).
YOUNG_GENERATION_THRESHOLD = 10_000

_tuned = False
_settled = False
_open = 0


def tune() -> None:
    """At startup, once per process (Mangum runs the lifespan on every call, and freezing
    again would keep whatever garbage the calls before had left)."""
    global _tuned
    if _tuned:
        return
    _tuned = True
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_GENERATION_THRESHOLD, middle, old)


def freeze_startup() -> None:
    """What startup built after :func:`tune` (api/warm_start.py: the validators and clients of
    the first create, in Lambda) is frozen too, once per process."""
    if _tuned and not _settled:
        gc.freeze()


def response_opened() -> None:
    global _open
    _open += 1


def response_closed() -> None:
    """After the first response, when none is open: what it built lazily is frozen too."""
    global _open, _settled
    _open -= 1
    if _open > 0 or _settled or not _tuned:
        return
    _settled = True
    gc.collect()
    gc.freeze()
