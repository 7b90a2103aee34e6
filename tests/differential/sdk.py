"""What each official SDK accumulates from one canned answer, as plain JSON.

One function per surface and mode; each returns an `Outcome`: the final object the SDK hands
its user (`to_dict()`, so a key the server left out stays out), and for Responses also the
items of the `response.output_item.done` events (what Codex and the Agents SDK read), or the
exception the SDK raised instead.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anthropic
import openai

from tests.differential.canned import KEY_HEADER

JSON = dict[str, Any]
TERMINAL = ("response.completed", "response.incomplete", "response.failed")


@dataclass
class Outcome:
    final: JSON | None = None
    items: list[JSON] = field(default_factory=list)
    error: str | None = None  # "ExceptionType: message" when the SDK raised


def plain(model: Any) -> Any:
    """The SDK object as JSON values (timestamps as the strings they came as), keys the server
    left out left out; the SDKs' serialization warnings about loosely typed values (what
    `construct` accepted) say nothing here."""
    return model.to_dict(mode="json", warnings=False)


def _headers(key: str) -> dict[str, str]:
    return {KEY_HEADER: key}


def guarded(run: Callable[[], Outcome]) -> Outcome:
    """The outcome, or the SDK's exception as one (a side that raises is a difference too)."""
    try:
        return run()
    except Exception as exc:  # any SDK failure is reported, not raised, so both sides show
        return Outcome(error=f"{type(exc).__name__}: {exc}"[:600])


# -- Chat Completions -----------------------------------------------------------------------


def chat_stream(api: openai.OpenAI, key: str, request: JSON) -> Outcome:
    """`chat.completions.stream()`, read to the end. The snapshot is what
    `get_final_completion()` parses; it is taken as such because that parse raises on a
    `length` or `content_filter` finish (a cut-off must still be compared)."""

    def run() -> Outcome:
        with api.chat.completions.stream(**request, extra_headers=_headers(key)) as stream:
            for _ in stream:
                pass
            return Outcome(final=plain(stream.current_completion_snapshot))

    return guarded(run)


def chat_create(api: openai.OpenAI, key: str, request: JSON) -> Outcome:
    return guarded(
        lambda: Outcome(
            final=plain(api.chat.completions.create(**request, extra_headers=_headers(key)))
        )
    )


# -- Anthropic Messages ---------------------------------------------------------------------


def anthropic_stream(api: anthropic.Anthropic, key: str, request: JSON, *, beta: bool) -> Outcome:
    """`messages.stream()` + `get_final_message()`; `beta`: the beta namespace's accumulator
    (Claude Code's), which also keeps compaction blocks, `container` and
    `context_management`."""
    messages: Any = api.beta.messages if beta else api.messages

    def run() -> Outcome:
        with messages.stream(**request, extra_headers=_headers(key)) as stream:
            return Outcome(final=plain(stream.get_final_message()))

    return guarded(run)


def anthropic_create(api: anthropic.Anthropic, key: str, request: JSON, *, beta: bool) -> Outcome:
    messages: Any = api.beta.messages if beta else api.messages
    return guarded(
        lambda: Outcome(final=plain(messages.create(**request, extra_headers=_headers(key))))
    )


# -- Responses ------------------------------------------------------------------------------


def responses_stream(api: openai.OpenAI, key: str, request: JSON) -> Outcome:
    """`responses.stream()`: every `output_item.done` item, and `get_final_response()` (or,
    for a response that ends `incomplete` or `failed`, which that method refuses, the
    response that event carries)."""

    def run() -> Outcome:
        outcome = Outcome()
        done: dict[int, JSON] = {}
        with api.responses.stream(**request, extra_headers=_headers(key)) as stream:
            for event in stream:
                if event.type == "response.output_item.done":
                    done[event.output_index] = plain(event.item)
                elif event.type in TERMINAL:
                    outcome.final = plain(getattr(event, "response"))  # noqa: B009 (mypy cannot narrow the union by `in`)
            if outcome.final is None or outcome.final.get("status") == "completed":
                outcome.final = plain(stream.get_final_response())
        outcome.items = [done[i] for i in sorted(done)]
        return outcome

    return guarded(run)


def responses_create(api: openai.OpenAI, key: str, request: JSON) -> Outcome:
    return guarded(
        lambda: Outcome(final=plain(api.responses.create(**request, extra_headers=_headers(key))))
    )
