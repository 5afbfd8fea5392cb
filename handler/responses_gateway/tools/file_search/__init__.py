"""``file_search`` run by the gateway over the tenant's vector stores (vectors/).

- :mod:`.options` reads the request's ``file_search`` tool (``vector_store_ids``,
  ``max_num_results``, ``ranking_options``, ``filters``) with OpenAI's 400s;
- :mod:`.passages` searches the stores, merges their results and writes what the model reads
  (numbered passages with citation markers) and the ``file_citation`` annotations of markers;
- :mod:`.tool` is the server tool (tools/server.py): the ``file_search_call`` item and events.

Only this file's :data:`REGISTRATION` is read at start (tools/registry.py): the rest is
imported when a request names ``file_search`` on a storage with vector stores.
"""

from responses_gateway.tools.declaration import ItemType, Registration

#: the call items' id prefix (ids.new_id)
CALL_ID_PREFIX = "fs_"

REGISTRATION = Registration(
    kind="file_search",
    tool_types=("file_search",),
    items=(ItemType("file_search_call", CALL_ID_PREFIX),),
    target="responses_gateway.tools.file_search.tool:FileSearchTool",
    needs="responses_gateway.platform:vector_stores_available",  # asked of the platform
    keeps_reads=True,
    choices={"file_search": "file_search"},
    includes=("file_search_call.results",),
    enabled_by="GATEWAY_STORE is sqlite:PATH, or dynamodb:TABLE with GATEWAY_VECTOR_BUCKET",
    start_line=("embedding_backend", "embedding_model", "knowledge_bases"),
    settings="vector_stores",
)
