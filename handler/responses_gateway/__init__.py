"""responses-gateway: the OpenAI Responses API served on top of Chat Completions and Bedrock.

The package reads as a request's journey (docs/architecture.md draws it):

- ``entry/``      how the process starts: the CLI, the buffered, worker and WebSocket Lambdas
- ``api/``        the HTTP surface: the Starlette app, auth, routes, errors, WebSocket mode
- ``responses/``  one response's life: new job, the turn loop, fitting the context window,
                  background runs, conversations
- ``translate/``  Responses request -> chat request, chat chunks -> Responses events
- ``backends/``   upstream adapters that produce chat-shaped chunks (OpenAI-compatible, Bedrock),
                  and routing with fallbacks
- ``tools/``      tools the gateway runs (MCP, web_search, file_search, image_generation) and
                  those the client runs
- ``files/``, ``vectors/``  the Files and Vector Stores APIs on local or AWS storage
- ``store/``      stored responses, conversations, usage and health (SQLite, DynamoDB)
"""

__version__ = "0.1.0"
