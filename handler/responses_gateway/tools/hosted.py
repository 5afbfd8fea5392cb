"""Hosted tools: the ones OpenAI runs on its own servers (search, files, a sandbox, images).

The gateway runs some of them itself once configured (server tools that say ``hosted``:
tools/registry.py); the rest, and those while not configured, follow this policy.

Tools the *client* runs (shell, apply_patch, local_shell, computer, tool_search with
``execution: "client"``) are not hosted: the gateway offers them to the model and hands their
calls to the client (tools/client_tools.py); this policy never touches them.

A Chat Completions model cannot serve them and the gateway has nothing to run them with, so
``GATEWAY_HOSTED_TOOLS`` chooses: ``omit`` (the default) leaves them out of what the model is
offered, and the response's ``tools`` lists only what the model had, so a client can see which
were left out; ``reject`` answers OpenAI's 400 naming the tool. ``omit`` is the default because
agents send them unasked (the Codex CLI sends ``web_search`` and ``tool_search`` by default) and
work fine without them, while a 400 stops every turn.
"""

from __future__ import annotations

from responses_gateway.errors import GatewayError, invalid_request
from responses_gateway.tools import registry

#: OpenAI's hosted tool types: the catalogue of what only OpenAI runs, and the server tools
#: OpenAI hosts too (tools/registry.py ``hosted``), hosted while the gateway does not run them.
HOSTED_TYPES = frozenset({
    "tool_search",  # with execution "server"; the client's own is tools/client_tools.py's
}) | registry.HOSTED_TOOL_TYPES
POLICIES = ("omit", "reject")


def refused(kind: str, index: int) -> GatewayError:
    """The 400 for a hosted tool under ``reject`` (and for any tool type nobody serves): what
    the gateway serves, which hosted tools it runs itself and what turns each on."""
    runs = "; ".join(f"{r.tool_types[0]} when {r.enabled_by}" if r.enabled_by
                     else r.tool_types[0] for r in registry.REGISTRATIONS if r.hosted)
    off = registry.registration_of(kind)
    return invalid_request(
        f"Tool type '{kind}' is not supported by this gateway"
        + (f" as configured: it runs '{kind}' itself when {off.enabled_by}. "
           if off is not None and off.enabled_by else
           ": OpenAI runs it on its own servers. ")
        + f"It serves {_one_of(('function', 'custom', 'namespace', *registry.own_tool_types()))}"
        + " tools, the tools the client "
        f"runs (shell, apply_patch, local_shell, computer, client tool_search), and runs these "
        f"hosted tools itself: {runs}. It leaves the other hosted tools out for the model "
        f"when GATEWAY_HOSTED_TOOLS=omit.",
        param=f"tools[{index}].type",
        code="invalid_value",
    )


def _one_of(kinds: tuple[str, ...]) -> str:
    """``'a', 'b' and 'c'``."""
    named = [f"'{kind}'" for kind in kinds]
    return named[0] if len(named) == 1 else f"{', '.join(named[:-1])} and {named[-1]}"


def policy_named(name: str) -> str:
    name = name.strip().lower()
    if name not in POLICIES:
        raise ValueError(f"GATEWAY_HOSTED_TOOLS must be 'omit' or 'reject', not {name!r}")
    return name
