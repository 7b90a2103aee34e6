"""SPEC §1 and §6 end to end: a real proxy on loopback in front of the simulated provider,
driven by the official openai SDK and by httpx."""

from __future__ import annotations

import threading

import httpx
import openai
import pytest

from proxy.simulator import SimulatorLog
from tests.e2e.conftest import ProxyFactory
from tests.reliability.upstreams import SSE_HEADERS, Script, scripted
from tests.servers import ServerThread, free_port


def client_for(server: ServerThread, **kwargs: object) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="sk-test", max_retries=0, **kwargs)  # type: ignore[arg-type]


def test_plain_completion_passes_through_non_streaming(proxy: ServerThread) -> None:
    completion = client_for(proxy).chat.completions.create(
        model="reference+rounds=0", messages=[{"role": "user", "content": "hi"}]
    )
    assert completion.choices[0].message.content == "All 0 rounds done."
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None and completion.usage.total_tokens > 0


def test_plain_completion_streams_with_usage_and_unknown_fields(proxy: ServerThread) -> None:
    stream = client_for(proxy).chat.completions.create(
        model="reference+rounds=0",
        messages=[{"role": "user", "content": "hi"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "All 0 rounds done."
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    # The SDK's models do not surface unknown keys: check the wire.
    body = {"model": "reference+rounds=0", "stream": True, "messages": []}
    with httpx.stream("POST", proxy.url + "/v1/chat/completions", json=body) as response:
        raw = response.read()
    assert raw.count(b'"obfuscation":') >= 3, "unknown top-level keys must pass"
    assert b'"system_fingerprint":"fp_toolcall_sim"' in raw


def _writes(body: bytes, how: str) -> tuple[bytes, ...]:
    """The upstream's body as the writes it is sent in."""
    if how == "one-write":
        return (body,)
    if how == "event-by-event":
        return tuple(event + b"\n\n" for event in body.split(b"\n\n")[:-1])
    cuts = sorted({7, len(body) // 3, len(body) // 3 + 1, len(body) - 5})  # inside events
    return tuple(body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True))


@pytest.mark.parametrize("how", ["one-write", "event-by-event", "cut-events"])
def test_content_bytes_are_forwarded_unchanged(
    make_proxy: ProxyFactory, simulator: ServerThread, how: str
) -> None:
    """A stream without tool calls reaches the client as the very bytes the upstream sent
    (SPEC §4: everything else passes through unchanged), whatever the reads' boundaries.

    `event-by-event` runs in lockstep: after the first two, the upstream writes an event only
    once the client has received the one before, so the proxy reads each on its own (its
    fast path for whole unchanged events); a single read of everything, or reads cut inside
    events, take its general path."""
    body = {
        "model": "reference+rounds=0",
        "stream": True,
        "stream_options": {"include_usage": True},
        "messages": [{"role": "user", "content": "x"}],
    }
    # A real upstream stream (unknown fields, a finish chunk, a usage chunk), captured once so
    # that it can be served again byte for byte.
    with httpx.stream("POST", simulator.url + "/v1/chat/completions", json=body) as response:
        sent = response.read()
    assert sent.count(b'"obfuscation":') >= 3 and b'"usage":' in sent
    # The first event (the role, nothing a user sees) may wait for the next one and leave
    # with it (SPEC §5), so the first two are written at once; then one per event received.
    gate = threading.Semaphore(1) if how == "event-by-event" else None
    script = Script(headers=SSE_HEADERS, pieces=_writes(sent, how), gate=gate)
    received = b""
    with (
        scripted({"/v1/chat/completions": script}) as (upstream, _),
        make_proxy(upstream=upstream.url + "/v1") as server,
        httpx.stream(
            "POST", server.url + "/v1/chat/completions", json=body, timeout=30
        ) as response,
    ):
        released = 1
        for piece in response.iter_raw():
            received += piece
            if gate is not None:
                while released < received.count(b"\n\n"):
                    gate.release()
                    released += 1
    assert received == sent


def test_models_pass_through(proxy: ServerThread, log: SimulatorLog) -> None:
    models = client_for(proxy).models.list()
    assert "kimi" in {m.id for m in models.data}
    assert log.paths[-1] == "/v1/models"


def test_query_and_headers_pass_through(proxy: ServerThread, log: SimulatorLog) -> None:
    response = httpx.get(
        proxy.url + "/v1/models?limit=5",
        headers={
            "authorization": "Bearer sk-user",
            "x-custom": "1",
            "connection": "keep-alive, x-hop",
            "x-hop": "secret",
        },
    )
    assert response.status_code == 200
    seen = log.headers[-1]
    assert seen["authorization"] == "Bearer sk-user"
    assert seen["x-custom"] == "1"
    assert "x-hop" not in seen, "headers named in Connection are hop-by-hop"
    assert seen["host"] != f"127.0.0.1:{proxy.port}"
    assert response.headers["x-request-id"] == seen["x-request-id"], "request id sent and returned"


def test_embeddings_pass_through(proxy: ServerThread) -> None:
    result = client_for(proxy).embeddings.create(model="reference", input="hello")
    assert len(result.data[0].embedding) > 0


def test_upstream_429_comes_back_unchanged(proxy: ServerThread) -> None:
    response = httpx.post(
        proxy.url + "/v1/chat/completions", json={"model": "fault-429", "messages": []}
    )
    assert response.status_code == 429
    assert response.headers["retry-after"] == "7"
    assert response.headers["x-ratelimit-remaining-requests"] == "0"
    assert response.json()["error"]["type"]
    with pytest.raises(openai.RateLimitError) as caught:
        client_for(proxy).chat.completions.create(model="fault-429", messages=[])
    assert caught.value.response.headers["retry-after"] == "7"


def test_upstream_500_comes_back_unchanged(proxy: ServerThread, simulator: ServerThread) -> None:
    direct = httpx.post(
        simulator.url + "/v1/chat/completions", json={"model": "fault-500", "messages": []}
    )
    via = httpx.post(
        proxy.url + "/v1/chat/completions", json={"model": "fault-500", "messages": []}
    )
    assert via.status_code == direct.status_code == 500
    assert via.json() == direct.json()


def test_unreachable_upstream_gives_502(make_proxy: ProxyFactory) -> None:
    dead = f"http://127.0.0.1:{free_port()}/v1"
    with make_proxy(upstream=dead, connect_timeout=2.0) as server:
        with pytest.raises(openai.APIStatusError) as caught:
            client_for(server).chat.completions.create(model="reference", messages=[])
        assert caught.value.status_code == 502
        body = caught.value.response.json()
        assert body["error"]["type"] == "upstream_error"
        assert body["error"]["code"] == "upstream_unreachable"
        assert httpx.get(server.url + "/v1/models").status_code == 502


def test_upstream_silent_past_read_timeout_gives_504(make_proxy: ProxyFactory) -> None:
    with make_proxy(read_timeout=0.5) as server:
        response = httpx.post(
            server.url + "/v1/chat/completions",
            timeout=10,
            json={"model": "fault-hang+stall_s=5", "messages": []},
        )
        assert response.status_code == 504
        assert response.json()["error"]["code"] == "upstream_timeout"


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"{not json", "invalid_json"),
        (b"[1, 2]", "invalid_body"),
        (b'{"model": "x", "messages": "hi"}', "invalid_messages"),
    ],
)
def test_bad_request_bodies_get_400_and_nothing_goes_upstream(
    proxy: ServerThread, log: SimulatorLog, body: bytes, code: str
) -> None:
    response = httpx.post(
        proxy.url + "/v1/chat/completions",
        content=body,
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["code"] == code
    assert set(error) == {"message", "type", "code", "param"}
    assert log.requests == []


def test_oversized_body_gets_413(make_proxy: ProxyFactory, log: SimulatorLog) -> None:
    with make_proxy(settings={"max_body_bytes": 1000}) as server:
        big = {"model": "reference", "messages": [{"role": "user", "content": "x" * 2000}]}
        response = httpx.post(server.url + "/v1/chat/completions", json=big)
        assert response.status_code == 413
        assert log.requests == []


def test_proxy_keys_are_required_and_never_forwarded(
    make_proxy: ProxyFactory, log: SimulatorLog
) -> None:
    with make_proxy(settings={"proxy_keys": ("pk-123",)}) as server:
        denied = httpx.get(server.url + "/v1/models")
        assert denied.status_code == 401
        assert denied.json()["error"]["type"] == "authentication_error"
        wrong = httpx.get(server.url + "/v1/models", headers={"authorization": "Bearer nope"})
        assert wrong.status_code == 401
        assert log.paths == []
        ok = client_for_key(server, "pk-123").models.list()
        assert ok.data
        assert "authorization" not in log.headers[-1]


def client_for_key(server: ServerThread, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key=key, max_retries=0)


def test_health_and_readiness(proxy: ServerThread) -> None:
    assert httpx.get(proxy.url + "/healthz").json() == {"status": "ok"}
    assert httpx.get(proxy.url + "/readyz").status_code == 200


def test_unknown_path_outside_base_is_404_in_openai_shape(proxy: ServerThread) -> None:
    response = httpx.get(proxy.url + "/nope")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
