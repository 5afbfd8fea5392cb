"""Tools beyond plain functions: what the model is offered, and what its calls become.

- :mod:`.catalog` flattens the request's tools into chat functions (``namespace`` members,
  ``custom`` tools, MCP servers' tools) and maps each chat function name back;
- :mod:`.custom` is the one-string-input shape of a ``custom`` tool and its streaming decoder;
- :mod:`.hosted` is the policy for tools OpenAI runs and the gateway does not
  (``code_interpreter``, and a server tool while it is not configured);
- :mod:`.server` and :mod:`.registry` are the seam for tools the gateway runs, each a package
  declaring itself (:mod:`.declaration`): :mod:`.web_search`, :mod:`.file_search`,
  :mod:`.image_generation`;
- :mod:`.mcp` runs remote MCP servers' tools in the gateway (imported lazily: it needs the
  ``mcp`` SDK).
"""

from responses_gateway.tools.catalog import ToolCatalog, ToolSpec

__all__ = ["ToolCatalog", "ToolSpec"]
