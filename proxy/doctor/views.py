"""What a provider sent, call by call: raw Chat Completions responses parsed for the observers.

A streamed response is read with the proxy's own SSE decoder; its tool-call deltas are grouped
into calls by the rules of SPEC §4 (by `index`; where it is missing a delta with a name starts
a call; a named delta with another id at an occupied index starts one too). A non-streamed
response's calls are each one "delta". Nothing here repairs anything: every raw value is kept
for the observers to judge.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from proxy.core.ids import normalize_raw_id
from proxy.core.sse import SSEDecoder
from proxy.doctor.session import RecordedExchange

JSON = dict[str, Any]


@dataclass
class RawCall:
    """One tool call as the provider sent it: its deltas' raw `tool_calls` entries, in order."""

    entries: list[JSON] = field(default_factory=list)

    @property
    def first_id(self) -> str | None:
        """The first usable id (SPEC §2.3: numbers as strings; empty and "null" are none)."""
        for entry in self.entries:
            raw_id = normalize_raw_id(entry.get("id"))
            if raw_id is not None:
                return raw_id
        return None

    @property
    def name(self) -> str | None:
        for entry in self.entries:
            name = _function(entry).get("name")
            if isinstance(name, str) and name:
                return name
        return None

    @property
    def fragments(self) -> list[object]:
        """Every `arguments` value as sent (strings, objects, null), absent keys left out."""
        return [fn["arguments"] for fn in map(_function, self.entries) if "arguments" in fn]

    def arguments_text(self) -> str:
        """The arguments as a client that concatenates strings would end up with them."""
        parts = self.fragments
        return "".join(
            p if isinstance(p, str) else orjson.dumps(p).decode() for p in parts if p is not None
        )


@dataclass
class ResponseView:
    """One response of the chat surface, parsed."""

    exchange: RecordedExchange
    calls: list[RawCall] = field(default_factory=list)
    content: str = ""
    finish_reasons: list[object] = field(default_factory=list)  # every non-null value
    choices_seen: bool = False  # a chunk or body with a choice at all
    done: bool = False  # `data: [DONE]` arrived (streams)
    comments: list[bytes] = field(default_factory=list)  # SSE comment lines (`: keep-alive`)
    non_json: list[bytes] = field(default_factory=list)  # data lines that are not JSON
    crlf: bool = False  # `\r` line ends
    data_without_space: bool = False  # `data:{...}`
    stream_error: str | None = None  # an `error` event ended the stream (no finish expected)

    @property
    def streamed(self) -> bool:
        return self.exchange.stream

    @property
    def label(self) -> str:
        return self.exchange.label


def _function(entry: JSON) -> JSON:
    fn = entry.get("function")
    return fn if isinstance(fn, dict) else {}


def _index(entry: JSON) -> int | None:
    index = entry.get("index")
    return index if isinstance(index, int) and not isinstance(index, bool) else None


def _starts_new_call(current: RawCall, entry: JSON) -> bool:
    """SPEC §4's rule for a delta that arrives where a call is already open."""
    name = _function(entry).get("name")
    if not (isinstance(name, str) and name) or current.name is None:
        return False
    raw_id = normalize_raw_id(entry.get("id"))
    if _index(entry) is None:  # no index: a name starts a call, unless it only repeats the id
        return raw_id is None or raw_id != current.first_id
    return raw_id is not None and current.first_id is not None and raw_id != current.first_id


def group_calls(entries: list[JSON]) -> list[RawCall]:
    calls: list[RawCall] = []
    by_index: dict[int, RawCall] = {}
    last: RawCall | None = None
    for entry in entries:
        index = _index(entry)
        current = by_index.get(index) if index is not None else last
        if current is None or _starts_new_call(current, entry):
            current = RawCall()
            calls.append(current)
            if index is not None:
                by_index[index] = current
        current.entries.append(entry)
        last = current
    return calls


def _object(container: JSON, key: str) -> JSON:
    value = container.get(key)
    return value if isinstance(value, dict) else {}


def _error_message(chunk: object) -> str | None:
    """The message of an OpenAI-shaped error event (`data: {"error": {...}}`), if it is one."""
    error = chunk.get("error") if isinstance(chunk, dict) else None
    if not isinstance(error, dict):
        return None
    return str(error.get("message") or error.get("code") or "error")


def _first_choice(chunk: object) -> JSON | None:
    choices = chunk.get("choices") if isinstance(chunk, dict) else None
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        return choices[0]
    return None


def _tool_entries(container: JSON, key: str) -> Iterator[JSON]:
    calls = container.get(key)
    for entry in calls if isinstance(calls, list) else ():
        if isinstance(entry, dict):
            yield entry


def _read_stream(view: ResponseView) -> None:
    raw = view.exchange.raw
    view.crlf = b"\r" in raw
    decoder = SSEDecoder()
    entries: list[JSON] = []
    content: list[str] = []
    for event in [*decoder.feed(raw), *decoder.end()]:
        view.comments += [line for line in event.other if line.startswith(b":")]
        if event.data is None:
            continue
        if event.is_done:
            view.done = True
            continue
        try:
            chunk = orjson.loads(event.data)
        except orjson.JSONDecodeError:
            view.non_json.append(event.data)
            continue
        choice = _first_choice(chunk)
        if choice is None:
            view.stream_error = view.stream_error or _error_message(chunk)
            continue
        view.choices_seen = True
        delta = _object(choice, "delta")
        if isinstance(delta.get("content"), str):
            content.append(delta["content"])
        entries += _tool_entries(delta, "tool_calls")
        if choice.get("finish_reason") is not None:
            view.finish_reasons.append(choice["finish_reason"])
    view.data_without_space = any(
        line.startswith(b"data:") and not line.startswith(b"data: ")
        for line in raw.replace(b"\r", b"\n").split(b"\n")
    )
    view.content = "".join(content)
    view.calls = group_calls(entries)


def _read_whole(view: ResponseView) -> None:
    choice = _first_choice(view.exchange.json())
    if choice is None:
        return
    view.choices_seen = True
    message = _object(choice, "message")
    if isinstance(message.get("content"), str):
        view.content = message["content"]
    view.calls = [RawCall([entry]) for entry in _tool_entries(message, "tool_calls")]
    if choice.get("finish_reason") is not None:
        view.finish_reasons.append(choice["finish_reason"])


def view_of(exchange: RecordedExchange) -> ResponseView:
    view = ResponseView(exchange)
    if exchange.ok:
        (_read_stream if exchange.stream else _read_whole)(view)
    return view
