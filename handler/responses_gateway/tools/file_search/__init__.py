"""``file_search`` run by the gateway over the tenant's vector stores (vectors/).

- :mod:`.options` reads the request's ``file_search`` tool (``vector_store_ids``,
  ``max_num_results``, ``ranking_options``, ``filters``) with OpenAI's 400s;
- :mod:`.passages` searches the stores, merges their results and writes what the model reads
  (numbered passages with citation markers) and the ``file_citation`` annotations of markers;
- :mod:`.tool` is the server tool (tools/server.py): the ``file_search_call`` item and events.

Nothing here is imported until a request names ``file_search`` on a storage with vector stores.
"""
