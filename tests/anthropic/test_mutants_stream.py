"""SPEC §8, streaming: `AnthropicStream` at the edges the mutation audit found unpinned (an
event the body's end leaves unterminated, the note a completed `message_stop` leaves, the
breaker on a round without `message_stop`, what follows an upstream `error` event in the same
read, the index of events no handler knows, and the lines kept beside a comment)."""

from __future__ import annotations

from typing import Any

import orjson

from proxy.anthropic.exchange import AnthropicExchange
from proxy.core.events import Forward
from proxy.core.ids import mint_client_id
from proxy.core.notes import DeltaRepaired
from proxy.core.rounds import RouteRules
from tests.anthropic.anthropic_wire import (
    assistant,
    end,
    entropy,
    ev,
    parse,
    request,
    results,
    run,
    start,
    text,
    tool,
    tool_use,
)

JSON = dict[str, Any]
LS = {"command": "ls"}
THOUGHT = {"type": "thinking", "thinking": "", "signature": ""}


def exchange_of(body: JSON) -> AnthropicExchange:
    exchange = AnthropicExchange(body, orjson.dumps(body), RouteRules(), entropy)
    exchange.begin_round(stream=True)
    return exchange


def client_bytes(events: list[Any]) -> bytes:
    out = b""
    for event in events:
        out += event.data if isinstance(event, Forward) else event
    return out


def test_an_event_the_body_leaves_unterminated_is_read_at_its_end() -> None:
    # The last event lacks its blank line: only the body's end frames it.
    upstream = start() + text(0, "hi") + end("max_tokens", 9, stop=False)[:-2]
    got = run(request(), [upstream]).read()
    assert got.message["stop_reason"] == "max_tokens"
    assert got.message["usage"]["output_tokens"] == 9


def test_a_message_stop_the_proxy_adds_is_reported() -> None:
    upstream = start() + tool(0, "toolu_01A", "Bash", LS) + end("tool_use", stop=False)
    got = run(request(), [upstream])
    assert got.exchange is not None
    notes, _ = got.exchange.report()
    assert DeltaRepaired(kind="message_stop", detail="added") in notes


def test_a_message_ending_with_its_stop_reports_no_added_stop() -> None:
    got = run(request(), [start() + tool(0, "toolu_01A", "Bash", LS) + end()])
    assert got.exchange is not None
    notes, _ = got.exchange.report()
    assert all(getattr(note, "kind", None) != "message_stop" for note in notes)


def test_the_breaker_trips_when_the_body_ends_inside_the_second_replay() -> None:
    minted = mint_client_id(1, 0, "abcd", "functions.Bash:0", "toolu_")
    history = (assistant(tool_use(minted, "Bash", LS)), results(minted))
    # The same replay twice; the second's block is still open when the body ends, so the
    # breaker trips while the end completes the message.
    twice = (
        start()
        + tool(0, "functions.Bash:0", "Bash", LS)
        + tool(1, "functions.Bash:0", "Bash", LS, stop=False)
    )
    got = run(request(*history), [twice])
    assert got.loop is not None and got.followups == []
    error = got.read().error
    assert error is not None and "twice in one response" in error["error"]["message"]


def test_nothing_after_an_upstream_error_event_in_the_same_read_is_sent() -> None:
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    upstream = start() + text(0, "par", stop=False) + ev(error) + text(1, "more") + end()
    events = exchange_of(request()).feed(upstream)
    # The error ends the exchange at once: its last event says so.
    assert isinstance(events[-1], Forward) and events[-1].last
    client = client_bytes(events)
    assert client.endswith(ev(error))
    assert b"more" not in client


def test_an_unknown_event_follows_its_blocks_client_index() -> None:
    note = {"type": "block_note", "index": 5, "note": "kept"}
    upstream = (
        start()
        + ev({"type": "content_block_start", "index": 5, "content_block": THOUGHT})
        + ev(note)
        + ev({"type": "content_block_stop", "index": 5})
        + end("end_turn")
    )
    client = run(request(), [upstream]).client
    [sent] = [e for n, e in parse(client) if n == "block_note"]
    assert sent == {"type": "block_note", "index": 0, "note": "kept"}


def test_an_unknown_event_already_at_its_index_passes_byte_for_byte() -> None:
    spaced = b'event: block_note\ndata: {"type": "block_note", "index": 0, "n": 1}\n\n'
    upstream = (
        start()
        + ev({"type": "content_block_start", "index": 0, "content_block": THOUGHT})
        + spaced
        + ev({"type": "content_block_stop", "index": 0})
        + end("end_turn")
    )
    assert spaced in run(request(), [upstream]).client


def test_an_event_without_index_gets_none_from_a_block_without_one() -> None:
    # A block started without an index; a ping in it has none and gets none.
    ping = ev({"type": "ping"})
    upstream = (
        start()
        + ev({"type": "content_block_start", "content_block": THOUGHT})
        + ping
        + ev({"type": "content_block_stop"})
        + end("end_turn")
    )
    client = run(request(), [upstream]).client
    assert ping in client
    pings = [e for n, e in parse(client) if n == "ping"]
    assert pings == [{"type": "ping"}]


def test_an_event_without_a_string_type_passes_as_data_only() -> None:
    odd = b'data: {"hello": 1}\n\n'
    upstream = start() + odd + text(0, "hi") + end("end_turn")
    client = run(request(), [upstream]).client
    assert odd in client
    assert b"event: message\n" not in client


def test_a_non_json_event_keeps_its_other_lines_and_its_name_as_a_comment() -> None:
    """SPEC §4: its `event:` line becomes a comment with it (`: event: <name>`), never an
    event's name (an SSE reader would dispatch an event with no data)."""
    odd = b"event: odd\nid: 4\ndata: not json\n\n"
    upstream = start() + odd + text(0, "hi") + end("end_turn")
    client = run(request(), [upstream]).client
    assert b"\n\n: event: odd\nid: 4\n: not json\n\n" in client
    assert b"\nevent: odd" not in client


def test_an_event_without_data_keeps_its_other_lines_but_its_name() -> None:
    bare = b"event: ping\nid: 4\n\n"
    upstream = start() + bare + text(0, "hi") + end("end_turn")
    client = run(request(), [upstream]).client
    assert b"\n\nid: 4\n\n" in client
    assert b"event: ping" not in client


def test_an_unknown_event_at_an_index_no_open_block_has_passes_unchanged() -> None:
    note = ev({"type": "block_note", "index": 9, "note": "kept"})
    upstream = (
        start()
        + ev({"type": "content_block_start", "index": 5, "content_block": THOUGHT})
        + note
        + ev({"type": "content_block_stop", "index": 5})
        + end("end_turn")
    )
    assert note in run(request(), [upstream]).client


def test_a_delta_with_no_block_open_passes_as_it_came() -> None:
    stray = ev({"type": "content_block_delta", "index": 0, "delta": {"type": "odd_delta"}})
    upstream = start() + text(0, "hi") + stray + end("end_turn")
    assert stray in run(request(), [upstream]).client


def test_another_kind_of_delta_in_a_tool_block_passes_in_its_place() -> None:
    odd = ev({"type": "content_block_delta", "index": 0, "delta": {"type": "odd_delta"}})
    upstream = (
        start()
        + tool(0, "toolu_01A", "Bash", LS, stop=False)
        + odd
        + ev({"type": "content_block_stop", "index": 0})
        + end()
    )
    got = run(request(), [upstream])
    assert odd in got.client
    assert got.read().tools[0]["input"] == LS


def test_a_block_start_without_a_block_object_is_passed_as_a_block() -> None:
    odd = ev({"type": "content_block_start", "index": 0, "content_block": None})
    upstream = (
        start()
        + odd
        + ev({"type": "content_block_stop", "index": 0})
        + tool(1, "toolu_01A", "Bash", LS)
        + end()
    )
    client = run(request(), [upstream]).client
    assert odd in client
    starts = [e for n, e in parse(client) if n == "content_block_start"]
    assert [e["index"] for e in starts if isinstance(e, dict)] == [0, 1]


def test_a_stop_whose_index_drifted_closes_the_open_block_at_once() -> None:
    upstream = (
        start()
        + ev({"type": "content_block_start", "index": 0, "content_block": THOUGHT})
        + ev({"type": "content_block_stop", "index": 3})
        + ev({"type": "ping"})
        + tool(1, "toolu_01A", "Bash", LS)
        + end()
    )
    got = run(request(), [upstream])
    names = [n for n, _ in parse(got.client)]
    assert names[1:5] == [
        "content_block_start",
        "content_block_stop",
        "ping",
        "content_block_start",
    ]
    assert got.exchange is not None
    notes, _ = got.exchange.report()
    assert all(getattr(note, "kind", None) != "block_stop" for note in notes)


def test_a_stray_stop_is_dropped_and_reported() -> None:
    upstream = start() + text(0, "hi") + ev({"type": "content_block_stop", "index": 0}) + end()
    got = run(request(), [upstream])
    assert [n for n, _ in parse(got.client)].count("content_block_stop") == 1
    assert got.exchange is not None
    notes, _ = got.exchange.report()
    assert DeltaRepaired(kind="block_stop", detail="dropped a stray stop") in notes


def test_every_non_json_event_is_counted() -> None:
    upstream = start() + b"data: not json\n\n" + b"data: nor this\n\n" + text(0, "hi") + end()
    got = run(request(), [upstream])
    assert got.exchange is not None and got.exchange.report()[1] == 2


def test_an_event_whose_type_is_a_list_passes_as_data_only() -> None:
    odd = b'data: {"type": ["x"]}\n\n'
    upstream = start() + odd + text(0, "hi") + end("end_turn")
    assert odd in run(request(), [upstream]).client


def test_a_message_start_without_a_message_object_passes_as_it_came() -> None:
    odd = ev({"type": "message_start", "message": None})
    client = run(request(), [odd + text(0, "hi") + end("end_turn")]).client
    assert client.startswith(odd)
    assert b'"text":"hi"' in client


def test_a_message_starts_content_that_is_not_a_list_is_not_read_as_blocks() -> None:
    message = {"id": "msg_up1", "type": "message", "role": "assistant", "content": "odd"}
    odd = ev({"type": "message_start", "message": message})
    client = run(request(), [odd + text(0, "hi") + end("end_turn")]).client
    assert client.startswith(odd)
    starts = [e for n, e in parse(client) if n == "content_block_start"]
    assert [e["index"] for e in starts if isinstance(e, dict)] == [0]


def test_a_follow_up_rounds_message_start_tool_use_reaches_the_client_as_events() -> None:
    minted = mint_client_id(1, 0, "abcd", "functions.Bash:0", "toolu_")
    history = (assistant(tool_use(minted, "Bash", LS)), results(minted))
    replay = start("msg_first") + tool(0, "functions.Bash:0", "Bash", LS) + end("tool_use", 7)
    message = {
        "id": "msg_second",
        "type": "message",
        "role": "assistant",
        "content": [tool_use("toolu_01B", "Bash", {"command": "pwd"})],
        "usage": {"input_tokens": 1, "output_tokens": 3},
    }
    second = ev({"type": "message_start", "message": message}) + ev({"type": "message_stop"})
    got = run(request(*history), [replay, second])
    assert len(got.followups) == 1
    received = got.read()
    assert [(t["id"], t["input"]) for t in received.tools] == [("toolu_01B", {"command": "pwd"})]


def test_a_stop_reason_made_truthful_is_reported() -> None:
    got = run(request(), [start() + tool(0, "toolu_01A", "Bash", LS) + end("end_turn")])
    assert got.read().message["stop_reason"] == "tool_use"
    assert got.exchange is not None
    notes, _ = got.exchange.report()
    assert DeltaRepaired(kind="stop_reason", detail="end_turn -> tool_use") in notes
    assert None not in notes


def test_a_stop_reason_kept_reports_nothing() -> None:
    got = run(request(), [start() + tool(0, "toolu_01A", "Bash", LS) + end("tool_use")])
    assert got.exchange is not None
    notes, _ = got.exchange.report()
    assert None not in notes
    assert all(getattr(note, "kind", None) != "stop_reason" for note in notes)


def test_a_body_that_never_started_a_message_is_not_completed() -> None:
    # No message_start: there is no message to end (the shell reports the empty body).
    assert run(request(), [b""]).client == b""
    assert run(request(), [ev({"type": "ping"})]).client == ev({"type": "ping"})
