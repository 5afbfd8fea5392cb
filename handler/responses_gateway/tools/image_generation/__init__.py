"""``image_generation`` run by the gateway: the chat model asks for an image through a function
the gateway offers it, an image backend draws it, the client gets an ``image_generation_call``.

- params.py: the request's ``image_generation`` tool, checked (OpenAI's 400s).
- backends/: one module per image backend behind one interface (backends/base.py); which one
  is ``GATEWAY_IMAGE_BACKEND`` (backends/__init__.py).
- tool.py: the :class:`~responses_gateway.tools.server.ServerTool` (items, events, edits
  across turns, how an image reads to the model later).

Image bytes are large: the store keeps them beside itself (store/blobs.py). Only this file's
:data:`REGISTRATION` is read at start (tools/registry.py).
"""

from responses_gateway.tools.declaration import ItemType, Registration

#: the call item's type and its ids' prefix (ids.new_id)
ITEM = "image_generation_call"
CALL_ID_PREFIX = "ig_"

REGISTRATION = Registration(
    kind="image_generation",
    tool_types=("image_generation",),
    # a client sends an image back (a later edit changes the latest one): item.py's fields
    items=(ItemType(ITEM, CALL_ID_PREFIX,
                    input_fields="responses_gateway.tools.image_generation.item:INPUT_FIELDS",
                    id_required=True, counter="image_generations"),),
    target="responses_gateway.tools.image_generation.tool:ImageGenerationTool",
    needs="image_backend",
    choices={"image_generation": "image_generation"},
    tool_usage={"image_gen": {
        "input_tokens": 0,
        "input_tokens_details": {"image_tokens": 0, "text_tokens": 0},
        "output_tokens": 0,
        "output_tokens_details": {"image_tokens": 0, "text_tokens": 0},
        "total_tokens": 0,
    }},
    enabled_by="GATEWAY_IMAGE_BACKEND is set",
    start_line=("image_backend", "image_model"),
    settings="image_generation",
)
