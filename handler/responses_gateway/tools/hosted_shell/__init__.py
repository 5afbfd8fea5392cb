"""Hosted ``shell``: a ``shell`` tool whose ``environment`` is a container, run by the gateway.

OpenAI runs ``shell`` two ways: with ``environment: {"type": "container_auto"}`` or
``{"type": "container_reference", "container_id": ...}`` in a container of its own (hosted
shell), and without an environment (or ``{"type": "local"}``) on the client's machine. The
gateway does the same: the first kind is this server tool, run in the Containers service's
containers (containers/service.py) once ``GATEWAY_CODE_INTERPRETER`` names an engine; the
second stays the client tool it always was (tools/client_tools.py).

- :mod:`.environment` tells the two apart by the tool's params (``REGISTRATION.serves``) and
  reads the environment;
- :mod:`.items` builds OpenAI's ``shell_call`` / ``shell_call_output`` items and events and
  bounds each command's output;
- :mod:`.tool` is the server tool (tools/server.py): the function the model is offered, a call
  run in the container, and how the pair goes back to the model later.

Only this file's :data:`REGISTRATION` is read at start (tools/registry.py).
"""

from typing import Any

from responses_gateway import ids
from responses_gateway.tools.declaration import ItemType, Registration


def _engine_set(settings: Any) -> bool:
    """A code engine runs containers (GATEWAY_CODE_INTERPRETER): the setting is the
    code_interpreter tool's name too, so it is read, not named."""
    return settings.code_interpreter is not None


REGISTRATION = Registration(
    kind="hosted_shell",
    tool_types=("shell",),
    # the client's shell makes the same items: shared, told apart by the tool's reader
    items=(ItemType("shell_call", ids.SHELL_CALL, shared=True),
           ItemType("shell_call_output", ids.SHELL_CALL_OUTPUT, shared=True)),
    target="responses_gateway.tools.hosted_shell.tool:HostedShellTool",
    serves="responses_gateway.tools.hosted_shell.environment:in_container",
    needs=_engine_set,
    enabled_by="GATEWAY_CODE_INTERPRETER is set (a shell whose environment is a container)",
    settings="code",
)
