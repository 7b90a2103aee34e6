"""Security (SPEC §6-§7): the upstream comes only from configuration, hop-by-hop headers stay
on their hop, malformed heads are refused, proxy keys are compared in constant time and never
forwarded, secrets never reach logs, errors or metrics, and every input has a bound."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import httpx
import orjson
import pytest

from proxy.ops.observability import LOGGER, JsonFormatter
from proxy.simulator import SimulatorLog
from tests.e2e.conftest import ProxyFactory
from tests.reliability.upstreams import (
    JSON_HEADERS,
    Script,
    ScriptedUpstream,
    answer,
    scripted,
    sequenced,
    tool_calls,
)
from tests.reliability.wire import (
    error_body,
    error_event,
    keeps_serving,
    metric,
    no_traceback,
    raw_exchange,
    status_of,
)
from tests.servers import ServerThread

Upstream = tuple[ServerThread, ScriptedUpstream]

# One answered call, which the replay-loop profile replays with the same id and arguments.
ANSWERED_HISTORY = [
    {"role": "user", "content": "go"},
    {
        "role": "assistant",
        "tool_calls": [
            {
                "id": "call_abcdefabcdef01",
                "type": "function",
                "function": {
                    "name": "run_shell_command",
                    "arguments": '{"command":"echo round-1-0"}',
                },
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_abcdefabcdef01", "content": "done"},
]


@pytest.fixture()
def good_and_evil() -> Iterator[tuple[Upstream, Upstream]]:
    """The configured upstream, and another one a client would like to reach instead."""
    with scripted() as good, scripted() as evil:
        yield good, evil


def test_the_upstream_comes_only_from_configuration(
    make_proxy: ProxyFactory, good_and_evil: tuple[Upstream, Upstream]
) -> None:
    (good, seen), (evil_server, evil) = good_and_evil
    evil_host = evil_server.url.removeprefix("http://").encode()
    with make_proxy(upstream=good.url + "/v1") as proxy:
        attempts = [
            # An absolute-form request target naming another server.
            b"GET http://%s/v1/models HTTP/1.1\r\nHost: %s\r\n" % (evil_host, evil_host),
            # Host and every forwarding header a front proxy might honour.
            b"GET /v1/models HTTP/1.1\r\nHost: %s\r\nX-Forwarded-Host: %s\r\n"
            b"Forwarded: for=1.2.3.4;host=%s;proto=http\r\nX-Forwarded-Proto: http\r\n"
            b"X-Forwarded-For: 1.2.3.4\r\nX-Forwarded-Prefix: /evil\r\n"
            b"X-Original-URL: http://%s/v1/models\r\nX-Rewrite-URL: http://%s/v1/models\r\n"
            % (evil_host, evil_host, evil_host, evil_host, evil_host),
            # A path that looks like an authority.
            b"GET /v1//%s/v1/models HTTP/1.1\r\nHost: x\r\n" % evil_host,
            b"GET /v1/@%s/models HTTP/1.1\r\nHost: x\r\n" % evil_host,
        ]
        for attempt in attempts:
            answer = raw_exchange(proxy.port, attempt + b"Connection: close\r\n\r\n")
            assert status_of(answer) in (200, 404), answer[:200]
        # Body fields some gateways read as the upstream's address.
        body = {
            "model": f"http://{evil_host.decode()}/v1",
            "messages": [],
            "base_url": f"http://{evil_host.decode()}/v1",
            "api_base": f"http://{evil_host.decode()}/v1",
        }
        assert httpx.post(proxy.url + "/v1/chat/completions", json=body).status_code == 200
    assert evil.seen == []
    assert len(seen.seen) == len(attempts) + 1
    good_host = good.url.removeprefix("http://")
    for request in seen.seen:
        assert request.headers["host"] == good_host
        for name in ("x-forwarded-host", "forwarded"):
            assert name not in request.headers, name


@pytest.mark.parametrize(
    "target",
    [
        b"/v1/../admin",
        b"/v1/%2e%2e/admin",
        b"/v1/models/../../admin",
        b"/v1/./models",
        b"/v1/a%00b",
        b"/v1/a%0d%0aX-Injected:%201",
    ],
)
def test_paths_cannot_escape_the_upstream_base_or_break_the_url(
    make_proxy: ProxyFactory, target: bytes
) -> None:
    with scripted() as (upstream, seen), make_proxy(upstream=upstream.url + "/v1") as proxy:
        answer = raw_exchange(proxy.port, b"GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % target)
        assert status_of(answer) == 400
        assert b'"code":"invalid_path"' in answer
        no_traceback(answer)
        assert seen.seen == []


def test_encoded_delimiters_stay_in_the_path(make_proxy: ProxyFactory) -> None:
    with scripted() as (upstream, seen), make_proxy(upstream=upstream.url + "/v1") as proxy:
        httpx.get(proxy.url + "/v1/models/a%3Fb=1%23c%25d?real=1")
    assert seen.seen[-1].path == "/v1/models/a?b=1#c%d"
    assert seen.seen[-1].query == b"real=1"


HOP_BY_HOP_REQUEST = {
    "Connection": "keep-alive, X-Hop-Secret",
    "X-Hop-Secret": "s1",
    "Keep-Alive": "timeout=5",
    "Proxy-Authorization": "Basic czI=",
    "Proxy-Connection": "keep-alive",
    "TE": "trailers",
    "Trailer": "X-T",
    "Upgrade": "h2c",
}


@pytest.mark.parametrize("path", ["/v1/models", "/v1/chat/completions"])
def test_hop_by_hop_and_connection_named_headers_stay_on_their_hop(
    make_proxy: ProxyFactory, path: str
) -> None:
    reply_headers = (
        *JSON_HEADERS,
        (b"connection", b"X-Up-Hop"),
        (b"x-up-hop", b"s2"),
        (b"keep-alive", b"timeout=5"),
        (b"proxy-authenticate", b"Basic"),
        (b"upgrade", b"h2c"),
        (b"x-kept", b"yes"),
    )
    body = b'{"object": "list", "data": []}' if path.endswith("models") else None
    script = Script(headers=reply_headers, pieces=(body or _completion(),))
    with (
        scripted({path: script}) as (upstream, seen),
        make_proxy(upstream=upstream.url + "/v1") as proxy,
    ):
        with httpx.Client() as client:
            response = client.request(
                "POST" if body is None else "GET",
                proxy.url + path,
                headers=HOP_BY_HOP_REQUEST,
                content=None if body is not None else b'{"model": "m", "messages": []}',
            )
        assert response.status_code == 200
    forwarded = seen.seen[-1].headers
    for name in ("x-hop-secret", "keep-alive", "proxy-authorization", "proxy-connection"):
        assert name not in forwarded, name
    for name in ("te", "trailer", "upgrade"):
        assert name not in forwarded, name
    assert forwarded.get("connection", "keep-alive") == "keep-alive", "the proxy's own hop"
    for name in ("x-up-hop", "keep-alive", "proxy-authenticate", "upgrade"):
        assert name not in response.headers, name
    assert response.headers["x-kept"] == "yes"


def _completion() -> bytes:
    from tests.reliability.upstreams import completion_body

    return completion_body()


@pytest.mark.parametrize(
    "head",
    [
        b"X-A: a\r\n b\r\n",  # obsolete line folding
        b"X-A: a\nX-B: b\r\n",  # bare LF inside the head
        b"X-A: a\rX-B: b\r\n",  # bare CR inside a value
        b"X-A: a\x00b\r\n",  # NUL
        b"X-A: a\x01b\r\n",  # other control characters
        b"X A: b\r\n",  # a space in a header name
    ],
    ids=["obs-fold", "bare-lf", "bare-cr", "nul", "ctl", "space-in-name"],
)
def test_header_values_with_cr_lf_or_controls_are_refused_by_the_server(
    proxy: ServerThread, log: SimulatorLog, head: bytes
) -> None:
    """uvicorn's httptools parser (llhttp, strict) refuses these heads itself: a plain-text
    400 "Invalid HTTP request received." before the app runs, so nothing can be smuggled."""
    answer = raw_exchange(proxy.port, b"GET /v1/models HTTP/1.1\r\nHost: x\r\n" + head + b"\r\n")
    assert status_of(answer) == 400
    assert log.paths == []
    keeps_serving(proxy)


def test_client_request_ids_are_validated_before_being_echoed(
    proxy: ServerThread, log: SimulatorLog
) -> None:
    response = httpx.get(proxy.url + "/v1/models", headers={"x-request-id": "a b<script>"})
    assert response.headers["x-request-id"].startswith("req_")
    assert log.headers[-1]["x-request-id"] == response.headers["x-request-id"]


@pytest.mark.parametrize(
    "headers",
    [
        [("x-big", "a" * (1024 * 1024))],
        [(f"x-h{i}", "v") for i in range(200)],
        [(f"x-h{i}", "v" * 1000) for i in range(70)],
    ],
    ids=["one-1MiB-header", "200-headers", "70KiB-of-headers"],
)
def test_oversized_request_heads_get_431_and_nothing_goes_upstream(
    proxy: ServerThread, log: SimulatorLog, headers: list[tuple[str, str]]
) -> None:
    """uvicorn with httptools sets no limit on a request head (a 1 MiB header is parsed and
    would be forwarded); the proxy refuses more than 100 headers or 64 KiB."""
    response = httpx.get(proxy.url + "/v1/models", headers=headers, timeout=10)
    assert response.status_code == 431
    assert error_body(response)["code"] == "request_headers_too_large"
    assert log.paths == []
    keeps_serving(proxy)


PROXY_KEYS = ("pk-alpha-0123456789", "pk-beta-9876543210")


def test_proxy_keys_are_checked_in_constant_time_and_never_forwarded(
    make_proxy: ProxyFactory, log: SimulatorLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    import proxy.server.app

    calls: list[tuple[bytes, bytes]] = []
    real = proxy.server.app.hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(proxy.server.app.hmac, "compare_digest", spy)
    with make_proxy(settings={"proxy_keys": PROXY_KEYS}) as server:
        url = server.url + "/v1/models"
        denied = {
            "missing": {},
            "wrong": {"authorization": "Bearer pk-gamma"},
            "prefix": {"authorization": "Bearer pk-alpha"},
            "longer": {"authorization": f"Bearer {PROXY_KEYS[0]}0"},
            "empty": {"authorization": "Bearer"},
            "basic": {"authorization": f"Basic {PROXY_KEYS[0]}"},
            "non-ascii": {"x-toolcall-proxy-key": "pk-\u00e9".encode()},
        }
        for name, headers in denied.items():
            response = httpx.get(url, headers=headers)
            assert response.status_code == 401, name
            assert error_body(response)["type"] == "authentication_error"
        assert log.paths == []
        calls.clear()
        for key in PROXY_KEYS:
            assert httpx.get(url, headers={"authorization": f"Bearer {key}"}).status_code == 200
            # Every configured key is compared, whichever matches: no early exit to time.
            assert [b for _, b in calls] == [k.encode() for k in PROXY_KEYS]
            calls.clear()
        via_header = httpx.get(
            url, headers={"x-toolcall-proxy-key": PROXY_KEYS[1], "authorization": "Bearer sk-own"}
        )
        assert via_header.status_code == 200
    for headers in log.headers:
        for value in headers.values():
            assert not any(key in value for key in PROXY_KEYS), "a proxy key was forwarded"
    assert log.headers[-1]["authorization"] == "Bearer sk-own", "the client's own key passes"


UPSTREAM_SECRET = "sk-upstream-SECRET-3f9c1e"
PROXY_SECRET = "pk-proxy-SECRET-77aa0b"
CLIENT_SECRET = "sk-client-SECRET-5d2e44"


def test_secrets_never_reach_logs_errors_or_metrics(
    make_proxy: ProxyFactory, log: SimulatorLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RELIABILITY_UPSTREAM_KEY", UPSTREAM_SECRET)
    records: list[str] = []

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(self.format(record))

    handler = Capture(level=logging.DEBUG)
    handler.setFormatter(JsonFormatter())
    watched = [LOGGER, logging.getLogger("uvicorn.error"), logging.getLogger("uvicorn")]
    levels = [logger.level for logger in watched]
    for logger in watched:
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
    seen: list[bytes] = []
    try:
        with make_proxy(
            settings={"proxy_keys": (PROXY_SECRET,)},
            upstream_key_env="RELIABILITY_UPSTREAM_KEY",
            read_timeout=0.5,
            max_followups=1,
        ) as server:
            ok = {"authorization": f"Bearer {PROXY_SECRET}"}

            def post(model: str, stream: bool, **extra: object) -> httpx.Response:
                body = {"model": model, "stream": stream, "messages": [], **extra}
                response = httpx.post(
                    server.url + "/v1/chat/completions", json=body, headers=ok, timeout=10
                )
                seen.append(repr(response.headers).encode() + response.content)
                return response

            for stream in (False, True):
                assert post("kimi", stream).status_code == 200
                assert post("fault-429", stream).status_code == 429
                assert post("fault-hang+stall_s=5", stream).status_code == 504
            assert error_event(post("fault-reset", True).content)["code"]
            body = {"model": "replay-loop", "messages": ANSWERED_HISTORY}
            for headers in (ok, {"authorization": f"Bearer {CLIENT_SECRET}"}, {}):
                response = httpx.post(
                    server.url + "/v1/chat/completions", json=body, headers=headers
                )
                seen.append(repr(response.headers).encode() + response.content)
                assert response.status_code in (401, 422)
            oversized = httpx.post(
                server.url + "/v1/chat/completions",
                content=b"x" * (33 * 1024 * 1024),
                headers=ok,
            )
            assert oversized.status_code == 413
            models = httpx.get(server.url + "/v1/models", headers=ok)
            seen += [oversized.content, models.content]
            metrics = httpx.get(server.url + "/metrics").text
            assert metric(server, "toolcall_proxy_breaker_trips_total") == 1
    finally:
        for logger, level in zip(watched, levels, strict=True):
            logger.removeHandler(handler)
            logger.setLevel(level)
    assert any('"msg":"request"' in r for r in records), "the request log was captured"
    assert log.headers and all(
        h.get("authorization") == f"Bearer {UPSTREAM_SECRET}"
        for h, path in zip(log.headers, log.paths, strict=True)
        if path.startswith("/v1/")
    ), "the route's key replaced the client's on every forwarded request"
    text = "\n".join(records)
    for secret in (UPSTREAM_SECRET, PROXY_SECRET, CLIENT_SECRET):
        assert secret not in text, "a secret reached the logs"
        assert secret not in metrics, "a secret reached the metrics"
        for body in seen:
            assert secret.encode() not in body, "a secret reached a response"
    for headers in log.headers:
        assert PROXY_SECRET not in orjson.dumps(headers).decode()


def _loop_error(response: httpx.Response, tool: str, *, as_event: bool) -> None:
    """SPEC §5: the breaker's error, as a 422, or as a stream's last event once the stream
    had sent bytes."""
    if as_event:
        assert response.status_code == 200
        error = error_event(response.content)
    else:
        assert response.status_code == 422
        error = error_body(response)
    # In-stream, the type qwen-code does not retry (proxy.core.errors.LOOP_EVENT_TYPE).
    kind = "invalid_request_error" if as_event else "loop_detected"
    assert (error["type"], error["code"]) == (kind, "tool_call_replay_loop")
    assert error["message"].startswith("Tool-call replay loop detected")
    assert f'"{tool}"' in error["message"], "the message names the replayed tool"


# Four answered calls of four tools; native ids, so each is its own upstream id.
STEPS = [
    (f"call_Q7vR2kLm9XpT4sWzA1bC3d{k}", tool, f'{{"target":"{tool}"}}')
    for k, tool in enumerate(("build", "test", "lint", "deploy"))
]
STEPS_ANSWERED = [
    {"role": "user", "content": "ship it"},
    {"role": "assistant", "content": None, "tool_calls": tool_calls(*STEPS)},
    *({"role": "tool", "tool_call_id": call_id, "content": "done"} for call_id, _, _ in STEPS),
]


@pytest.mark.parametrize("max_followups", [0, 1, 2])
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_follow_up_rounds_are_bounded(
    make_proxy: ProxyFactory, max_followups: int, stream: bool
) -> None:
    """SPEC §5: more than `max_followups` follow-up rounds stop the response. The upstream
    replays another answered call every round, so no other breaker rule applies first: it
    sees exactly 1 + max_followups requests, and the error names the first replayed tool."""
    # Each round says something first, so a stream has sent bytes when the breaker trips.
    rounds = tuple(answer(step, content=f"Running {step[1]}. ", stream=stream) for step in STEPS)
    with (
        sequenced(*rounds) as (upstream, seen),
        make_proxy(upstream=upstream.url + "/v1", max_followups=max_followups) as server,
    ):
        body = {"model": "m", "stream": stream, "messages": STEPS_ANSWERED}
        response = httpx.post(server.url + "/v1/chat/completions", json=body, timeout=10)
    _loop_error(response, "build", as_event=stream)
    assert len(seen.chat_requests()) == 1 + max_followups


@pytest.mark.parametrize("max_followups", [0, 1, 2])
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_replay_of_the_answered_copy_trips_the_breaker_at_once(
    make_proxy: ProxyFactory, log: SimulatorLog, max_followups: int, stream: bool
) -> None:
    """SPEC §5: replay-loop replays, in the follow-up, the copy the proxy just answered, and
    that trips the breaker on the spot: 2 upstream requests whatever max_followups allows
    beyond one round (with 0, no follow-up round at all: 1)."""
    with make_proxy(max_followups=max_followups) as server:
        body = {"model": "replay-loop", "stream": stream, "messages": ANSWERED_HISTORY}
        response = httpx.post(server.url + "/v1/chat/completions", json=body, timeout=10)
    # Streaming too: the looping model sends nothing before its replays (SPEC §5).
    _loop_error(response, "run_shell_command", as_event=False)
    assert len(log.requests) == min(2, 1 + max_followups)


def test_upstream_cookies_reach_only_the_client_they_were_set_for(make_proxy: ProxyFactory) -> None:
    """A shared httpx client keeps a cookie jar by default and sends what one user's response
    set with every later request; the proxy's must not."""
    script = Script(
        headers=(*JSON_HEADERS, (b"set-cookie", b"session=SECRET-OF-ALICE; Path=/")),
        pieces=(b'{"object": "list", "data": []}',),
    )
    with (
        scripted({"/v1/models": script}) as (upstream, seen),
        make_proxy(upstream=upstream.url + "/v1") as proxy,
    ):
        alice = httpx.get(proxy.url + "/v1/models")
        assert alice.headers["set-cookie"].startswith("session=SECRET-OF-ALICE")
        httpx.get(proxy.url + "/v1/models")  # bob, another client, no cookie of his own
        httpx.get(proxy.url + "/v1/models", headers={"cookie": "own=1"})
    assert "cookie" not in seen.seen[1].headers
    assert seen.seen[2].headers["cookie"] == "own=1", "a client's own cookies still pass"
