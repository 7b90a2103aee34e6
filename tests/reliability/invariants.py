"""SPEC §4 invariants on whatever the core emits, shared by the hypothesis tests and the atheris
harness (fuzz/fuzz_stream.py).

They are checked on the client's side of the wire: the bytes a StreamSanitizer produced are
parsed as SSE, and each rule of "The stream the client receives" is asserted on the events,
whatever garbage went in. A failure raises AssertionError naming the rule.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson

from proxy.chat.stream import StreamSanitizer
from proxy.core.nonjson import read_object
from proxy.core.sse import SSEDecoder, utf8_safe

CLIENT_ID_RE = re.compile(r"[A-Za-z0-9_-]{1,40}")
HEADER_KEYS = {"index", "id", "type", "function"}
FRAGMENT_KEYS = {"index", "function"}


@dataclass(frozen=True, slots=True)
class OutEvent:
    data: bytes | None
    other: tuple[bytes, ...]


def parse_sse_output(out: bytes) -> list[OutEvent]:
    """Parse the proxy's own framing strictly: `\\n` line ends, `data: ` with a space, every
    event closed by a blank line. Anything else is a framing violation."""
    assert b"\r" not in out, "output contains a CR: the proxy frames with LF only"
    if not out:
        return []
    assert out.endswith(b"\n\n"), f"output does not end with a blank line: {out[-40:]!r}"
    events = []
    for block in out[:-2].split(b"\n\n"):
        assert block, "empty event block (three newlines in a row)"
        data: list[bytes] = []
        other: list[bytes] = []
        for line in block.split(b"\n"):
            assert line, "an empty line inside an event"
            if line.startswith(b"data:"):
                assert line.startswith(b"data: "), f"data line without a space: {line[:40]!r}"
                data.append(line[6:])
            else:
                other.append(line)
        events.append(OutEvent(b"\n".join(data) if data else None, tuple(other)))
    return events


def input_payloads(chunks: Iterable[bytes]) -> tuple[set[bytes], set[bytes]]:
    """The data payloads and the other lines the upstream sent, as an SSE reader sees them."""
    decoder = SSEDecoder()
    events = []
    for chunk in chunks:
        events += decoder.feed(chunk)
    events += decoder.end()
    data = {e.data for e in events if e.data is not None}
    other = {line for e in events for line in e.other}
    return data, other


@dataclass
class _Call:
    id: str
    name: str
    arguments: list[str] = field(default_factory=list)
    after_finish: bool = False  # the upstream sent it after finishing its choice


@dataclass
class _Choice:
    calls: dict[int, _Call] = field(default_factory=dict)
    finish: list[object] = field(default_factory=list)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_stream(
    upstream_chunks: list[bytes],
    out: bytes,
    core: StreamSanitizer,
    *,
    policy: str,
    history_client_ids: frozenset[str] = frozenset(),
) -> list[OutEvent]:
    """Assert SPEC §4 on the client's stream; returns the parsed events."""
    events = parse_sse_output(out)
    sent_data, sent_other = input_payloads(upstream_chunks)
    # (as valid UTF-8 when it was not: the SDKs decode every line strictly)
    sent_data_lines = {
        line for data in sent_data for text in (data, utf8_safe(data)) for line in text.split(b"\n")
    }
    done_at = [i for i, e in enumerate(events) if e.data == b"[DONE]"]
    error_bytes = core.error.json_bytes() if core.error is not None else None
    # -- how the stream ends ---------------------------------------------------------------
    if core.error is not None:
        assert events and events[-1].data == error_bytes, "the breaker's error is not last"
        assert not done_at, "[DONE] sent in a stream that ended with an error"
    elif core.followup is not None:
        assert not done_at, "[DONE] sent in a round that hands over to a follow-up"
    elif core.non_json.broken is not None:
        # SPEC §4: a line that is not a JSON object inside an open call; the shell writes the
        # error event after what went out, never the call's finish.
        assert not done_at, "[DONE] sent in a round broken inside a call"
        assert any(read_object(data) is None for data in sent_data if data != b"[DONE]")
    else:
        assert done_at == [len(events) - 1], f"[DONE] must be sent once, last: at {done_at}"
    choices: dict[Any, _Choice] = {}
    seen_ids: list[str] = []
    for event in events:
        for line in event.other:
            # SPEC §4: a data line that is not JSON comes back as a comment carrying its text
            from_data = line.startswith(b": ") and line[2:] in sent_data_lines
            # ... and the `event:` line of that event too (an SDK dispatches a named event)
            from_name = line.startswith(b": event:") and line[2:] in sent_other
            assert line in sent_other or from_data or from_name, (
                f"a non-data line the upstream never sent: {line[:60]!r}"
            )
        data = event.data
        if data is None or data == b"[DONE]" or data == error_bytes:
            continue
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError:
            assert data in sent_data, f"non-JSON data that the upstream never sent: {data[:80]!r}"
            continue
        if not isinstance(chunk, dict) or not isinstance(chunk.get("choices"), list):
            continue
        for position, choice in enumerate(chunk["choices"]):
            if not isinstance(choice, dict):
                continue
            raw_index = choice.get("index")
            key = raw_index if isinstance(raw_index, int) else position
            state = choices.setdefault(key, _Choice())
            delta = choice.get("delta")
            if isinstance(delta, dict) and "tool_calls" in delta:
                _check_tool_calls(delta["tool_calls"], state, seen_ids)
            if choice.get("finish_reason") is not None:
                state.finish.append(choice["finish_reason"])
                _check_finish(choice["finish_reason"], state)
    _check_client_ids(seen_ids, history_client_ids, policy)
    if done_at and core.error is None:
        for state in choices.values():
            for call in state.calls.values():
                # "{}" for empty arguments is added when the choice finishes; a call the
                # upstream streams after its own finish_reason is past that point.
                if not call.after_finish:
                    assert "".join(call.arguments), f"call {call.id} ended with empty arguments"
    return events


def _check_tool_calls(items: object, state: _Choice, seen_ids: list[str]) -> None:
    assert isinstance(items, list) and items, f"tool_calls must be a non-empty list: {items!r}"
    for item in items:
        assert isinstance(item, dict), f"a tool call delta that is not an object: {item!r}"
        index = item.get("index")
        assert _is_int(index), f"a tool call delta without an integer index: {item!r}"
        fn = item.get("function")
        assert isinstance(fn, dict), f"a tool call delta without function: {item!r}"
        if index not in state.calls:
            # SPEC §4: the first delta of a call is its one header, indexes dense from 0.
            assert index == len(state.calls), f"index {index} is not dense ({len(state.calls)})"
            assert set(item) == HEADER_KEYS, f"header keys {sorted(item)}"
            assert set(fn) == {"name", "arguments"}, f"header function keys {sorted(fn)}"
            assert isinstance(item["id"], str) and item["id"], f"header id {item['id']!r}"
            assert item["type"] == "function", f"header type {item['type']!r}"
            assert isinstance(fn["name"], str) and fn["name"], f"header name {fn['name']!r}"
            assert isinstance(fn["arguments"], str), "arguments must be a string"
            state.calls[index] = _Call(
                item["id"], fn["name"], [fn["arguments"]], after_finish=bool(state.finish)
            )
            seen_ids.append(item["id"])
            continue
        # Later deltas carry only the index and argument fragments: never id, type or name.
        assert set(item) == FRAGMENT_KEYS, f"fragment repeats fields: {sorted(item)}"
        assert set(fn) == {"arguments"}, f"fragment function keys {sorted(fn)}"
        assert isinstance(fn["arguments"], str), "arguments must be a string"
        state.calls[index].arguments.append(fn["arguments"])


def _check_finish(reason: object, state: _Choice) -> None:
    if len(state.finish) > 1:
        return  # the upstream finished the choice again: passed through as sent
    if state.calls:
        assert reason not in ("stop", "function_call", "eos"), (
            f"finish_reason {reason!r} after delivered tool calls"
        )
    else:
        assert reason != "tool_calls", "finish_reason tool_calls without delivered calls"


def check_completion(
    body: dict[str, Any], *, policy: str, history_client_ids: frozenset[str] = frozenset()
) -> None:
    """SPEC §4's last paragraph: the same rules on `choices[].message.tool_calls`."""
    seen: list[str] = []
    choices = body.get("choices")
    choices = choices if isinstance(choices, list) else []
    keys = [
        c.get("index") if isinstance(c, dict) and isinstance(c.get("index"), int) else n
        for n, c in enumerate(choices)
    ]
    for key, choice in zip(keys, choices, strict=True):
        if not isinstance(choice, dict) or not isinstance(choice.get("message"), dict):
            continue
        message = choice["message"]
        calls = message.get("tool_calls")
        if calls is not None:  # `"tool_calls": null` is a valid "no calls" and passes
            assert isinstance(calls, list) and calls, f"tool_calls left as {calls!r}"
            for call in calls:
                assert isinstance(call, dict), f"a tool call that is not an object: {call!r}"
                assert isinstance(call.get("id"), str) and call["id"], f"id {call.get('id')!r}"
                assert call.get("type") == "function", f"type {call.get('type')!r}"
                fn = call.get("function")
                assert isinstance(fn, dict), f"function {fn!r}"
                assert isinstance(fn.get("name"), str), f"name {fn.get('name')!r}"
                assert isinstance(fn.get("arguments"), str) and fn["arguments"], "arguments"
                seen.append(call["id"])
        reason = choice.get("finish_reason")
        if keys.count(key) > 1:
            continue  # several choices claim one index: the core treats them as one choice
        if calls:
            assert reason not in ("stop", "function_call", "eos", None), f"finish {reason!r}"
        else:
            assert reason != "tool_calls", "finish_reason tool_calls without tool calls"
    _check_client_ids(seen, history_client_ids, policy)


def _check_client_ids(seen: list[str], history_client_ids: frozenset[str], policy: str) -> None:
    """SPEC §2 on the ids a response gave: unique, never a history id, in the charset."""
    if policy != "off":
        assert len(seen) == len(set(seen)), f"client ids repeat: {seen}"
        assert not set(seen) & history_client_ids, "a client id reuses a history id"
    if policy in ("auto", "always"):
        for call_id in seen:
            assert CLIENT_ID_RE.fullmatch(call_id), f"client id breaks §2's charset: {call_id!r}"
