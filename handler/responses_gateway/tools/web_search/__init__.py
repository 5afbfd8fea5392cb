"""``web_search`` run by the gateway: a search provider's results, live pages, citations.

- :mod:`.tool` is the server tool (tools/server.py): the functions the model is offered
  (``web_search``, and ``open_page`` / ``find_in_page`` unless ``external_web_access`` is
  false), the ``web_search_call`` items and their events, the citations of the final text;
- :mod:`.params` checks the request's tool (OpenAI's fields, values and 400s);
- :mod:`.providers` holds one module per search provider behind one small interface;
- :mod:`.pages` opens a page under the SSRF rules (net/pinned.py) and makes it readable text.

Only this file's :data:`REGISTRATION` is read at start (tools/registry.py): the rest is
imported when a request names ``web_search`` with a provider configured.
"""

from responses_gateway.tools.declaration import ItemType, Registration

#: the call items' id prefix (ids.new_id)
CALL_ID_PREFIX = "ws_"

REGISTRATION = Registration(
    kind="web_search",
    tool_types=("web_search", "web_search_2025_08_26", "web_search_preview",
                "web_search_preview_2025_03_11"),
    items=(ItemType("web_search_call", CALL_ID_PREFIX, price=("search", "web search")),),
    target="responses_gateway.tools.web_search.tool:WebSearchTool",
    needs="web_search_provider",
    keeps_reads=True,
    # OpenAI's schema names only the preview choices; the Agents SDK sends ``web_search`` for
    # ``ModelSettings(tool_choice="web_search")``: echoed as the schema's name
    choices={"web_search_preview": "web_search_preview",
             "web_search_preview_2025_03_11": "web_search_preview_2025_03_11",
             "web_search": "web_search_preview", "web_search_2025_08_26": "web_search_preview"},
    includes=("web_search_call.results", "web_search_call.action.sources"),
    tool_usage={"web_search": {"num_requests": 0}},
    enabled_by="GATEWAY_WEB_SEARCH_PROVIDER is set",
    start_line=("web_search_provider",),
    settings="web_search",
)
