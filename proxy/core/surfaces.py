"""The API surfaces a route serves, and which of them the tool-call core repairs.

One table, read by the app (which requests go to the core), the start-up lines and
`toolcall-proxy doctor` (which surfaces to probe): a surface that gains repairs changes here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Surface:
    name: str  # as its users know it
    label: str  # in logs and metrics
    path: str  # under a route's `/v1` base
    repaired: bool  # True: tool calls go through the core; False: passed through unchanged


CHAT_COMPLETIONS = Surface(
    "Chat Completions", "chat_completions", "/chat/completions", repaired=True
)
ANTHROPIC_MESSAGES = Surface("Anthropic Messages", "anthropic_messages", "/messages", repaired=True)
RESPONSES = Surface("Responses", "responses", "/responses", repaired=True)
SURFACES: tuple[Surface, ...] = (CHAT_COMPLETIONS, ANTHROPIC_MESSAGES, RESPONSES)


def describe_surfaces() -> str:
    """`repairs /chat/completions, ..., passes through /x and every other path`, for people."""
    repaired = [s.path for s in SURFACES if s.repaired]
    passed = [s.path for s in SURFACES if not s.repaired]
    others = f"{', '.join(passed)} and every other path" if passed else "every other path"
    return f"repairs {', '.join(repaired)}, passes through {others}"


__all__ = [
    "ANTHROPIC_MESSAGES",
    "CHAT_COMPLETIONS",
    "RESPONSES",
    "SURFACES",
    "Surface",
    "describe_surfaces",
]
