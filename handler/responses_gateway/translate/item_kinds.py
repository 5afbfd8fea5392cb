"""What the one item open in the translator is (translate/stream.py keeps exactly one open),
and the error an upstream breaking the chat stream's rules raises.

Shared by the state machine's modules; plain ints so the per-chunk checks are cheap.
"""

# CUSTOM: a custom tool's call; SERVER: a call the gateway runs (its item comes after the
# turn); TOOL_ITEM: an item of a gateway-run tool (an mcp_call, say) being run; CLIENT: a call
# of a tool the client runs (a shell_call, say: its item is made when its arguments are whole).
NONE, REASONING, TEXT, REFUSAL, CALL, CUSTOM, SERVER, TOOL_ITEM, CLIENT = range(9)
CALL_KINDS = (CALL, CUSTOM, SERVER, CLIENT)


class TranslationError(Exception):
    """The upstream broke the chat stream's own rules; the response ends ``failed``."""
