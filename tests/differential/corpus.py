"""The streams the differential check runs: recorded files, and what the request needs.

A recorded answer is one file under tests/fixtures/recorded/<surface>/: `<name>.sse` (the
event stream's bytes exactly as the provider sent them) or `<name>.json` (a non-streaming
body). Adding a file adds a test; the README beside them names each one's source.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

JSON = dict[str, Any]
RECORDED = Path(__file__).resolve().parent.parent / "fixtures" / "recorded"
SURFACES = ("chat", "anthropic", "responses")


@dataclass(frozen=True)
class Case:
    name: str
    body: bytes
    stream: bool
    source: str  # where the stream comes from (a file, a builder, a simulator profile)

    def __str__(self) -> str:
        return self.name


def recorded(surface: str) -> list[Case]:
    folder = RECORDED / surface
    return [
        Case(path.stem, path.read_bytes(), path.suffix == ".sse", str(path.relative_to(RECORDED)))
        for path in sorted(folder.iterdir())
        if path.suffix in (".sse", ".json")
    ]


# -- reading the upstream's bytes -------------------------------------------------------------


def _payload(line: bytes) -> bytes | None:
    """A `data:` line's value (one optional space after the colon), else None."""
    if not line.startswith(b"data:"):
        return None
    value = line[5:]
    return value[1:] if value.startswith(b" ") else value


def _is_json(value: bytes) -> bool:
    try:
        json.loads(value)
    except ValueError:
        return False
    return True


def _commented(event: list[bytes]) -> list[bytes] | None:
    """An event whose data lines are all non-JSON (and not `[DONE]`) as comments (its other
    comments kept, its `event:` and `id:` lines gone); None for any other event."""
    values = [_payload(line.rstrip(b"\r\n")) for line in event]
    data = [v for v in values if v is not None]
    if not data or any(v.strip() == b"[DONE]" or _is_json(v) for v in data):
        return None
    out = []
    for line, value in zip(event, values, strict=True):
        end = line[len(line.rstrip(b"\r\n")) :]
        if value is not None:
            out.append(b": " + value + end)
        elif line.startswith(b":"):
            out.append(line)
    return out


def reference_body(body: bytes) -> bytes:
    """The stream the client must read as the upstream's (SPEC §4): a data line that is not
    JSON (other than `[DONE]`) is an SSE comment carrying the same text, in place; the event
    it made up is then no event (its `event:` line names nothing: SDKs that dispatch a
    data-less event would read it as an empty, invalid one). Every other byte as sent."""
    out: list[bytes] = []
    event: list[bytes] = []
    for line in body.splitlines(keepends=True):
        if line.strip(b"\r\n"):
            event.append(line)
            continue
        out += _commented(event) or event
        out.append(line)
        event = []
    out += _commented(event) or event
    return b"".join(out)


def events(body: bytes) -> list[JSON]:
    """Every JSON object of the stream's data lines (one-line events, as every fixture is)."""
    out = []
    for line in body.splitlines():
        value = _payload(line)
        if value is not None and _is_json(value):
            parsed = json.loads(value)
            if isinstance(parsed, dict):
                out.append(parsed)
    return out


def documents(case: Case) -> list[JSON]:
    return events(case.body) if case.stream else [json.loads(case.body)]


def tool_names(case: Case) -> list[str]:
    """The client tools the answer calls, so the request offers them as a real one would."""
    names: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            kind = node.get("type")
            name = node.get("name")
            fn = node.get("function")
            if kind in ("tool_use", "function_call", "custom_tool_call") and isinstance(name, str):
                names.append(name)
            if isinstance(fn, dict) and isinstance(fn.get("name"), str) and fn["name"]:
                names.append(fn["name"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for document in documents(case):
        walk(document)
    return sorted(set(names))
