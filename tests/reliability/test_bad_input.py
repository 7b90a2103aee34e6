"""Bad input from either side gets a defined answer: never a 500 for what a client or an
upstream sent, never a traceback in a body, and the proxy keeps serving afterwards."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from proxy.simulator import SimulatorLog
from tests.e2e.conftest import ProxyFactory
from tests.reliability.fuzzgen import Deep, encode_json
from tests.reliability.upstreams import (
    JSON_HEADERS,
    SSE_HEADERS,
    Script,
    ScriptedUpstream,
    completion_body,
    raw_upstream,
    scripted,
    sse_body,
)
from tests.reliability.wire import (
    data_events,
    error_body,
    error_event,
    keeps_serving,
    no_traceback,
    raw_exchange,
    reassemble,
    status_of,
)
from tests.servers import ServerThread

CHAT = "/v1/chat/completions"

# -- bodies the proxy refuses before anything goes upstream -----------------------------------

REFUSED = {
    "not-json": b"{not json",
    "empty": b"",
    "array": b"[1, 2]",
    "string": b'"hello"',
    "number": b"1",
    "null": b"null",
    "no-messages": b'{"model": "kimi"}',
    "messages-string": b'{"model": "kimi", "messages": "hi"}',
    "messages-object": b'{"model": "kimi", "messages": {"role": "user"}}',
    "messages-null": b'{"model": "kimi", "messages": null}',
    "messages-number": b'{"model": "kimi", "messages": 3}',
    "not-utf8": b'{"model": "kimi", "messages": [], "x": "\xff\xfe"}',
    "lone-surrogate": b'{"model": "kimi", "messages": [], "x": "\\ud800"}',
    "nan-literal": b'{"model": "kimi", "messages": [], "temperature": NaN}',
    "utf8-bom": b'\xef\xbb\xbf{"model": "kimi", "messages": []}',
    "nested-1100": b'{"model": "kimi", "messages": [], "x": ' + b"[" * 1100 + b"]" * 1100 + b"}",
    "trailing-garbage": b'{"model": "kimi", "messages": []} {}',
}


@pytest.mark.parametrize("body", list(REFUSED.values()), ids=list(REFUSED))
def test_unusable_bodies_get_400_and_nothing_goes_upstream(
    proxy: ServerThread, log: SimulatorLog, body: bytes
) -> None:
    response = httpx.post(
        proxy.url + CHAT, content=body, headers={"content-type": "application/json"}
    )
    assert response.status_code == 400
    no_traceback(response.content)
    assert error_body(response)["type"] == "invalid_request_error"
    assert log.requests == [] and log.paths == []


# -- histories the proxy forwards, however malformed ------------------------------------------

_ODD = [None, True, 0, 1.5, "", "x" * 10_000, "é☃", [], {}, [1, "a"], {"a": 1}]
MALFORMED_HISTORIES: dict[str, list[Any]] = {
    "tool-calls-not-a-list": [
        {"role": "assistant", "tool_calls": value} for value in ("calls", {}, 5, None)
    ],
    "calls-without-function": [
        {"role": "assistant", "tool_calls": [{"id": "a"}, {"id": "b", "function": None}]},
        {"role": "assistant", "tool_calls": [{"id": "c", "function": "run"}, 7, None, []]},
    ],
    "odd-arguments": [
        {
            "role": "assistant",
            "tool_calls": [
                {"id": f"c{n}", "function": {"name": "run", "arguments": value}}
                for n, value in enumerate([*_ODD, Deep(300, "mixed", 1)])
            ],
        }
    ],
    "odd-ids": [
        {
            "role": "assistant",
            "tool_calls": [
                {"id": value, "type": "function", "function": {"name": "run", "arguments": "{}"}}
                for value in _ODD
            ],
        },
        *({"role": "tool", "tool_call_id": value, "content": "ok"} for value in _ODD),
    ],
    "odd-names": [
        {
            "role": "assistant",
            "tool_calls": [
                {"id": f"n{n}", "function": {"name": value, "arguments": "{}"}}
                for n, value in enumerate(_ODD)
            ],
        }
    ],
    "tool-messages-answer-nothing": [
        {"role": "tool", "tool_call_id": "nobody", "content": "x"},
        {"role": "assistant", "tool_calls": [{"id": "a", "function": {"name": "run"}}]},
        {"role": "tool", "tool_call_id": "b", "content": "x"},
        {"role": "tool", "tool_call_id": "a", "content": "x"},
        {"role": "tool", "tool_call_id": "a", "content": "twice"},
        {"role": "tool"},
    ],
    "messages-not-objects": ["hi", 5, None, [], [{"role": "user"}], True],
    "odd-roles": [{"role": value, "content": "x"} for value in _ODD],
    "repeated-ids": [
        {
            "role": "assistant",
            "tool_calls": [
                {"id": "call_0", "function": {"name": "run", "arguments": '{"a":1}'}},
                {"id": "call_0", "function": {"name": "run", "arguments": '{"a":1}'}},
            ],
        },
        {"role": "tool", "tool_call_id": "call_0", "content": "x"},
        {"role": "assistant", "tool_calls": [{"id": "call_0", "function": {"name": "run"}}]},
        {"role": "tool", "tool_call_id": "call_0", "content": "x"},
    ],
}


@pytest.fixture(scope="module")
def recording() -> Iterator[tuple[ServerThread, ScriptedUpstream]]:
    with scripted() as pair:
        yield pair


@pytest.fixture(scope="module", params=["auto", "kimi", "alnum9", "passthrough"])
def dialect_proxy(
    request: pytest.FixtureRequest,
    make_proxy: ProxyFactory,
    recording: tuple[ServerThread, ScriptedUpstream],
) -> Iterator[ServerThread]:
    with make_proxy(upstream=recording[0].url + "/v1", dialect=request.param) as server:
        yield server


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("history", list(MALFORMED_HISTORIES), ids=list(MALFORMED_HISTORIES))
def test_malformed_histories_are_forwarded_never_a_500(
    dialect_proxy: ServerThread,
    recording: tuple[ServerThread, ScriptedUpstream],
    history: str,
    stream: bool,
) -> None:
    messages = [{"role": "user", "content": "go"}, *MALFORMED_HISTORIES[history]]
    body = encode_json({"model": "kimi-k2", "stream": stream, "messages": messages})
    seen = recording[1].seen
    before = len(seen)
    response = httpx.post(
        dialect_proxy.url + CHAT, content=body, headers={"content-type": "application/json"}
    )
    assert response.status_code == 200, response.content[:300]
    no_traceback(response.content)
    assert len(seen) == before + 1
    sent = orjson.loads(seen[-1].body)
    # Every message goes on; SPEC §11 may add the answers of calls left without one.
    assert len(sent["messages"]) >= len(messages), "the history keeps its messages"
    if stream:
        assert data_events(response.content)[-1] == b"[DONE]"
    else:
        assert response.json()["choices"][0]["message"]["content"] == "ok"


# -- sizes ------------------------------------------------------------------------------------

LIMIT = 1000


@pytest.fixture(scope="module")
def small_proxy(make_proxy: ProxyFactory) -> Iterator[ServerThread]:
    with make_proxy(settings={"max_body_bytes": LIMIT}) as server:
        yield server


def _head(extra: bytes) -> bytes:
    return b"POST " + CHAT.encode() + b" HTTP/1.1\r\nHost: proxy\r\n" + extra + b"\r\n"


def _json_of_size(size: int) -> bytes:
    base = b'{"model": "reference+rounds=0", "messages": [], "pad": ""}'
    body = base[:-2] + b"x" * (size - len(base)) + b'"}'
    assert len(body) == size
    return body


def test_body_at_the_limit_passes_and_one_byte_more_gets_413(
    small_proxy: ServerThread, log: SimulatorLog
) -> None:
    ok = httpx.post(small_proxy.url + CHAT, content=_json_of_size(LIMIT))
    assert ok.status_code == 200 and len(log.requests) == 1
    over = httpx.post(small_proxy.url + CHAT, content=_json_of_size(LIMIT + 1))
    assert over.status_code == 413
    assert error_body(over)["code"] == "request_too_large"
    assert len(log.requests) == 1


def test_declared_length_over_the_limit_gets_413_before_the_body_is_sent(
    small_proxy: ServerThread, log: SimulatorLog
) -> None:
    # Only the head goes out: the answer must not wait for 10 MB that never come.
    answer = raw_exchange(small_proxy.port, _head(b"Content-Length: 10000000\r\n"), timeout=5)
    assert status_of(answer) == 413
    assert log.requests == []


def test_chunked_upload_over_the_limit_gets_413(
    small_proxy: ServerThread, log: SimulatorLog
) -> None:
    piece = b"x" * 300
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(piece), piece) for _ in range(10)) + b"0\r\n\r\n"
    answer = raw_exchange(small_proxy.port, _head(b"Transfer-Encoding: chunked\r\n") + chunks)
    assert status_of(answer) == 413
    no_traceback(answer)
    assert log.requests == []
    keeps_serving(small_proxy)


def test_declared_length_smaller_than_the_body_reads_only_what_was_declared(
    small_proxy: ServerThread, log: SimulatorLog
) -> None:
    big = _json_of_size(50 * LIMIT)
    answer = raw_exchange(small_proxy.port, _head(b"Content-Length: 10\r\n") + big)
    assert status_of(answer) == 400  # the 10 bytes are not JSON; the rest is not a request
    no_traceback(answer)
    assert log.requests == []
    keeps_serving(small_proxy)


def test_post_without_length_or_chunking_has_an_empty_body(
    small_proxy: ServerThread, log: SimulatorLog
) -> None:
    answer = raw_exchange(small_proxy.port, _head(b"Connection: close\r\n") + b'{"a": 1}')
    assert status_of(answer) == 400
    assert log.requests == []


def test_body_shorter_than_declared_then_gone_sends_nothing_upstream(
    small_proxy: ServerThread, log: SimulatorLog
) -> None:
    import socket

    with socket.create_connection(("127.0.0.1", small_proxy.port), timeout=5) as sock:
        sock.sendall(_head(b"Content-Length: 500\r\n") + b'{"model": "kimi", ')
    keeps_serving(small_proxy)
    assert [r.get("model") for r in log.requests] == ["kimi"], "only keeps_serving's request"


# -- upstreams that answer strangely ----------------------------------------------------------

DEEP_TOOL_COMPLETION = encode_json(
    {
        "id": "chatcmpl-deep",
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "functions.run:0",
                            "type": "function",
                            "function": {
                                "name": "run",
                                "arguments": {"deep": Deep(300, "list", 1)},
                            },
                        }
                    ],
                },
                "finish_reason": "stop",
            }
        ],
        "unknown": Deep(600, "mixed", "x"),
    }
)
DEEP_TOOL_CHUNK = b"data: " + encode_json(
    {
        "id": "chatcmpl-deep",
        "choices": [
            {
                "index": 0,
                "delta": {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "functions.run:0",
                            "function": {"name": "run", "arguments": {"a": Deep(300, "dict", 2)}},
                        }
                    ]
                },
                "finish_reason": "tool_calls",
            }
        ],
        "logprobs": Deep(900, "list", 0),
    }
)


def _proxy_for(make_proxy: ProxyFactory, scripts: dict[str, Script]) -> Any:
    from contextlib import ExitStack

    stack = ExitStack()
    upstream, _ = stack.enter_context(scripted(scripts))
    server = stack.enter_context(make_proxy(upstream=upstream.url + "/v1", read_timeout=2.0))
    return stack, server


@pytest.mark.parametrize(
    ("script", "stream", "check"),
    [
        (Script(pieces=(b"not json at all",)), False, "unchanged"),
        (Script(pieces=(b"",)), False, "unchanged"),
        (Script(headers=((b"content-type", b"text/plain"),), pieces=(b"hi",)), False, "unchanged"),
        (Script(pieces=(b"[1, 2, 3]",)), False, "unchanged"),
        (Script(headers=SSE_HEADERS, pieces=(sse_body("sse"),)), False, "sse"),
        (Script(pieces=(completion_body("json"),)), True, "json"),
        (Script(pieces=(completion_body()[:40],), cut=True), False, "502"),
        (Script(headers=SSE_HEADERS, pieces=(sse_body()[:60],), cut=True), True, "event"),
        (Script(pieces=(DEEP_TOOL_COMPLETION,)), False, "deep"),
        (Script(headers=SSE_HEADERS, pieces=(DEEP_TOOL_CHUNK + b"\n\n",)), True, "deep"),
        (Script(status=503, pieces=(b'{"error": "busy"}',), cut=True), False, "truncated"),
    ],
    ids=[
        "200-non-json",
        "200-empty",
        "200-text-plain",
        "200-json-array",
        "sse-to-non-stream",
        "json-to-stream",
        "json-cut",
        "sse-cut",
        "json-nested-900",
        "sse-nested-900",
        "error-body-cut",
    ],
)
def test_upstream_answers_oddly_the_client_gets_a_defined_answer(
    make_proxy: ProxyFactory, script: Script, stream: bool, check: str
) -> None:
    stack, server = _proxy_for(make_proxy, {CHAT: script})
    with stack:
        body = {
            "model": "kimi-k2",
            "stream": stream,
            "messages": [{"role": "user", "content": "x"}],
        }
        if check == "truncated":
            # The head went out before the body broke: the client must see a broken body,
            # not a complete-looking truncated one.
            with pytest.raises(httpx.RemoteProtocolError):
                httpx.post(server.url + CHAT, json=body)
            return
        response = httpx.post(server.url + CHAT, json=body)
        assert response.status_code != 500
        no_traceback(response.content)
        if check == "unchanged":
            assert response.status_code == script.status
            assert response.content == b"".join(script.pieces)
        elif check == "sse":
            assert response.headers["content-type"].startswith("text/event-stream")
            assert reassemble(response.content)["content"] == "sse"
        elif check == "json":
            assert response.json()["choices"][0]["message"]["content"] == "json"
        elif check == "502":
            assert response.status_code == 502
            assert error_body(response)["code"] == "upstream_stream_error"
        elif check == "event":
            assert error_event(response.content)["code"] == "upstream_stream_error"
        elif check == "deep" and stream:
            result = reassemble(response.content)
            assert result["calls"][0]["id"].startswith("call_1_0_"), "the Kimi id was rewritten"
            assert orjson.loads(result["calls"][0]["arguments"])["a"]
            assert data_events(response.content)[-1] == b"[DONE]"
        elif check == "deep":
            call = response.json()["choices"][0]["message"]["tool_calls"][0]
            assert call["id"].startswith("call_1_0_") and orjson.loads(
                call["function"]["arguments"]
            )
        keeps_serving_via(server, stream)


def keeps_serving_via(server: ServerThread, stream: bool) -> None:
    response = httpx.post(
        server.url + "/v1/models", content=b"", headers={"x-probe": "after"}, timeout=10
    )
    assert response.status_code != 500
    assert httpx.get(server.url + "/healthz").status_code == 200


@pytest.mark.parametrize(
    "answer",
    [b"", b"garbage that is not HTTP\r\n\r\n", b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab"],
    ids=["closes-silently", "not-http", "short-body"],
)
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_upstream_speaking_broken_http_gives_502(
    make_proxy: ProxyFactory, answer: bytes, stream: bool
) -> None:
    with raw_upstream(answer) as upstream, make_proxy(upstream=upstream.url + "/v1") as server:
        body = {"model": "kimi", "stream": stream, "messages": []}
        response = httpx.post(server.url + CHAT, json=body, timeout=10)
        no_traceback(response.content)
        assert response.status_code == 502
        error = error_body(response)
        if answer.startswith(b"HTTP/1.1 200"):
            # The head arrived (JSON, so no event stream even when one was asked for): the
            # short body is a broken body.
            assert (error["type"], error["code"]) == ("upstream_error", "upstream_stream_error")
        else:
            # No usable response head at all: the upstream could not be reached.
            assert (error["type"], error["code"]) == ("upstream_error", "upstream_unreachable")
        assert upstream.requests == 1, "a POST is never retried"


@pytest.mark.parametrize(
    "headers",
    [JSON_HEADERS, ((b"content-type", b"application/json"), (b"content-length", b"100"))],
    ids=["chunked", "content-length"],
)
def test_passthrough_body_cut_short_reaches_the_client_as_a_broken_body(
    make_proxy: ProxyFactory, headers: tuple[tuple[bytes, bytes], ...]
) -> None:
    script = Script(headers=headers, pieces=(b'{"object": "list", "da',), cut=True)
    stack, server = _proxy_for(make_proxy, {"/v1/models": script})
    with stack:
        with pytest.raises(httpx.RemoteProtocolError):
            httpx.get(server.url + "/v1/models")
        assert httpx.get(server.url + "/healthz").status_code == 200


@pytest.mark.parametrize("path", [CHAT, "/v1/models"], ids=["chat", "passthrough"])
def test_header_values_outside_ascii_reach_the_upstream_unchanged(
    make_proxy: ProxyFactory, recording: tuple[ServerThread, ScriptedUpstream], path: str
) -> None:
    # HTTP allows any byte 0x80-0xFF in a field value (obs-text); a proxy must not choke on one.
    upstream, seen = recording
    with make_proxy(upstream=upstream.url + "/v1") as proxy:
        body = b'{"model": "m", "messages": [{"role": "user", "content": "x"}]}'
        head = b"%s %s HTTP/1.1\r\nHost: proxy\r\nX-Note: caf\xe9 \xff\r\n" % (
            b"POST" if path == CHAT else b"GET",
            path.encode(),
        )
        if path == CHAT:
            head += b"Content-Type: application/json\r\nContent-Length: %d\r\n" % len(body)
        answer = raw_exchange(
            proxy.port, head + b"Connection: close\r\n\r\n" + body * (path == CHAT)
        )
    assert status_of(answer) == 200, answer[:300]
    assert seen.seen[-1].path == path and seen.seen[-1].headers["x-note"] == "caf\xe9 \xff"
