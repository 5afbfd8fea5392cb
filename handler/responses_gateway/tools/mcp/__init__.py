"""``mcp``: remote MCP servers' tools, run by the gateway as OpenAI runs them.

- :mod:`.client` connects to one server with the ``mcp`` SDK and runs one call safely (where
  it connects, secrets, bounds);
- :mod:`.tool` is the server tool (tools/server.py): the servers listed before the response,
  their tools offered as functions, ``mcp_call`` and ``mcp_approval_request`` items;
- :mod:`.params` holds the request's ``mcp`` tool and its ``tool_choice`` as models, their
  echo and their checks (translate/request_tools.py imports them with the request models);
- :mod:`.items` holds the fields of the items a client sends back.

Only this file's :data:`REGISTRATION` is read at start (tools/registry.py): the SDK and the
models load when a request needs them.
"""

from responses_gateway.tools.declaration import ItemType, Registration

#: the items' id prefixes (ids.new_id)
LIST_TOOLS_ID_PREFIX = "mcpl_"
CALL_ID_PREFIX = "mcp_"
APPROVAL_REQUEST_ID_PREFIX = "mcpr_"
APPROVAL_RESPONSE_ID_PREFIX = "mcpa_"

_ITEMS = "responses_gateway.tools.mcp.items"
_PARAMS = "responses_gateway.tools.mcp.params"

REGISTRATION = Registration(
    kind="mcp",
    tool_types=("mcp",),
    items=(
        ItemType("mcp_list_tools", LIST_TOOLS_ID_PREFIX, has_status=False,
                 input_fields=f"{_ITEMS}:LIST_TOOLS"),
        ItemType("mcp_call", CALL_ID_PREFIX, input_fields=f"{_ITEMS}:CALL"),
        ItemType("mcp_approval_request", APPROVAL_REQUEST_ID_PREFIX, has_status=False,
                 input_fields=f"{_ITEMS}:APPROVAL_REQUEST",
                 answer=("mcp_approval_response", "approval_request_id")),
        ItemType("mcp_approval_response", APPROVAL_RESPONSE_ID_PREFIX, has_status=False,
                 input_fields=f"{_ITEMS}:APPROVAL_RESPONSE"),
    ),
    target="responses_gateway.tools.mcp.tool:McpServerTool",
    request_tool=f"{_PARAMS}:McpTool",
    request_choice=f"{_PARAMS}:ToolChoiceMcp",
    hosted=False,  # OpenAI's hosted MCP is the same tool: always run here, never omitted
    settings="mcp",
    start_line=("mcp_allow_hosts",),
)
