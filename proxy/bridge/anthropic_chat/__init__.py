"""Anthropic Messages clients (Claude Code) over a Chat Completions upstream (SPEC §9).

Entry points for the shell: `new_anthropic_over_chat` (the exchange factory),
`upstream_error` (an upstream non-2xx body in Anthropic's shape) and
`count_tokens_estimate` (the proxy's answer to `count_tokens`).
"""

from __future__ import annotations

from proxy.bridge.anthropic_chat.errors import count_tokens_estimate, upstream_error
from proxy.bridge.anthropic_chat.exchange import AnthropicOverChat, new_anthropic_over_chat
from proxy.bridge.anthropic_chat.request import messages_to_chat

__all__ = [
    "AnthropicOverChat",
    "count_tokens_estimate",
    "messages_to_chat",
    "new_anthropic_over_chat",
    "upstream_error",
]
