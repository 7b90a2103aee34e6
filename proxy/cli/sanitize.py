"""`toolcall-proxy sanitize`: the streaming core run offline on a captured SSE stream.

Reads the upstream's stream (a file or stdin) and optionally the request JSON it answered,
writes the stream the client would have received to stdout and, with --explain, one line
per decision to stderr. This is how a user debugs a provider without a network.
Anthropic Messages captures (an event stream with `message_start`, or a whole message body)
run through that surface's exchange (`--surface`, told by the capture when `auto`), and so
do OpenAI Responses captures (its events or a whole response, or a request with `input`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from proxy.chat.history import translate_request
from proxy.chat.stream import StreamSanitizer
from proxy.cli.sanitize_anthropic import run_anthropic
from proxy.core.decide import ResponseIds
from proxy.core.guard import GuardState
from proxy.core.notes import explain
from proxy.core.rounds import RouteRules
from proxy.responses.offline import looks_like_responses, sanitize_responses

# Read the capture in pieces, as a socket would deliver it.
READ_SIZE = 64 * 1024


def run_sanitize(args: argparse.Namespace) -> int:
    request = _load_request(args.request) if args.request else {"messages": []}
    if request is None:
        return 2
    source = _open(args.stream)
    if source is None:
        return 2
    with source:
        first = source.read(READ_SIZE)
        given = request if args.request else None
        surface = _surface(args, first, given)
        if surface == "responses":
            return _run_responses(args, given, first, source)
        if surface == "anthropic":
            return run_anthropic(args, request, first, source)
        return _run_chat(args, request, first, source)


def _open(path: str) -> BinaryIO | None:
    try:
        return sys.stdin.buffer if path == "-" else open(path, "rb")
    except OSError as exc:
        print(f"toolcall-proxy sanitize: cannot read {path}: {exc.strerror}", file=sys.stderr)
        return None


def _surface(args: argparse.Namespace, first: bytes, request: dict[str, Any] | None) -> str:
    """The capture's API: as told, else Responses or Anthropic when it looks like one of
    their streams or bodies (Responses first: its items are `"type":"message"` too)."""
    surface: str = getattr(args, "surface", "auto")
    if surface != "auto":
        return surface
    if looks_like_responses(first, request):
        return "responses"
    head = first.lstrip()
    if b"message_start" in first or b"content_block_" in first:
        return "anthropic"
    if head.startswith(b"{") and b'"type":"message"' in head.replace(b" ", b""):
        return "anthropic"
    return "chat"


def _run_responses(
    args: argparse.Namespace, request: dict[str, Any] | None, first: bytes, source: BinaryIO
) -> int:
    """A Responses capture (SPEC §8): its events or body through the Responses exchange."""
    rules = RouteRules(
        ids=args.ids, dialect=args.dialect, text_tool_calls=args.text_tool_calls == "auto"
    )
    out = sys.stdout.buffer

    def reads() -> Iterator[bytes]:
        chunk = first
        while chunk:
            yield chunk
            chunk = source.read(READ_SIZE)

    def write(data: bytes) -> None:
        out.write(data)

    def say(line: str) -> None:
        if args.explain or line.startswith("toolcall-proxy"):
            print(line, file=sys.stderr)

    status = sanitize_responses(reads(), first, request, rules, write, say)
    out.flush()
    return status


def _run_chat(
    args: argparse.Namespace, request: dict[str, Any], first: bytes, source: BinaryIO
) -> int:
    translated = translate_request(request, args.dialect)
    if args.explain:
        for item in translated.translations:
            if item.client_id != item.upstream_id:
                print(
                    f"history: id {item.client_id!r} ({item.name}) -> upstream {item.upstream_id!r}",
                    file=sys.stderr,
                )
    core = StreamSanitizer(
        ResponseIds(translated.facts, args.ids, GuardState()),
        text_tool_calls=args.text_tool_calls == "auto",
    )
    out = sys.stdout.buffer
    chunk = first
    while chunk:
        out.write(b"".join(core.feed(chunk)))
        _explain(core, args.explain)
        chunk = source.read(READ_SIZE)
    out.write(b"".join(core.end()))
    out.flush()
    _explain(core, args.explain)
    if args.explain:
        _explain_followup(core)
    if core.error is not None:
        print(f"toolcall-proxy sanitize: {core.error.message}", file=sys.stderr)
        return 1
    return 0


def _load_request(path: str) -> dict[str, Any] | None:
    """The request the capture answered (None, with the reason printed, when unusable)."""
    try:
        loaded = orjson.loads(Path(path).read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        print(f"toolcall-proxy sanitize: cannot read request {path}: {exc}", file=sys.stderr)
        return None
    if not isinstance(loaded, dict) or not (
        isinstance(loaded.get("messages"), list) or "input" in loaded
    ):
        print(
            "toolcall-proxy sanitize: the request must be a JSON object with a messages list"
            " (Chat Completions, Anthropic) or an input (Responses)",
            file=sys.stderr,
        )
        return None
    return loaded


def _explain_followup(core: StreamSanitizer) -> None:
    for replay in core.followup.replays if core.followup is not None else ():
        print(
            f"replay: {replay.name} id {replay.raw_id!r} (matched the {replay.form} of "
            f"{replay.client_id or 'an answered call'!r}) would be answered by the proxy "
            "with a synthetic tool message and a follow-up request",
            file=sys.stderr,
        )


def _explain(core: StreamSanitizer, enabled: bool) -> None:
    if enabled:
        for note in core.notes:
            print(explain(note), file=sys.stderr)
    core.notes.clear()
