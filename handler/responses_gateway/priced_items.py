"""Output items priced each (a web search call), by item type: the ``Price`` field and the
Costs API's line item.

tools/registry.py fills it from the server tools' registrations (``ItemType.price``); the
limiter and the Costs API hand it to prices.py's ``Pricing``. A module of its own at the bottom
of the house: prices.py sits below the tools (settings type a field with it) and imports
nothing of the gateway, and the tools do not import prices.py, which a cold start loads only
when a dollar budget or the Costs API needs it.
"""

from __future__ import annotations

PRICED_ITEMS: dict[str, tuple[str, str]] = {}
