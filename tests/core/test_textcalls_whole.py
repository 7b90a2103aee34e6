"""A whole message that is one JSON tool call (or an array of them), and nothing else."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from proxy.chat.history import translate_request
from proxy.chat.message import sanitize_completion
from proxy.chat.stream import StreamSanitizer
from proxy.core.decide import ResponseIds
from proxy.core.guard import GuardState
from proxy.core.textcalls import MAX_BLOCK_CHARS, RecoveredCall, TextCallScanner
from tests.core.test_textcalls import OFFERED, REQUEST, client_view, scan_in_pieces

CALL = '{"name": "read_file", "arguments": {"path": "/x"}}'


def calls(segments: list[Any]) -> list[tuple[str, Any]]:
    return [(s.name, orjson.loads(s.arguments)) for s in segments if isinstance(s, RecoveredCall)]


@pytest.mark.parametrize(
    "text",
    [
        CALL,
        "\n  " + CALL + "\n",
        '{"name": "read_file", "parameters": {"path": "/x"}}',
        '{"arguments": {"path": "/x"}, "name": "read_file"}',  # Hermes-2-Pro's key order
        '{"type": "function", "name": "read_file", "parameters": {"path": "/x"}}',
        '{"name": "read_file", "arguments": "{\\"path\\": \\"/x\\"}"}',  # arguments as a string
        "[" + CALL + "]",
    ],
)
def test_the_whole_content_as_one_call(text: str) -> None:
    for cuts in ([], list(range(1, len(text)))):
        [call] = scan_in_pieces(text, cuts)
        assert isinstance(call, RecoveredCall) and call.format == "json"
        assert (call.name, orjson.loads(call.arguments), call.raw_id) == (
            "read_file",
            {"path": "/x"},
            None,
        )


def test_an_array_of_calls() -> None:
    text = f'[{CALL}, {{"name": "run_shell_command", "parameters": {{"command": "ls"}}}}]'
    assert calls(scan_in_pieces(text, [])) == [
        ("read_file", {"path": "/x"}),
        ("run_shell_command", {"command": "ls"}),
    ]


@pytest.mark.parametrize(
    "text",
    [
        "Here: " + CALL,  # prose before
        CALL + " done",  # prose after
        CALL + CALL,
        '{"name": "rm_rf", "arguments": {}}',  # not offered
        '{"name": "read_file", "arguments": {}, "description": "x"}',  # not only call keys
        '{"name": "read_file", "arguments": [1]}',
        '[{"name": "read_file"}, {"name": "rm_rf"}]',
        "[]",
        "{}",
        '{"name": "read_file", "arguments": {"path": "/x"}',  # never completes
        '{"answer": 42}',
        "[1, 2]",
        "   ",
    ],
)
def test_anything_else_stays_exactly_as_it_came(text: str) -> None:
    for cuts in ([], list(range(1, len(text)))):
        assert scan_in_pieces(text, cuts) == ([text] if text else [])


def test_content_that_cannot_be_json_is_released_at_once() -> None:
    scanner = TextCallScanner(OFFERED)
    assert scanner.holding  # nothing seen yet: the whole message may still be a call
    assert scanner.feed("  ") == []
    assert scanner.holding
    assert scanner.feed("Hello {") == ["  Hello {"]
    assert not scanner.holding


# `[TOOLS` alone may still become a pythonic call list (`[TOOLS(a=1)]`): what follows the
# name decides it.
@pytest.mark.parametrize(
    "start", ['{"answer": 4', "[1", '[{"x"', "{ not json", "[TOOLS]", "[TOOLS ", "[f (", "fox"]
)
def test_json_that_does_not_open_like_a_call_is_released_at_its_first_key(start: str) -> None:
    scanner = TextCallScanner(OFFERED)
    assert "".join(map(str, scanner.feed(start))) == start


def test_a_call_is_held_until_the_content_ends() -> None:
    scanner = TextCallScanner(OFFERED)
    assert scanner.feed(CALL[:20]) == []
    assert scanner.feed(CALL[20:]) == []
    assert scanner.holding
    assert calls(scanner.end()) == [("read_file", {"path": "/x"})]


def test_text_after_the_value_releases_it_to_the_marker_formats() -> None:
    hermes = '<tool_call>{"name": "run_shell_command", "arguments": {"command": "ls"}}</tool_call>'
    segments = scan_in_pieces(CALL + " " + hermes, [10, 60])
    assert segments[0] == CALL + " "
    assert calls(segments) == [("run_shell_command", {"command": "ls"})]


def test_a_value_past_the_block_limit_is_released() -> None:
    big = '{"name": "read_file", "arguments": {"path": "' + "x" * MAX_BLOCK_CHARS + '"}}'
    scanner = TextCallScanner(OFFERED)
    released = scanner.feed(big[:1000]) + scanner.feed(big[1000:])
    assert "".join(map(str, released)) == big and not scanner.holding


# --- through the cores ---------------------------------------------------------------------------


def ids() -> ResponseIds:
    return ResponseIds(
        translate_request(REQUEST, "auto").facts, "auto", GuardState(), lambda: "abcd"
    )


def test_message_core_turns_the_content_into_the_call() -> None:
    body = {
        "id": "x",
        "choices": [
            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": CALL}}
        ],
    }
    result = sanitize_completion(body, ids(), text_tool_calls=True)
    choice = result.body["choices"][0]
    assert choice["message"]["content"] is None
    # SPEC §2.2: the random half, then the digest of the (absent) raw id
    assert [(c["id"][:-4], c["function"]["name"]) for c in choice["message"]["tool_calls"]] == [
        ("call_1_0_abcd", "read_file")
    ]
    assert choice["finish_reason"] == "tool_calls"


def event(delta: dict[str, Any], reason: str | None = None) -> bytes:
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    chunk["choices"] = [{"index": 0, "delta": delta, "finish_reason": reason}]
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


def stream(events: list[bytes]) -> tuple[StreamSanitizer, list[dict[str, Any]]]:
    """The core (its `parsed_chunks`: the rest left on the hot path as they came) and the
    client's chunks."""
    core = StreamSanitizer(ids(), text_tool_calls=True)
    out: list[bytes] = []
    for data in events:  # one read per event, as a paced upstream sends them
        out += core.feed(data)
    out += core.end()
    raw = b"".join(out)
    return core, [orjson.loads(e[6:]) for e in raw.split(b"\n\n") if e.startswith(b"data: {")]


def test_stream_recovers_a_whole_message_call_after_reasoning() -> None:
    events = [event({"role": "assistant", "content": ""})]
    events += [event({"reasoning_content": f"think {i} "}) for i in range(20)]
    events += [event({"content": "\n"})]
    events += [event({"content": CALL[i : i + 5]}) for i in range(0, len(CALL), 5)]
    core, out = stream([*events, event({}, "stop")])
    content, got, finish = client_view(out)
    assert (content, finish) == ("", "tool_calls")
    assert [(i[:-4], n, orjson.loads(a)) for i, n, a in got] == [
        ("call_1_0_abcd", "read_file", {"path": "/x"})
    ]
    # Reasoning carries no content: it kept the hot path while the scanner waited for content.
    assert core.parsed_chunks <= 2 + len(events) - 21


def test_stream_json_after_prose_stays_text_and_the_hot_path_resumes() -> None:
    events = [event({"role": "assistant", "content": ""}), event({"content": "Hello. "})]
    events += [event({"content": CALL[i : i + 5]}) for i in range(0, len(CALL), 5)]
    core, out = stream([*events, event({}, "stop")])
    assert client_view(out) == ("Hello. " + CALL, [], "stop")
    # the role chunk and the finish: the first content decides that the message is not one
    # JSON call from its bytes (stream.PLAIN_START), and the JSON after it is text
    assert core.parsed_chunks == 2
