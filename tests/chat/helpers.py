"""Shared helpers for the core's tests: build upstream streams, feed them at every split point,
parse what the client receives and reassemble tool calls the way an SDK does.

The client's view is what matters (SPEC §4), so streams are compared as parsed events, and tool
calls are reassembled by concatenating every string field per (choice, index), which is what
naive clients (and the openai SDK for everything but `type`) do: a repeated `id` or `name`
shows up as `call_xcall_x`, a repeated `type` as `functionfunction`.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from proxy.chat.history import TranslatedRequest, translate_request
from proxy.chat.stream import Carry, StreamSanitizer
from proxy.core.decide import ResponseIds
from proxy.core.guard import GuardState
from proxy.core.ids import mint_client_id

HEX = "dead"  # the random half of a minted id's hex8 (SPEC §2.2)
CLIENT_ID_RE = re.compile(r"[A-Za-z0-9_-]{1,40}")
USER = {"role": "user", "content": "hi"}


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()
"""A key that is absent (as opposed to present with the value null)."""


def _put(target: dict[str, Any], key: str, value: Any) -> None:
    if value is not MISSING:
        target[key] = value


# -- building upstream streams ---------------------------------------------------------------


def tool(
    index: Any = MISSING,
    id: Any = MISSING,
    name: Any = MISSING,
    arguments: Any = MISSING,
    type: Any = MISSING,
    **extra: Any,
) -> dict[str, Any]:
    """One element of `delta.tool_calls`; MISSING leaves a key out."""
    item: dict[str, Any] = {}
    _put(item, "index", index)
    _put(item, "id", id)
    _put(item, "type", type)
    fn: dict[str, Any] = {}
    _put(fn, "name", name)
    _put(fn, "arguments", arguments)
    if fn:
        item["function"] = fn
    item.update(extra)
    return item


def header(index: Any, id: Any, name: str, arguments: Any = "") -> dict[str, Any]:
    """OpenAI's first delta of a call."""
    return tool(index=index, id=id, type="function", name=name, arguments=arguments)


def frag(index: Any, arguments: Any) -> dict[str, Any]:
    return tool(index=index, arguments=arguments)


def chunk(
    delta: Any = MISSING,
    finish: Any = None,
    *,
    choice: int = 0,
    id: Any = "chatcmpl-1",
    model: Any = "m",
    created: Any = 1,
    usage: Any = MISSING,
    **extra: Any,
) -> dict[str, Any]:
    """A `chat.completion.chunk` with one choice."""
    body: dict[str, Any] = {"id": id, "object": "chat.completion.chunk", "created": created}
    _put(body, "model", model)
    ch: dict[str, Any] = {"index": choice}
    _put(ch, "delta", {} if delta is MISSING else delta)
    ch["finish_reason"] = finish
    body["choices"] = [ch]
    _put(body, "usage", usage)
    body.update(extra)
    return body


def calls(*items: dict[str, Any], finish: Any = None, **kw: Any) -> dict[str, Any]:
    return chunk({"tool_calls": list(items)}, finish, **kw)


def text(content: str, finish: Any = None, **kw: Any) -> dict[str, Any]:
    return chunk({"content": content}, finish, **kw)


def role(**kw: Any) -> dict[str, Any]:
    return chunk({"role": "assistant", "content": ""}, **kw)


def finish(reason: Any = "tool_calls", **kw: Any) -> dict[str, Any]:
    return chunk({}, reason, **kw)


def usage_chunk(prompt: int = 10, completion: int = 5, *, choices: Any = ()) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": list(choices) if isinstance(choices, tuple) else choices,
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
    }
    return body


Item = dict[str, Any] | bytes


def sse(*items: Item, done: bool = True, eol: str = "\n", space: bool = True) -> bytes:
    """Frame chunks as an upstream would. A `bytes` item is a raw event body (comment lines,
    `event:` lines, a non-JSON data line) framed as given, with `eol` line ends."""
    nl = eol.encode()
    prefix = b"data: " if space else b"data:"
    out = bytearray()
    for item in items:
        if isinstance(item, bytes):
            out += item.replace(b"\n", nl) + nl + nl
        else:
            out += prefix + orjson.dumps(item) + nl + nl
    if done:
        out += prefix + b"[DONE]" + nl + nl
    return bytes(out)


# -- requests and cores ----------------------------------------------------------------------


def request(
    messages: list[Any] | None = None,
    *,
    model: str = "gpt-4o",
    n: int | None = None,
    **extra: Any,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "messages": [USER] if messages is None else messages,
        "stream": True,
    }
    if n is not None:
        body["n"] = n
    body.update(extra)
    return body


def assistant(*tool_calls: dict[str, Any], content: str | None = None) -> dict[str, Any]:
    return {"role": "assistant", "content": content, "tool_calls": list(tool_calls)}


def hcall(id: Any, name: str, arguments: Any = "{}") -> dict[str, Any]:
    """A tool call as it appears in a history."""
    return {"id": id, "type": "function", "function": {"name": name, "arguments": arguments}}


def tool_msg(tool_call_id: Any, content: str = "ok") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": tool_call_id, "content": content}


def hexes(*values: str) -> Callable[[], str]:
    """A hex source giving each choice its own suffix, in order of first use."""
    pending = list(values)
    extra = iter(range(1, 2**32))

    def source() -> str:
        return pending.pop(0) if pending else f"{next(extra):04x}"

    return source


@dataclass
class Setup:
    """Everything a core is built from; a factory so each replay gets a fresh core."""

    body: dict[str, Any] = field(default_factory=request)
    dialect: str = "auto"
    policy: str = "auto"
    guard: bool = True
    max_followups: int = 2
    hex_values: tuple[str, ...] = ()
    carry: Carry | None = None

    def translated(self) -> TranslatedRequest:
        return translate_request(self.body, self.dialect)

    def ids(self, guard: GuardState | None = None) -> ResponseIds:
        tr = self.translated()
        source = hexes(*self.hex_values) if self.hex_values else (lambda: HEX)
        state = guard or GuardState(enabled=self.guard, max_followups=self.max_followups)
        return ResponseIds(tr.facts, self.policy, state, hex_source=source)

    def core(self) -> StreamSanitizer:
        # a copy: a continuation round updates its carry (usage) as it goes
        return StreamSanitizer(self.ids(), carry=copy.deepcopy(self.carry))


def make_core(body: dict[str, Any] | None = None, **kw: Any) -> StreamSanitizer:
    return Setup(body=body or request(), **kw).core()


# -- feeding ---------------------------------------------------------------------------------


def feed_reads(core: StreamSanitizer, reads: Iterable[bytes], *, end: bool = True) -> bytes:
    out = bytearray()
    for read in reads:
        for piece in core.feed(read):
            assert isinstance(piece, bytes)
            out += piece
    if end:
        for piece in core.end():
            assert isinstance(piece, bytes)
            out += piece
    return bytes(out)


def splittings(data: bytes, *, every: bool = True) -> Iterator[tuple[str, list[bytes]]]:
    """Whole, one byte at a time, and (with `every`) in two reads at every split point."""
    yield "whole", [data]
    yield "bytewise", [data[i : i + 1] for i in range(len(data))]
    if every:
        for cut in range(1, len(data)):
            yield f"split@{cut}", [data[:cut], data[cut:]]


@dataclass
class Run:
    out: bytes
    events: list[Event]
    core: StreamSanitizer


def run(factory: Callable[[], StreamSanitizer], data: bytes, *, every: bool = True) -> Run:
    """Feed `data` whole, byte by byte and at every split point into fresh cores; assert the
    client sees identical events each time; return the whole-read result."""
    core = factory()
    out = feed_reads(core, [data])
    expected = parse_sse(out)
    for label, reads in splittings(data, every=every):
        if label == "whole":
            continue
        other = factory()
        got = feed_reads(other, reads)
        if got != out:  # identical bytes are identical events; otherwise compare events
            assert parse_sse(got) == expected, f"{label}: client events differ from a whole read"
        assert other.followup == core.followup, label
        assert (other.error is None) == (core.error is None), label
    return Run(out, expected, core)


# -- what the client sees --------------------------------------------------------------------


@dataclass(frozen=True)
class Event:
    """One client-side event: `data` parsed as JSON when it is JSON, else the raw text."""

    data: Any
    raw: str | None
    other: tuple[str, ...] = ()

    @property
    def is_done(self) -> bool:
        return self.raw == "[DONE]"

    @property
    def is_error(self) -> bool:
        return isinstance(self.data, dict) and "error" in self.data

    @property
    def is_chunk(self) -> bool:
        return isinstance(self.data, dict) and "error" not in self.data


_NO_JSON = object()


def parse_sse(out: bytes) -> list[Event]:
    """Parse the proxy's output strictly: OpenAI framing, `\\n` line ends, every event ended by a
    blank line, valid UTF-8."""
    text_out = out.decode("utf-8")
    assert "\r" not in text_out, "the client stream must use \\n line ends"
    if not text_out:
        return []
    assert text_out.endswith("\n\n"), f"stream does not end with a blank line: {text_out[-40:]!r}"
    events = []
    for block in text_out[:-2].split("\n\n"):
        assert block, "empty event block"
        data_lines = []
        other = []
        for line in block.split("\n"):
            if line.startswith("data: "):
                data_lines.append(line[6:])
            else:
                assert not line.startswith("data:"), line
                other.append(line)
        if data_lines:
            raw = "\n".join(data_lines)
            try:
                data = json.loads(raw)
            except ValueError:
                data = _NO_JSON
            events.append(Event(None if data is _NO_JSON else data, raw, tuple(other)))
        else:
            events.append(Event(None, None, tuple(other)))
    return events


def chunks_of(events: list[Event]) -> list[dict[str, Any]]:
    return [e.data for e in events if e.is_chunk]


def choice_deltas(events: list[Event], choice: int = 0) -> list[dict[str, Any]]:
    out = []
    for body in chunks_of(events):
        for ch in body.get("choices") or ():
            if ch.get("index") == choice:
                out.append(ch)
    return out


def content_of(events: list[Event], choice: int = 0, key: str = "content") -> str:
    parts = []
    for ch in choice_deltas(events, choice):
        delta = ch.get("delta") or {}
        if isinstance(delta.get(key), str):
            parts.append(delta[key])
    return "".join(parts)


def finish_reasons(events: list[Event], choice: int = 0) -> list[Any]:
    return [ch["finish_reason"] for ch in choice_deltas(events, choice) if ch.get("finish_reason")]


def tool_deltas(events: list[Event], choice: int = 0) -> list[dict[str, Any]]:
    out = []
    for ch in choice_deltas(events, choice):
        out.extend((ch.get("delta") or {}).get("tool_calls") or ())
    return out


def _concat(acc: dict[str, Any], delta: dict[str, Any]) -> None:
    for key, value in delta.items():
        if key == "index":
            acc[key] = value
        elif isinstance(value, dict):
            _concat(acc.setdefault(key, {}), value)
        elif isinstance(value, str) and isinstance(acc.get(key), str):
            acc[key] += value
        else:
            acc[key] = value


def reassemble(events: list[Event], choice: int = 0) -> list[dict[str, Any]]:
    """Tool calls of one choice, as a client that concatenates string fields per index sees
    them, in index order."""
    by_index: dict[int, dict[str, Any]] = {}
    for delta in tool_deltas(events, choice):
        _concat(by_index.setdefault(delta["index"], {}), delta)
    return [by_index[i] for i in sorted(by_index)]


def call_summary(events: list[Event], choice: int = 0) -> list[tuple[str, str, str]]:
    """(id, name, arguments) per reassembled call."""
    return [
        (c.get("id"), c.get("function", {}).get("name"), c.get("function", {}).get("arguments"))
        for c in reassemble(events, choice)
    ]


def choices_seen(events: list[Event]) -> set[int]:
    return {ch["index"] for body in chunks_of(events) for ch in body.get("choices") or ()}


def assert_well_formed(events: list[Event], *, ends_with_error: bool = False) -> None:
    """SPEC §4's shape rules, for every choice: one header per call, fragments carry only
    index + arguments, dense indexes from 0 in order of first appearance, no empty
    `tool_calls`, every delivered call's arguments parse, a truthful finish_reason, `[DONE]`
    exactly once and last (or an error event last and no `[DONE]`)."""
    assert events, "no events at all"
    last = events[-1]
    dones = [e for e in events if e.is_done]
    if ends_with_error:
        assert last.is_error, last
        assert not dones
    else:
        assert last.is_done, f"last event is not [DONE]: {last}"
        assert len(dones) == 1
        assert not any(e.is_error for e in events)
    for choice in choices_seen(events):
        seen: list[int] = []
        for ch in choice_deltas(events, choice):
            delta = ch.get("delta") or {}
            if "tool_calls" not in delta:
                continue
            items = delta["tool_calls"]
            assert isinstance(items, list) and items, "empty or malformed tool_calls sent"
            for item in items:
                index = item["index"]
                assert type(index) is int
                if index not in seen:
                    assert index == len(seen), f"index {index} not dense (seen {seen})"
                    seen.append(index)
                    assert set(item) == {"index", "id", "type", "function"}, item
                    assert item["type"] == "function"
                    assert CLIENT_ID_RE.fullmatch(item["id"]), item["id"]
                    assert set(item["function"]) == {"name", "arguments"}, item
                    assert isinstance(item["function"]["name"], str)
                    assert item["function"]["name"]
                    assert isinstance(item["function"]["arguments"], str)
                else:
                    assert set(item) == {"index", "function"}, item
                    assert set(item["function"]) == {"arguments"}, item
                    assert isinstance(item["function"]["arguments"], str)
        reassembled = reassemble(events, choice)
        ids = [c["id"] for c in reassembled]
        assert len(set(ids)) == len(ids), f"client ids repeat: {ids}"
        if not ends_with_error:
            for c in reassembled:
                json.loads(c["function"]["arguments"])
            reasons = finish_reasons(events, choice)
            assert len(reasons) == 1, f"choice {choice}: finish reasons {reasons}"
            if reassembled:
                assert reasons[0] in ("tool_calls", "length", "content_filter"), reasons
            else:
                assert reasons[0] != "tool_calls"


class MintedId(str):
    """A minted client id whose raw-id digest a test does not pin (tests/core/test_ids.py and
    test_replay_issued.py check the digest itself): equal to `call_{turn}_{idx}_{hex4}` + any
    four lowercase hex digits."""

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, str) or len(other) != len(self) + 4:
            return False
        tail = other[len(self) :]
        return other.startswith(self) and all(c in "0123456789abcdef" for c in tail)

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = str.__hash__


def minted(turn: int, idx: int, raw: str | object | None = ..., hex4: str = HEX) -> str:
    """The client id SPEC §2.2 mints; with the raw id given, exactly (digest included)."""
    if raw is ...:
        return MintedId(f"call_{turn}_{idx}_{hex4}")
    assert raw is None or isinstance(raw, str)
    return mint_client_id(turn, idx, hex4, raw)
