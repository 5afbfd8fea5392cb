"""``image_generation`` run by the gateway: the chat model asks for an image through a function
the gateway offers it, an image backend draws it, the client gets an ``image_generation_call``.

- params.py: the request's ``image_generation`` tool, checked (OpenAI's 400s).
- backends/: one module per image backend behind one interface (backends/base.py); which one
  is ``GATEWAY_IMAGE_BACKEND`` (backends/__init__.py).
- tool.py: the :class:`~responses_gateway.tools.server.ServerTool` (items, events, edits
  across turns, how an image reads to the model later).

Image bytes are large: the store keeps them beside itself (store/blobs.py).
"""
