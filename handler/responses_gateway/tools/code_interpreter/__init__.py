"""``code_interpreter`` run by the gateway: the chat model runs Python in a container of the
Containers service (containers/service.py), whose engine (a bubblewrap jail here, AgentCore on
AWS) keeps its variables and its ``/mnt/data`` files between calls.

- params.py: the request's ``code_interpreter`` tool (``container``: an id, or ``auto`` with
  ``file_ids`` and ``memory_limit``), checked with OpenAI's 400s;
- code_stream.py: the model's streamed ``{"code": "..."}`` arguments decoded as they came, so
  ``response.code_interpreter_call_code.delta`` events carry code text;
- outputs.py: what one execution gives the client (``outputs``: logs, images), the model (its
  output, traceback and the files it made) and the final text (``container_file_citation``);
- item.py: the fields of a ``code_interpreter_call`` a client sends back;
- tool.py: the :class:`~responses_gateway.tools.server.ServerTool` (items, events, the
  container across turns, how a call reads to the model later).

Only this file's :data:`REGISTRATION` is read at start (tools/registry.py).
"""

from responses_gateway.tools.declaration import ItemType, Registration

#: the call item's type and its ids' prefix (ids.new_id), as OpenAI's ``ci_…``
ITEM = "code_interpreter_call"
CALL_ID_PREFIX = "ci_"
#: the ``include`` value that fills a call's ``outputs`` (else they are null, as OpenAI's)
OUTPUTS = "code_interpreter_call.outputs"

REGISTRATION = Registration(
    kind="code_interpreter",
    tool_types=("code_interpreter",),
    items=(ItemType(ITEM, CALL_ID_PREFIX,
                    input_fields="responses_gateway.tools.code_interpreter.item:INPUT_FIELDS",
                    id_required=True),),
    target="responses_gateway.tools.code_interpreter.tool:CodeInterpreterTool",
    needs="code_interpreter",
    # what a call printed is not in its item unless ``include`` asks (and a later request's
    # model must still read it): kept as the call's reads (tools/reads.py)
    keeps_reads=True,
    choices={"code_interpreter": "code_interpreter"},
    includes=(OUTPUTS,),
    # OpenAI's ``tool_usage`` has no code_interpreter family (it bills container time), so
    # none is added
    hosted=True,
    enabled_by="GATEWAY_CODE_INTERPRETER is set",
    settings="code",
    start_line=("code_interpreter",),
)
