"""Response direction, non-streaming: the same decisions as stream.py on a whole message.

`choices[].message.tool_calls` get client ids by SPEC §2, arguments made strings ("{}" when
empty), a missing `type` becomes "function", duplicates and replays are removed, and
`finish_reason` is made truthful. A follow-up round's message is merged into the first
round's (SPEC §5: one message, the first response's id, created and model, usage summed).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proxy.chat.continuation import reasoning_of
from proxy.chat.stream import Carry
from proxy.core.decide import ChoiceIds, ResponseIds, Verdict, truthful_finish_reason
from proxy.core.guard import Replay
from proxy.core.ids import normalize_raw_id
from proxy.core.jsontext import dumps
from proxy.core.notes import DeltaRepaired, IdRewritten, Note
from proxy.core.textcalls import RecoveredCall, TextCallScanner
from proxy.core.usage import add_usage


@dataclass(slots=True)
class _Call:
    name: str
    arguments: str

    def arguments_text(self) -> str:
        return self.arguments


@dataclass(slots=True)
class MessageResult:
    body: dict[str, Any]
    changed: bool
    notes: list[Note]
    # Set when the only calls were replays and the shell must run a follow-up round.
    replays: list[Replay]
    content: str
    reasoning: dict[str, str]  # the replaying message's reasoning fields (FollowupNeeded's)


def holds_no_call(raw: bytes) -> bool:
    """Would `sanitize_completion` leave this answer alone, text-call recovery aside? Decided
    on its bytes, so that the usual answer (text, no calls) is not parsed and walked: without
    the name `tool_calls` there is no call to decide and no `finish_reason: tool_calls` to make
    truthful. A JSON `\\u` escape could spell that name in a key or a value, so an answer with
    any escape is left to the full check. find(), not `in`: see proxy.upstream.transport."""
    return raw.find(b"tool_calls") < 0 and raw.find(b"\\u") < 0


def sanitize_completion(
    body: dict[str, Any], ids: ResponseIds, *, text_tool_calls: bool = False
) -> MessageResult:
    notes: list[Note] = []
    changed = False
    followup_replays: list[Replay] = []
    content = ""
    reasoning: dict[str, str] = {}
    choices = body.get("choices")
    for position, choice in enumerate(choices if isinstance(choices, list) else ()):
        if not isinstance(choice, dict) or not isinstance(choice.get("message"), dict):
            continue
        raw_index = choice.get("index")
        index = raw_index if isinstance(raw_index, int) else position
        state = ids.choice(index)
        changed = _sanitize_choice(choice, index, state, ids, notes, text_tool_calls) or changed
        single = ids.facts.choices == 1
        if single and ids.guard.enabled and state.replays and not state.delivered:
            followup_replays = list(state.replays)
            text = choice["message"].get("content")
            content = text if isinstance(text, str) else ""
            reasoning = reasoning_of(choice["message"])
    return MessageResult(body, changed, notes, followup_replays, content, reasoning)


def _sanitize_choice(
    choice: dict[str, Any],
    index: int,
    state: ChoiceIds,
    ids: ResponseIds,
    notes: list[Note],
    text_tool_calls: bool,
) -> bool:
    """One choice's calls and finish, rewritten in place; True when anything changed."""
    message = choice["message"]
    changed = False
    calls = message.get("tool_calls")
    if text_tool_calls and ids.facts.offered_tools and isinstance(message.get("content"), str):
        recovered = _recover_text_calls(message, ids.facts.offered_tools, notes)
        if recovered:
            calls = [*calls, *recovered] if isinstance(calls, list) else recovered
    if calls is not None:
        changed = True
        kept = _sanitize_calls(calls, index, state, ids, notes)
        if kept:
            message["tool_calls"] = kept
        else:
            del message["tool_calls"]
    reason = choice.get("finish_reason")
    fixed = truthful_finish_reason(bool(state.delivered), reason)
    if fixed != reason:
        choice["finish_reason"] = fixed
        notes.append(DeltaRepaired(kind="finish_reason", detail=f"{reason} -> {fixed}"))
        changed = True
    return changed


def _recover_text_calls(
    message: dict[str, Any], offered: frozenset[str], notes: list[Note]
) -> list[dict[str, Any]]:
    """Markup left in `content` becomes tool calls; the text around it stays."""
    scanner = TextCallScanner(offered)
    segments = scanner.feed(message["content"]) + scanner.end()
    if not scanner.recovered:
        return []
    text = "".join(s for s in segments if isinstance(s, str))
    message["content"] = text or None
    recovered = []
    for segment in segments:
        if isinstance(segment, RecoveredCall):
            notes.append(DeltaRepaired(kind="text_tool_call", detail=segment.format))
            recovered.append(
                {
                    "id": segment.raw_id,
                    "type": "function",
                    "function": {"name": segment.name, "arguments": segment.arguments},
                }
            )
    return recovered


def _sanitize_calls(
    calls: object, choice: int, state: Any, ids: ResponseIds, notes: list[Note]
) -> list[dict[str, Any]]:
    if isinstance(calls, dict):
        calls = [calls]
    if not isinstance(calls, list):
        notes.append(DeltaRepaired(kind="malformed_tool_calls"))
        return []
    kept: list[dict[str, Any]] = []
    for call in calls:
        if not isinstance(call, dict):
            notes.append(DeltaRepaired(kind="malformed_tool_call"))
            continue
        fn = call.get("function")
        fn = dict(fn) if isinstance(fn, dict) else {}
        raw_name = fn.get("name")
        name = raw_name if isinstance(raw_name, str) else ""
        arguments = fn.get("arguments")
        if arguments is not None and not isinstance(arguments, str):
            arguments = dumps(arguments).decode()  # never raises on deep JSON
            notes.append(DeltaRepaired(kind="object_arguments"))
        if not arguments or not arguments.strip():
            arguments = "{}"
            notes.append(DeltaRepaired(kind="empty_arguments"))
        raw_id = normalize_raw_id(call.get("id"))
        decision = ids.decide(state, raw_id, _Call(name, arguments))
        if decision.verdict is not Verdict.DELIVER:
            notes.append(decision.dropped(choice, name, raw_id))
            continue
        if decision.reason is not None:
            notes.append(
                IdRewritten(
                    choice=choice,
                    index=decision.index,
                    name=name,
                    raw_id=raw_id,
                    client_id=decision.client_id,
                    reason=decision.reason,
                )
            )
        if call.get("type") != "function":
            notes.append(DeltaRepaired(kind="missing_type"))
        kept.append(
            {
                **call,
                "id": decision.client_id,
                "type": "function",
                "function": {**fn, "name": name, "arguments": arguments},
            }
        )
    return kept


def merge_continuation(
    carry: Carry,
    content_before: str,
    later: dict[str, Any],
    reasoning_before: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A follow-up round's completion, presented as the continuation of the first one: the
    earlier rounds' text and reasoning come first, as a stream would have shown them."""
    for key, value in (
        ("id", carry.response_id),
        ("created", carry.created),
        ("model", carry.model),
    ):
        if value is not None:
            later[key] = value
    choices = later.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        message = choices[0].get("message")
        if isinstance(message, dict):
            _prefix(message, "content", content_before)
            for key, text in (reasoning_before or {}).items():
                _prefix(message, key, text)
    usage = add_usage(add_usage(None, carry.usage), later.get("usage"))
    if usage is not None:
        later["usage"] = usage
    return later


def _prefix(message: dict[str, Any], key: str, before: str) -> None:
    if before:
        value = message.get(key)
        message[key] = before + (value if isinstance(value, str) else "")
