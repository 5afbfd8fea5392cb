"""``web_search`` run by the gateway: a search provider's results, live pages, citations.

- :mod:`.tool` is the server tool (tools/server.py): the functions the model is offered
  (``web_search``, and ``open_page`` / ``find_in_page`` unless ``external_web_access`` is
  false), the ``web_search_call`` items and their events, the citations of the final text;
- :mod:`.providers` holds one module per search provider behind one small interface;
- :mod:`.pages` opens a page under the SSRF rules (net/pinned.py) and makes it readable text.

Nothing here is imported until a request names ``web_search`` with a provider configured.
"""
