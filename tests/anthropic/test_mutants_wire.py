"""SPEC §8: Anthropic's wire shapes (`wire.py`) at the edges the mutation audit found
unpinned: the event name of an event whose `type` is not a string, an upstream event whose
data begins with an empty data line, and the error type of a request too large."""

from __future__ import annotations

import orjson

from proxy.anthropic.wire import error_response
from proxy.core.errors import RequestTooLarge
from tests.anthropic.anthropic_wire import end, ev, request, run, start

THINKING = {"type": "thinking", "thinking": ""}


def test_a_moved_event_whose_type_is_not_a_string_is_named_message() -> None:
    # A block at upstream index 3 is the client's 0: the odd event inside it is rewritten.
    upstream = (
        start()
        + ev({"type": "content_block_start", "index": 3, "content_block": THINKING})
        + b'event: odd\ndata: {"type":5,"index":3}\n\n'
        + ev({"type": "content_block_stop", "index": 3})
        + end("end_turn")
    )
    got = run(request(), [upstream])
    assert b'event: message\ndata: {"type":5,"index":0}\n\n' in got.client


def test_data_that_begins_with_an_empty_line_goes_on_as_that_many_data_lines() -> None:
    ping = b'event: ping\ndata: \ndata: {"type":"ping"}\n\n'
    got = run(request(), [start() + ping + end("end_turn")])
    assert ping in got.client


def test_a_request_too_large_has_anthropics_own_error_type() -> None:
    status, body = error_response(RequestTooLarge("the body is over the limit"))
    assert status == 413
    assert orjson.loads(body) == {
        "type": "error",
        "error": {"type": "request_too_large", "message": "the body is over the limit"},
    }
