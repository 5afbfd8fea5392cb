"""The backend kinds ``GATEWAY_BACKEND`` and model-map prefixes (``bedrock:…``) may name.

One line per backend: its kind and the class that builds it (``from_settings``). Kept apart
from backends/instances.py so config.py can check a kind without importing any backend.
"""

#: kind -> "module:Class" of a :class:`~responses_gateway.backends.base.BaseBackend`.
REGISTERED: dict[str, str] = {
    "openai": "responses_gateway.backends.openai_compat:OpenAICompatBackend",
    "bedrock": "responses_gateway.backends.bedrock:BedrockBackend",
}
KINDS: tuple[str, ...] = tuple(REGISTERED)
#: A routed client model's backend key is this prefix and the model name (``route:claude``):
#: backends/instances.py builds a backends/router.py Router for it (GATEWAY_ROUTES).
ROUTE_PREFIX = "route:"
