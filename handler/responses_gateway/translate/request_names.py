"""The create body's names that code outside validation needs, without pydantic.

Routes check id lengths and conversations check ``include`` on every process start; the
request models (request_models.py and its parts) cost a cold start more than the rest of the
entry point, so what those callers need lives here and the models import it from here.
"""

from __future__ import annotations

from responses_gateway import ids
from responses_gateway.tools import registry

#: how long an id a client sends may be (ids.py says why)
MAX_ID_LENGTH = ids.MAX_ID_LENGTH

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
