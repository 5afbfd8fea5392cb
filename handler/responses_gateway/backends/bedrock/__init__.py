"""Amazon Bedrock backend (Converse / ConverseStream), per docs/bedrock-converse-mapping.md.

``request`` maps the chat request to Converse kwargs (``messages`` assembles turns, ``names``
normalises tool names and ids, ``models`` knows model families), ``images`` fetches URLs
safely, ``stream`` / ``response`` map events / responses back to chat chunks, ``failures``
maps errors, and ``backend`` runs boto3.
"""

from responses_gateway.backends.bedrock.backend import BedrockBackend

__all__ = ["BedrockBackend"]
