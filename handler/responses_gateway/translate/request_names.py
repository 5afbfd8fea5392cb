"""The create body's names that code outside validation needs, without pydantic.

Routes check id lengths and conversations check ``include`` on every process start; the
request models (request_models.py and its parts) cost a cold start more than the rest of the
entry point, so what those callers need lives here and the models import it from here.
"""

from __future__ import annotations

from responses_gateway.tools import registry

# Ids a client sends are store keys (DynamoDB: 1024 bytes per sort key, 2048 per partition
# key); 200 characters of at most 4 UTF-8 bytes each leave room for the key's prefix. The
# gateway's own ids are about 50.
MAX_ID_LENGTH = 200

#: What ``include`` may name: the server tools' own (tools/registry.py) and the rest.
INCLUDABLE = registry.INCLUDES | frozenset(
    {
        "message.input_image.image_url",
        "computer_call_output.output.image_url",
        "reasoning.encrypted_content",
        "message.output_text.logprobs",
    }
)
LOGPROBS = "message.output_text.logprobs"
ENCRYPTED_REASONING = "reasoning.encrypted_content"
