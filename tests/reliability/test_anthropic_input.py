"""Anthropic Messages: bad input from either side gets a defined answer in Anthropic's error
shape, never a 500 or a traceback, and the proxy keeps serving."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from proxy.simulator import SimulatorLog
from tests.e2e.conftest import ProxyFactory
from tests.reliability.fuzzgen import Deep, encode_json
from tests.reliability.test_bad_input import REFUSED
from tests.reliability.upstreams import SSE_HEADERS, Script, ScriptedUpstream, scripted
from tests.reliability.wire import no_traceback
from tests.servers import ServerThread

MESSAGES = "/v1/messages"
HEADERS = {"content-type": "application/json", "anthropic-version": "2023-06-01"}


def anthropic_error(response: httpx.Response) -> dict[str, Any]:
    body = response.json()
    assert body["type"] == "error" and set(body["error"]) == {"type", "message"}, body
    return body["error"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("body", list(REFUSED.values()), ids=list(REFUSED))
def test_unusable_bodies_get_an_anthropic_400_and_nothing_goes_upstream(
    proxy: ServerThread, log: SimulatorLog, body: bytes
) -> None:
    response = httpx.post(proxy.url + MESSAGES, content=body, headers=HEADERS)
    assert response.status_code == 400
    no_traceback(response.content)
    assert anthropic_error(response)["type"] == "invalid_request_error"
    assert log.requests == [] and log.paths == []


def test_a_missing_proxy_key_is_an_anthropic_401(make_proxy: ProxyFactory) -> None:
    with make_proxy(settings={"proxy_keys": ("pk-1",)}) as proxy:
        response = httpx.post(proxy.url + MESSAGES, json={"messages": []}, headers=HEADERS)
    assert response.status_code == 401
    assert anthropic_error(response)["type"] == "authentication_error"


def test_an_unreachable_upstream_is_an_anthropic_502(make_proxy: ProxyFactory) -> None:
    with make_proxy(upstream="http://127.0.0.1:9/v1", connect_timeout=2.0) as proxy:
        response = httpx.post(
            proxy.url + MESSAGES, json={"model": "m", "messages": []}, headers=HEADERS, timeout=30
        )
    assert response.status_code == 502
    assert anthropic_error(response)["type"] == "upstream_error"


_ODD = [None, True, 0, 1.5, "", "x" * 10_000, "é☃", [], {}, [1, "a"], {"a": 1}]
MALFORMED: dict[str, list[Any]] = {
    "content-not-blocks": [{"role": "assistant", "content": v} for v in (5, None, {}, "text")],
    "blocks-not-objects": [{"role": "assistant", "content": ["a", 5, None, [], True]}],
    "odd-tool-use": [
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": value, "name": value, "input": value} for value in _ODD
            ]
            + [{"type": "tool_use", "id": "deep", "name": "run", "input": Deep(300, "mixed", 1)}],
        }
    ],
    "odd-results": [
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": v} for v in _ODD]},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "a", "name": "run", "input": {}}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a"}] * 3},
        {"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "a"}]},
    ],
    "repeated-ids": [
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "grep:3", "name": "grep", "input": {}}] * 2,
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "grep:3"}] * 2},
    ],
    "odd-roles": [{"role": value, "content": "x"} for value in _ODD],
    "messages-not-objects": ["hi", 5, None, [], True],
}


@pytest.fixture(scope="module")
def recording(make_proxy: ProxyFactory) -> Iterator[tuple[ServerThread, ScriptedUpstream]]:
    """An upstream that answers every message with a short text, and the proxy before it."""
    message = {
        "id": "m",
        "type": "message",
        "role": "assistant",
        "content": [{"type": "text", "text": "ok"}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }
    script = Script(pieces=(orjson.dumps(message),))
    with (
        scripted({MESSAGES: script}) as (upstream, seen),
        make_proxy(upstream=upstream.url + "/v1") as proxy,
    ):
        yield proxy, seen


@pytest.mark.parametrize("history", list(MALFORMED), ids=list(MALFORMED))
def test_malformed_histories_are_forwarded_never_a_500(
    recording: tuple[ServerThread, ScriptedUpstream], history: str
) -> None:
    proxy, upstream = recording
    messages = [{"role": "user", "content": "go"}, *MALFORMED[history]]
    body = encode_json({"model": "kimi-k2", "max_tokens": 64, "messages": messages})
    before = len(upstream.seen)
    response = httpx.post(proxy.url + MESSAGES, content=body, headers=HEADERS, timeout=30)
    assert response.status_code == 200, response.content[:300]
    no_traceback(response.content)
    assert len(upstream.seen) == before + 1
    sent = orjson.loads(upstream.seen[-1].body)
    # Every message goes on; SPEC §11 may add the answers of calls left without one.
    assert len(sent["messages"]) >= len(messages), "the history keeps its messages"
    assert response.json()["content"] == [{"type": "text", "text": "ok"}]


def test_malformed_histories_reach_the_simulator_as_a_stream(
    proxy: ServerThread, log: SimulatorLog
) -> None:
    messages = [{"role": "user", "content": "go"}]
    for history, items in MALFORMED.items():
        if history != "odd-tool-use":  # the simulator's own model refuses 300 levels
            messages += items
    body = encode_json({"model": "kimi-k2", "max_tokens": 64, "stream": True, "messages": messages})
    response = httpx.post(proxy.url + MESSAGES, content=body, headers=HEADERS, timeout=30)
    assert response.status_code == 200
    assert response.content.rstrip().endswith(b'data: {"type":"message_stop"}')


def _ev(data: object, name: str = "x") -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


START = _ev(
    {
        "type": "message_start",
        "message": {
            "id": "m",
            "type": "message",
            "role": "assistant",
            "content": [],
            "usage": {"input_tokens": 1, "output_tokens": 1},
        },
    },
    "message_start",
)
ODD_STREAMS: dict[str, bytes] = {
    "non-object-data": START + _ev([1, 2]) + _ev("text") + _ev(None),
    "delta-without-start": START
    + _ev(
        {
            "type": "content_block_delta",
            "index": 4,
            "delta": {"type": "input_json_delta", "partial_json": "{"},
        }
    ),
    "odd-blocks": START
    + b"".join(_ev({"type": "content_block_start", "index": v, "content_block": v}) for v in _ODD),
    "odd-tool-use": START
    + b"".join(
        _ev(
            {
                "type": "content_block_start",
                "index": n,
                "content_block": {"type": "tool_use", "id": v, "name": v, "input": v},
            }
        )
        + _ev(
            {
                "type": "content_block_delta",
                "index": n,
                "delta": {"type": "input_json_delta", "partial_json": v},
            }
        )
        + _ev({"type": "content_block_delta", "index": n, "delta": v})
        for n, v in enumerate(_ODD)
    ),
    "odd-message-delta": START
    + _ev({"type": "message_delta", "delta": "x", "usage": [1]})
    + _ev(
        {"type": "message_delta", "delta": {"stop_reason": 5}, "usage": {"output_tokens": "many"}}
    ),
    "stops-for-nothing": START
    + _ev({"type": "content_block_stop", "index": 9})
    + _ev({"type": "message_stop"}),
    "no-message-start": _ev(
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "tool_use", "id": "functions.x:0", "name": "x", "input": {}},
        }
    ),
    "empty": b"",
}


@pytest.mark.parametrize("name", list(ODD_STREAMS), ids=list(ODD_STREAMS))
def test_odd_upstream_streams_never_crash_the_stream(make_proxy: ProxyFactory, name: str) -> None:
    script = Script(headers=SSE_HEADERS, pieces=(ODD_STREAMS[name],))
    with (
        scripted({MESSAGES: script}) as (upstream, _),
        make_proxy(upstream=upstream.url + "/v1") as proxy,
    ):
        body = {
            "model": "m",
            "max_tokens": 8,
            "stream": True,
            "messages": [{"role": "user", "content": "x"}],
            "tools": [{"name": "x", "input_schema": {}}],
        }
        response = httpx.post(proxy.url + MESSAGES, json=body, headers=HEADERS, timeout=30)
        assert response.status_code == 200
        no_traceback(response.content)
        assert b"could not process" not in response.content  # the shell's net for core bugs
        for chunk in response.content.split(b"\n\n"):
            lines = [ln for ln in chunk.split(b"\n") if ln]
            assert all(ln.startswith((b"event: ", b"data: ", b":")) for ln in lines), chunk
        again = httpx.post(proxy.url + MESSAGES, json=body, headers=HEADERS, timeout=30)
        assert again.status_code == 200  # keeps serving


def test_a_stream_cut_short_ends_with_an_anthropic_error_event(make_proxy: ProxyFactory) -> None:
    text = _ev(
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        "content_block_start",
    )
    script = Script(headers=SSE_HEADERS, pieces=(START + text,), cut=True)
    with (
        scripted({MESSAGES: script}) as (upstream, _),
        make_proxy(upstream=upstream.url + "/v1") as proxy,
    ):
        body = {"model": "m", "max_tokens": 8, "stream": True, "messages": []}
        response = httpx.post(proxy.url + MESSAGES, json=body, headers=HEADERS, timeout=30)
    last = response.content.rstrip(b"\n").split(b"\n\n")[-1]
    assert last.startswith(b"event: error\ndata: ")
    error = orjson.loads(last.split(b"data: ", 1)[1])
    assert error == {
        "type": "error",
        "error": {"type": "upstream_error", "message": error["error"]["message"]},
    }
