"""Containers: where code_interpreter and hosted shell run code, and the Containers API.

- engine.py: the interface an engine implements (one per platform);
- sandbox.py: the local engine (a bubblewrap jail per container);
- agentcore.py: the AWS engine (Amazon Bedrock AgentCore Code Interpreter);
- service.py: containers as OpenAI serves them (records per tenant, expiry, container files)
  over an engine; what the routes (api/container_routes.py) and the tools use.
"""
