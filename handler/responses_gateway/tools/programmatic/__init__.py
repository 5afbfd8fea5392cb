"""``programmatic_tool_calling`` run by the gateway: the model writes one JavaScript program that
calls the request's tools (in loops, in parallel, with branches) and returns one result, in one
model turn instead of one turn per call.

- allowed.py: which of the request's tools a program may call (``allowed_callers``) and how
  the model is told about them;
- bridge.py: the program's prelude (one async function per callable tool) and what one
  execution printed, read back;
- journal.py: a program's state, rebuilt from the items (its calls and their outputs, in
  order): how a paused program resumes in another response, process or Lambda;
- items.py: the fields of ``program`` / ``program_output`` items a client sends back;
- tool.py: the :class:`~responses_gateway.tools.server.ServerTool` (the items, the execution in
  the Containers service's engine, the pause and the resume).

Only this file's :data:`REGISTRATION` is read at start (tools/registry.py).
"""

from typing import Any

from responses_gateway.tools.declaration import ItemType, Registration

#: the output items' types and their ids' prefixes (ids.new_id)
PROGRAM = "program"
PROGRAM_OUTPUT = "program_output"


def _engine_set(settings: Any) -> bool:
    """Programs run where code_interpreter runs (GATEWAY_CODE_INTERPRETER names the engine)."""
    return settings.code_interpreter is not None


REGISTRATION = Registration(
    kind="programmatic_tool_calling",
    tool_types=("programmatic_tool_calling",),
    items=(ItemType(PROGRAM, "prog_",
                    input_fields="responses_gateway.tools.programmatic.items:PROGRAM_FIELDS",
                    has_status=False),
           ItemType(PROGRAM_OUTPUT, "progo_",
                    input_fields="responses_gateway.tools.programmatic.items:OUTPUT_FIELDS",
                    has_status=False)),
    target="responses_gateway.tools.programmatic.tool:ProgrammaticTool",
    needs=_engine_set,
    choices={"programmatic_tool_calling": "programmatic_tool_calling"},
    hosted=True,
    enabled_by="GATEWAY_CODE_INTERPRETER is set (programs run in its engine)",
    settings="code",
)
