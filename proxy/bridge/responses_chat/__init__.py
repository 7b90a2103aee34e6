"""Responses served over a Chat Completions upstream (SPEC §9).

Codex CLI and the OpenAI Agents SDK speak only Responses; many servers of open models speak
only Chat Completions. This bridge maps the client's Responses request to a Chat body, runs
it through the Chat Completions exchange (which gives every guarantee of SPEC §2-§5 and §10),
and turns that exchange's canonical Chat output back into Responses' grammar. Sans-IO and
stateless between requests: everything a later request needs travels in its own items.
"""

from proxy.bridge.responses_chat.exchange import (
    ResponsesOverChat,
    new_responses_over_chat,
    upstream_error,
)
from proxy.bridge.responses_chat.request import responses_to_chat

__all__ = ["ResponsesOverChat", "new_responses_over_chat", "responses_to_chat", "upstream_error"]
