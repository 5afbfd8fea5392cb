"""Tools beyond plain functions: what the model is offered, and what its calls become.

- :mod:`.catalog` flattens the request's tools into chat functions (``namespace`` members,
  ``custom`` tools, MCP servers' tools) and maps each chat function name back;
- :mod:`.custom` is the one-string-input shape of a ``custom`` tool and its streaming decoder;
- :mod:`.hosted` is the policy for tools only OpenAI can run (``web_search``, ...);
- :mod:`.mcp` runs remote MCP servers' tools in the gateway (imported lazily: it needs the
  ``mcp`` SDK).
"""

from responses_gateway.tools.catalog import ToolCatalog, ToolSpec

__all__ = ["ToolCatalog", "ToolSpec"]
