"""responses-gateway: the OpenAI Responses API served on top of Chat Completions and Bedrock.

The package reads as the request's journey:

- ``api/``        HTTP surface (starlette app, auth, routes, error rendering)
- ``translate/``  Responses request -> chat request, chat chunks -> Responses events
- ``backends/``   upstream adapters that produce chat-shaped chunks (OpenAI-compatible, Bedrock)
- ``store/``      stored responses (embedded SQLite, DynamoDB)
- ``worker/``     background responses (in-process task locally, async Lambda in AWS)
"""

__version__ = "0.1.0"
