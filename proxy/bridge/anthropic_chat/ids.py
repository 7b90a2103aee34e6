"""Tool-call ids across the bridge, without state (SPEC §9).

The Chat exchange gives out Chat ids (`call_...`, minted or native) and reads them back in
the next request's history; the Anthropic client wants `toolu_...` ids. The bridge maps one
form onto the other by prefix only: `call_X` <-> `toolu_X`. An id of any other form (a
native upstream id such as `chatcmpl-tool-...`, or an older history's `functions.Bash:0`)
goes through as it is, both ways.
"""

from __future__ import annotations

CHAT_PREFIX = "call_"
CLIENT_PREFIX = "toolu_"


def client_tool_id(chat_id: str) -> str:
    """Response direction: the Chat exchange's id as the Anthropic client sees it."""
    if chat_id.startswith(CHAT_PREFIX) and len(chat_id) > len(CHAT_PREFIX):
        return CLIENT_PREFIX + chat_id[len(CHAT_PREFIX) :]
    return chat_id


def chat_tool_id(client_id: str) -> str:
    """Request direction: a history's `tool_use` / `tool_use_id` as the Chat exchange reads it."""
    if client_id.startswith(CLIENT_PREFIX) and len(client_id) > len(CLIENT_PREFIX):
        return CHAT_PREFIX + client_id[len(CLIENT_PREFIX) :]
    return client_id
