"""One probe per API surface (proxy.core.surfaces.SURFACES), bounded like every request.

Chat Completions, the surface the proxy repairs, gets the whole scripted conversation, once
streaming and once not. The others get one minimal request each, to learn whether the
provider answers them at all. A surface that gains repairs gets a fuller probe here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from proxy.core.surfaces import ANTHROPIC_MESSAGES, CHAT_COMPLETIONS, RESPONSES, SURFACES, Surface
from proxy.doctor.core import assistant_message
from proxy.doctor.script import (
    CONVERSATIONS,
    TURNS,
    chat_request,
    continue_after,
    first_messages,
)
from proxy.doctor.session import RecordedExchange, Session

JSON = dict[str, Any]
SMALL_PROMPT = "Reply with the word OK."


@dataclass
class SurfaceResult:
    surface: Surface
    answers: bool
    detail: str
    exchanges: list[RecordedExchange] = field(default_factory=list)


Probe = Callable[[Session, str], SurfaceResult]


def _verdict(
    surface: Surface, exchanges: list[RecordedExchange], shape: Callable[[Any], bool]
) -> SurfaceResult:
    for exchange in exchanges:
        if exchange.ok and (exchange.stream or shape(exchange.json())):
            return SurfaceResult(surface, True, "answers", exchanges)
    failed = next((e for e in exchanges if e.error is not None), None)
    if failed is not None:
        return SurfaceResult(surface, False, failed.error or "", exchanges)
    return SurfaceResult(surface, False, "answered, but not in this API's shape", exchanges)


def probe_chat(session: Session, model: str) -> SurfaceResult:
    """The scripted conversation, streaming then not: at most TURNS requests each."""
    exchanges: list[RecordedExchange] = []
    for stream, conversation in CONVERSATIONS:
        messages = first_messages()
        for turn in range(1, TURNS + 1):
            body = chat_request(model, messages, stream=stream)
            exchange = session.post(
                CHAT_COMPLETIONS.path, body, conversation=conversation, turn=turn, stream=stream
            )
            exchanges.append(exchange)
            assistant = assistant_message(exchange) if exchange.ok else None
            if assistant is None or turn == TURNS:
                break
            messages = [*messages, *continue_after(turn, assistant)]
    return _verdict(
        CHAT_COMPLETIONS, exchanges, lambda body: isinstance(body, dict) and "choices" in body
    )


def _minimal(
    surface: Surface,
    body: Callable[[str], JSON],
    shape: Callable[[Any], bool],
    headers: Callable[[Session], dict[str, str]],
) -> Probe:
    def probe(session: Session, model: str) -> SurfaceResult:
        exchange = session.post(surface.path, body(model), headers=headers(session))
        return _verdict(surface, [exchange], shape)

    return probe


def _anthropic_headers(session: Session) -> dict[str, str]:
    # Anthropic's own header for the key, next to the bearer token other servers read.
    key = {"x-api-key": session.key} if session.key else {}
    return {"anthropic-version": "2023-06-01", **key}


PROBES: Mapping[str, Probe] = MappingProxyType(
    {
        CHAT_COMPLETIONS.path: probe_chat,
        ANTHROPIC_MESSAGES.path: _minimal(
            ANTHROPIC_MESSAGES,
            lambda model: {
                "model": model,
                "max_tokens": 16,
                "messages": [{"role": "user", "content": SMALL_PROMPT}],
            },
            lambda body: isinstance(body, dict) and body.get("type") == "message",
            _anthropic_headers,
        ),
        RESPONSES.path: _minimal(
            RESPONSES,
            lambda model: {"model": model, "input": SMALL_PROMPT, "max_output_tokens": 16},
            lambda body: isinstance(body, dict) and body.get("object") == "response",
            lambda session: {},
        ),
    }
)


def probe_surfaces(session: Session, model: str) -> list[SurfaceResult]:
    return [PROBES[surface.path](session, model) for surface in SURFACES]
