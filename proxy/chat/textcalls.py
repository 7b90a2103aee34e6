"""Tool calls leaked into the text: recover them as real tool calls (sans-IO).

When a server's tool parser is off or fails, the model's call arrives inside `content` as
raw markup. This scanner is fed content fragments and hands back text and recovered calls:
- Text flows as it arrives, except from the first character that could start a marker
  (a marker may be split across chunks) until it is resolved: released as text if it is not
  a marker, kept until the block is complete if it is.
- A block becomes calls only if it is complete, parses, and names only offered tools;
  otherwise it is released exactly as it came. Nothing is ever dropped.
Formats: Kimi section tokens, Hermes/Qwen `<tool_call>{json}</tool_call>`, Qwen3-coder
`<function=name><parameter=p>v</parameter></function>`, DeepSeek V3 and V3.1 tool tokens,
Llama `<|python_tag|>{json}`, Mistral `[TOOL_CALLS][...]` and `[TOOL_CALLS]name[ARGS]{...}`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass

import orjson

from proxy.jsontext import dumps

# A block that has not ended after this many characters is not a tool call we can recover:
# release it as text rather than hold the client's content hostage.
MAX_BLOCK_CHARS = 256 * 1024


@dataclass(frozen=True, slots=True)
class RecoveredCall:
    name: str
    arguments: str  # a JSON string
    raw_id: str | None
    format: str


Segment = str | RecoveredCall
_Parse = Callable[[str], list[tuple[str, object, str | None]] | None]

_DECODER = json.JSONDecoder()


def _json(text: str) -> object:
    return orjson.loads(text)


def _arguments(value: object) -> str:
    return value if isinstance(value, str) else dumps(value).decode()


def _name_args_object(value: object) -> tuple[str, object, None] | None:
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return None
    args = value.get("arguments", value.get("parameters", {}))
    if isinstance(args, str):
        _json(args)  # must itself be JSON
    return (value["name"], args, None)


def _parse_kimi(block: str) -> list[tuple[str, object, str | None]] | None:
    calls: list[tuple[str, object, str | None]] = []
    pattern = (
        r"<\|tool_call_begin\|>\s*(.+?)\s*<\|tool_call_argument_begin\|>(.*?)<\|tool_call_end\|>"
    )
    for match in re.finditer(pattern, block, re.S):
        call_id = match.group(1)
        name = call_id.split(".", 1)[1] if call_id.startswith("functions.") else call_id
        name = name.rsplit(":", 1)[0]
        args = match.group(2).strip() or "{}"
        _json(args)
        calls.append((name, args, call_id))
    return calls or None


def _parse_hermes(block: str) -> list[tuple[str, object, str | None]] | None:
    body = block[len("<tool_call>") : -len("</tool_call>")].strip()
    if body.startswith("<function="):
        return _parse_qwen_coder(body)
    call = _name_args_object(_json(body))
    return [call] if call else None


def _parse_qwen_coder(block: str) -> list[tuple[str, object, str | None]] | None:
    match = re.fullmatch(r"\s*<function=([^>\s]+)>(.*)</function>\s*", block, re.S)
    if match is None:
        return None
    params: dict[str, object] = {}
    for param in re.finditer(r"<parameter=([^>\s]+)>(.*?)</parameter>", match.group(2), re.S):
        raw = param.group(2).strip("\n")
        try:
            params[param.group(1)] = _json(raw.strip())
        except orjson.JSONDecodeError:
            params[param.group(1)] = raw
    return [(match.group(1), params, None)]


# DeepSeek's tool tokens use FULLWIDTH VERTICAL LINE (U+FF5C) and LOWER ONE EIGHTH BLOCK (U+2581).
_DS_CALLS_BEGIN = "<\uff5ctool\u2581calls\u2581begin\uff5c>"
_DS_CALLS_END = "<\uff5ctool\u2581calls\u2581end\uff5c>"
_DS_CALL_BEGIN = "<\uff5ctool\u2581call\u2581begin\uff5c>"
_DS_CALL_END = "<\uff5ctool\u2581call\u2581end\uff5c>"
_DS_SEP = "<\uff5ctool\u2581sep\uff5c>"


def _parse_deepseek(block: str) -> list[tuple[str, object, str | None]] | None:
    calls: list[tuple[str, object, str | None]] = []
    pattern = _DS_CALL_BEGIN + "(.*?)" + _DS_SEP + "(.*?)" + _DS_CALL_END
    for match in re.finditer(pattern, block, re.S):
        head, body = match.group(1).strip(), match.group(2)
        if head == "function":  # V3: name on the first line, JSON in a fenced block
            fenced = re.fullmatch(r"\s*([^\n]+)\n```(?:json)?\s*(.*?)\s*```\s*", body, re.S)
            if fenced is None:
                return None
            name, args = fenced.group(1).strip(), fenced.group(2)
        else:  # V3.1: name, separator, JSON
            name, args = head, body.strip()
        _json(args)
        calls.append((name, args, None))
    return calls or None


def _parse_json_calls(body: str) -> list[tuple[str, object, str | None]] | None:
    value = _json(body)
    items = value if isinstance(value, list) else [value]
    calls = [_name_args_object(item) for item in items]
    if not calls or any(c is None for c in calls):
        return None
    return [c for c in calls if c is not None]


def _parse_mistral(body: str) -> list[tuple[str, object, str | None]] | None:
    named = re.fullmatch(r"\s*([\w.-]+)\[ARGS\](.*)", body, re.S)
    if named:
        args = named.group(2).strip()
        _json(args)
        return [(named.group(1), args, None)]
    return _parse_json_calls(body)


def _json_end(body: str) -> int | None:
    """Where the JSON value at the start of `body` ends (None while incomplete)."""
    stripped = len(body) - len(body.lstrip())
    named = re.match(r"\s*[\w.-]+\[ARGS\]", body)
    start = named.end() if named else stripped
    start += len(body[start:]) - len(body[start:].lstrip())
    if start >= len(body) or body[start] not in "[{":
        return None
    try:
        _, end = _DECODER.raw_decode(body, start)
    except json.JSONDecodeError:
        return None
    return end


@dataclass(frozen=True, slots=True)
class _Format:
    name: str
    start: str
    end: str | None  # None: the block ends where its JSON value ends
    parse: _Parse
    body_only: bool = False  # parse() gets the text after the start marker
    # What the body may start with (after whitespace). Prose that merely mentions a marker
    # is released at once instead of being held to the end of the message.
    opens: tuple[str, ...] | None = None

    def implausible(self, body: str) -> bool:
        if self.opens is None:
            return False
        head = body.lstrip()
        if not head:
            return False
        return not any(o.startswith(head[: len(o)]) for o in self.opens)


FORMATS = (
    _Format(
        "kimi",
        "<|tool_calls_section_begin|>",
        "<|tool_calls_section_end|>",
        _parse_kimi,
        opens=("<|tool_call_begin|>", "<|tool_calls_section_end|>"),
    ),
    _Format("kimi", "<|tool_call_begin|>", "<|tool_call_end|>", _parse_kimi),
    _Format("hermes", "<tool_call>", "</tool_call>", _parse_hermes, opens=("{", "<function=")),
    _Format("qwen3-coder", "<function=", "</function>", _parse_qwen_coder),
    _Format(
        "deepseek",
        _DS_CALLS_BEGIN,
        _DS_CALLS_END,
        _parse_deepseek,
        opens=(_DS_CALL_BEGIN,),
    ),
    _Format("llama", "<|python_tag|>", None, _parse_json_calls, body_only=True, opens=("{", "[")),
    _Format("mistral", "[TOOL_CALLS]", None, _parse_mistral, body_only=True),
)
_LONGEST_START = max(len(f.start) for f in FORMATS)
_START_CHARS = frozenset(f.start[0] for f in FORMATS)


class TextCallScanner:
    """Sans-IO: `feed(text) -> list[Segment]`, `end() -> list[Segment]`."""

    __slots__ = ("_buffer", "_format", "_offered", "recovered")

    def __init__(self, offered_tools: frozenset[str]):
        self._offered = offered_tools
        self._buffer = ""
        self._format: _Format | None = None
        self.recovered = 0

    @property
    def holding(self) -> bool:
        return bool(self._buffer)

    def feed(self, text: str) -> list[Segment]:
        self._buffer += text
        out: list[Segment] = []
        while self._buffer:
            if self._format is None:
                if not self._scan(out):
                    break
            elif not self._close_block(out, final=False):
                break
        return _merge_text(out)

    def end(self) -> list[Segment]:
        out: list[Segment] = []
        if self._format is not None:
            self._close_block(out, final=True)
        if self._buffer:
            out.append(self._buffer)
            self._buffer = ""
        return _merge_text(out)

    def _scan(self, out: list[Segment]) -> bool:
        """Release text up to a marker; True when a block started (more work to do)."""
        buffer = self._buffer
        best: tuple[int, _Format] | None = None
        for fmt in FORMATS:
            pos = buffer.find(fmt.start)
            if pos != -1 and (best is None or pos < best[0]):
                best = (pos, fmt)
        if best is not None:
            pos, fmt = best
            if pos:
                out.append(buffer[:pos])
            self._buffer = buffer[pos:]
            self._format = fmt
            return True
        hold = self._partial_marker_start(buffer)
        if hold:
            out.append(buffer[:hold])
        self._buffer = buffer[hold:]
        return False

    @staticmethod
    def _partial_marker_start(buffer: str) -> int:
        """Index of the earliest tail of `buffer` that could still grow into a marker."""
        base = max(0, len(buffer) - _LONGEST_START + 1)
        for i in range(base, len(buffer)):
            if buffer[i] in _START_CHARS:
                tail = buffer[i:]
                if any(f.start.startswith(tail) for f in FORMATS):
                    return i
        return len(buffer)

    def _close_block(self, out: list[Segment], *, final: bool) -> bool:
        """Finish the current block if it is complete; True when it was resolved."""
        fmt = self._format
        assert fmt is not None
        buffer = self._buffer
        body_start = len(fmt.start)
        if fmt.implausible(buffer[body_start:]):
            self._release_as_text(out, body_start)
            return True
        if fmt.end is not None:
            end = buffer.find(fmt.end, body_start)
            stop = end + len(fmt.end) if end != -1 else None
        else:
            json_end = _json_end(buffer[body_start:])
            stop = body_start + json_end if json_end is not None else None
            if stop is None and final:
                stop = len(buffer)
        if stop is None:
            if len(buffer) > MAX_BLOCK_CHARS or final:
                self._release_as_text(out, len(buffer))
                return True
            return False
        block = buffer[:stop]
        calls = self._parse(fmt, block)
        if calls is None:
            self._release_as_text(out, stop)
            return True
        out.extend(calls)
        self.recovered += len(calls)
        self._buffer = buffer[stop:]
        self._format = None
        return True

    def _release_as_text(self, out: list[Segment], stop: int) -> None:
        # The marker itself goes out as text, and scanning resumes after it.
        fmt = self._format
        assert fmt is not None
        out.append(self._buffer[: len(fmt.start)])
        self._buffer = self._buffer[len(fmt.start) :]
        self._format = None

    def _parse(self, fmt: _Format, block: str) -> list[Segment] | None:
        try:
            parsed = fmt.parse(block[len(fmt.start) :] if fmt.body_only else block)
        except (orjson.JSONDecodeError, ValueError, TypeError):
            return None
        if not parsed or any(name not in self._offered for name, _, _ in parsed):
            return None
        return [
            RecoveredCall(name, _arguments(args), raw_id, fmt.name) for name, args, raw_id in parsed
        ]


def _merge_text(segments: list[Segment]) -> list[Segment]:
    merged: list[Segment] = []
    for segment in segments:
        if isinstance(segment, str):
            if not segment:
                continue
            if merged and isinstance(merged[-1], str):
                merged[-1] += segment
                continue
        merged.append(segment)
    return merged
