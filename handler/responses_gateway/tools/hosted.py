"""Hosted tools: the ones OpenAI runs on its own servers (search, files, a sandbox, images).

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

HOSTED_TYPES = frozenset({
    "web_search",
    "web_search_2025_08_26",
    "web_search_preview",
    "web_search_preview_2025_03_11",
    "file_search",
    "code_interpreter",
    "image_generation",
    "tool_search",  # with execution "server"; the client's own is tools/client_tools.py's
})
POLICIES = ("omit", "reject")
#: Hosted tools the gateway runs once configured (tools/registry.py ``needs``), and the
#: setting that does it: named in the refusal.
CONFIGURED_BY = {"image_generation": "GATEWAY_IMAGE_BACKEND"}


def refused(kind: str, index: int) -> GatewayError:
    """The 400 for a hosted tool under ``reject`` (and for any tool type nobody serves)."""
    return invalid_request(
        f"Tool type '{kind}' is not supported by this gateway: hosted tools such as "
        f"web_search, file_search, code_interpreter or image_generation run inside OpenAI. "
        f"It serves 'function', 'custom', 'namespace' and 'mcp' tools, the tools the client "
        f"runs (shell, apply_patch, local_shell, computer, client tool_search) (and "
        f"leaves hosted tools out for the model when GATEWAY_HOSTED_TOOLS=omit)."
        + (f" It runs '{kind}' itself when {CONFIGURED_BY[kind]} is set."
           if kind in CONFIGURED_BY else ""),
        param=f"tools[{index}].type",
        code="invalid_value",
    )


def policy_named(name: str) -> str:
    name = name.strip().lower()
    if name not in POLICIES:
        raise ValueError(f"GATEWAY_HOSTED_TOOLS must be 'omit' or 'reject', not {name!r}")
    return name
