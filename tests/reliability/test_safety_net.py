"""Behaviours of the running proxy that no other test pinned, each checked on the wire.

Every test here was shown failing on a small change to the proxy that breaks exactly its
behaviour (a mutation audit found them unguarded), so a reshaping of the core or the shell
that breaks one of them is noticed. The proxy runs on loopback in front of the simulated
provider or a scripted upstream, and is driven with httpx or raw sockets.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import httpx
import orjson
import pytest

from proxy.simulator import SimulatorLog
from tests.e2e.conftest import ProxyFactory
from tests.reliability.upstreams import Script, answer, sequenced, tool_calls
from tests.reliability.wire import error_body, keeps_serving, raw_exchange, status_of
from tests.servers import ServerThread

CHAT = "/v1/chat/completions"
# A native id is kept verbatim, so it is also the upstream id the replay comes back under.
CALL = ("call_Q7vR2kLm9XpT4sWzA1bC3dE5", "run_shell_command", '{"command":"make"}')
ANSWERED = [
    {"role": "user", "content": "build it"},
    {"role": "assistant", "content": None, "tool_calls": tool_calls(CALL)},
    {"role": "tool", "tool_call_id": CALL[0], "content": "built"},
]


# -- SPEC §5: with n > 1, replays are dropped without follow-up rounds -------------------------


def test_non_streaming_n2_choice_of_only_replays_gets_no_followup_round(
    make_proxy: ProxyFactory,
) -> None:
    two_choices = orjson.dumps(
        {
            "id": "chatcmpl-n2",
            "object": "chat.completion",
            "created": 1,
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": tool_calls(CALL),
                    },
                    "finish_reason": "tool_calls",
                },
                {
                    "index": 1,
                    "message": {"role": "assistant", "content": "Already built."},
                    "finish_reason": "stop",
                },
            ],
        }
    )
    # A second round, were one wrongly sent, would answer plainly: only the count tells.
    with (
        sequenced(Script(pieces=(two_choices,)), answer(content="again", stream=False)) as (
            upstream,
            seen,
        ),
        make_proxy(upstream=upstream.url + "/v1") as proxy,
    ):
        body = {"model": "m", "n": 2, "messages": ANSWERED}
        response = httpx.post(proxy.url + CHAT, json=body, timeout=10)
    assert response.status_code == 200
    assert len(seen.chat_requests()) == 1, "no follow-up round with n > 1"
    first, second = response.json()["choices"]
    assert "tool_calls" not in first["message"], "the replay is dropped"
    assert first["finish_reason"] == "stop", "it claimed tool_calls and delivered none"
    assert second["message"]["content"] == "Already built."
    assert second["finish_reason"] == "stop"


# -- SPEC §6: no connection within the connect timeout is 502, not 504 -------------------------


@contextmanager
def unaccepting_listener() -> Iterator[int]:
    """A port whose accept queue is full: the kernel drops new SYNs, so a connect attempt
    waits until its own timeout (a real connect timeout, on loopback)."""
    with ExitStack() as stack:
        listener = stack.enter_context(socket.socket())
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = int(listener.getsockname()[1])
        for _ in range(8):  # Linux queues backlog + 1 connections; bounded either way
            filler = stack.enter_context(socket.socket())
            filler.settimeout(0.3)
            try:
                filler.connect(("127.0.0.1", port))
            except TimeoutError:
                break
        else:
            raise AssertionError("the accept queue never filled up")
        yield port


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_connect_timeout_is_502_upstream_unreachable(
    make_proxy: ProxyFactory, stream: bool
) -> None:
    with (
        unaccepting_listener() as port,
        make_proxy(
            upstream=f"http://127.0.0.1:{port}/v1", connect_timeout=0.5, read_timeout=30.0
        ) as proxy,
    ):
        body = {"model": "m", "stream": stream, "messages": [{"role": "user", "content": "hi"}]}
        response = httpx.post(proxy.url + CHAT, json=body, timeout=30)
        assert response.status_code == 502
        error = error_body(response)
        assert (error["type"], error["code"]) == ("upstream_error", "upstream_unreachable")
        models = httpx.get(proxy.url + "/v1/models", timeout=30)
        assert models.status_code == 502
        assert error_body(models)["code"] == "upstream_unreachable"


# -- SPEC §7: proxy keys in `Authorization`, whatever the scheme's case -------------------------


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER"])
def test_proxy_key_is_accepted_with_the_bearer_scheme_in_any_case(
    make_proxy: ProxyFactory, log: SimulatorLog, scheme: str
) -> None:
    """RFC 9110 §11.1: the authentication scheme is case-insensitive."""
    with make_proxy(settings={"proxy_keys": ("pk-case-123",)}) as server:
        response = httpx.get(
            server.url + "/v1/models", headers={"authorization": f"{scheme} pk-case-123"}
        )
        assert response.status_code == 200
        assert "authorization" not in log.headers[-1], "the proxy key is never forwarded"
        wrong = httpx.get(server.url + "/v1/models", headers={"authorization": f"{scheme} pk-x"})
        assert wrong.status_code == 401


# -- request heads: exactly 100 headers and 64 KiB pass, one more gets 431 ----------------------


def _head_with(headers: list[tuple[bytes, bytes]]) -> bytes:
    lines = b"".join(name + b": " + value + b"\r\n" for name, value in headers)
    return b"GET /v1/models HTTP/1.1\r\n" + lines + b"\r\n"


def _headers(count: int) -> list[tuple[bytes, bytes]]:
    """`count` headers in all, Host and Connection included."""
    return [
        (b"host", b"proxy"),
        (b"connection", b"close"),
        *((b"x-h%d" % i, b"v") for i in range(count - 2)),
    ]


def _headers_of_size(size: int) -> list[tuple[bytes, bytes]]:
    """A few headers whose names and values add up to `size` bytes (how the limit counts)."""
    headers = [(b"host", b"proxy"), (b"connection", b"close")]
    left = size - sum(len(n) + len(v) for n, v in headers)
    while left > 0:
        value = b"v" * min(8000, left - 6)
        headers.append((b"x-pad%d" % (len(headers) % 10), value))
        left -= 6 + len(value)
    assert sum(len(n) + len(v) for n, v in headers) == size
    return headers


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        (_headers(100), 200),
        (_headers(101), 431),
        (_headers_of_size(64 * 1024), 200),
        (_headers_of_size(64 * 1024 + 1), 431),
    ],
    ids=["100-headers", "101-headers", "64KiB", "64KiB+1"],
)
def test_request_head_limits_are_exact(
    proxy: ServerThread, log: SimulatorLog, headers: list[tuple[bytes, bytes]], status: int
) -> None:
    answer = raw_exchange(proxy.port, _head_with(headers))
    assert status_of(answer) == status, answer[:300]
    if status == 431:
        assert b'"code":"request_headers_too_large"' in answer
        assert log.paths == [], "nothing goes upstream"
    else:
        assert log.paths == ["/v1/models"]
    keeps_serving(proxy)


# -- request ids: a client's own is echoed when it is short and plain -------------------------

ID_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:"


@pytest.mark.parametrize(
    ("given", "kept"),
    [
        ("trace-42", True),
        ((ID_CHARS * 2)[:128], True),
        ((ID_CHARS * 3)[:129], False),
        ("a b", False),
        ("x" * 10 + "/", False),
    ],
    ids=["short", "128-chars", "129-chars", "space", "slash"],
)
@pytest.mark.parametrize("path", [CHAT, "/v1/models"], ids=["chat", "passthrough"])
def test_client_request_id_is_echoed_only_when_bounded(
    proxy: ServerThread, log: SimulatorLog, path: str, given: str, kept: bool
) -> None:
    headers = {"x-request-id": given}
    if path == CHAT:
        body = {"model": "reference+rounds=0", "messages": [{"role": "user", "content": "hi"}]}
        response = httpx.post(proxy.url + path, json=body, headers=headers, timeout=10)
    else:
        response = httpx.get(proxy.url + path, headers=headers, timeout=10)
    assert response.status_code == 200
    echoed = response.headers["x-request-id"]
    if kept:
        assert echoed == given
    else:
        assert re.fullmatch(r"req_[0-9a-f]{32}", echoed), echoed
    assert log.headers[-1]["x-request-id"] == echoed, "the upstream sees the same id"


def test_request_id_of_an_error_answer_is_the_clients_own(proxy: ServerThread) -> None:
    response = httpx.post(
        proxy.url + CHAT, content=b"{not json", headers={"x-request-id": "trace-err-1"}
    )
    assert response.status_code == 400
    assert response.headers["x-request-id"] == "trace-err-1"
