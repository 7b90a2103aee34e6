"""SPEC §6 (and §4's "How a stream ends") end to end: the real proxy on loopback in front of
the simulated provider's fault profiles, streaming and not. For each fault the client gets
exactly the documented answer, and the proxy keeps serving: a normal request succeeds right
after it."""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Iterator

import httpx
import openai
import orjson
import pytest

from proxy.server import exchange_handler
from tests.e2e.conftest import ProxyFactory
from tests.logcapture import proxy_records
from tests.reliability.upstreams import (
    HOLD_LIMIT_S,
    JSON_HEADERS,
    SSE_HEADERS,
    Script,
    completion_body,
    scripted,
    sse_body,
)
from tests.reliability.wire import (
    chat,
    data_events,
    error_body,
    error_event,
    keeps_serving,
    metric,
    reassemble,
    reassemble_any,
    upstream_events,
)
from tests.servers import ServerThread, free_port

READ_TIMEOUT = 1.0
BOTH = pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])


@pytest.fixture(scope="module")
def fault_proxy(make_proxy: ProxyFactory) -> Iterator[ServerThread]:
    """A proxy whose read timeout is short enough to watch stalls and hangs happen."""
    with make_proxy(read_timeout=READ_TIMEOUT) as server:
        yield server


@BOTH
@pytest.mark.parametrize("model", ["fault-429", "fault-500"])
def test_upstream_error_status_passes_through_unchanged(
    fault_proxy: ServerThread, simulator: ServerThread, model: str, stream: bool
) -> None:
    direct = chat(simulator, model, stream=stream)
    via = chat(fault_proxy, model, stream=stream)
    assert via.status_code == direct.status_code == int(model[-3:])
    assert via.content == direct.content
    assert via.headers["content-type"] == direct.headers["content-type"]
    if model == "fault-429":
        for name in ("retry-after", "x-ratelimit-remaining-requests", "x-request-id"):
            assert via.headers[name] == direct.headers[name], name
    keeps_serving(fault_proxy)


@BOTH
def test_unreachable_upstream_gives_502(make_proxy: ProxyFactory, stream: bool) -> None:
    dead = f"http://127.0.0.1:{free_port()}/v1"
    with make_proxy(upstream=dead, connect_timeout=2.0) as server:
        for _ in range(2):  # the same defined answer every time
            response = chat(server, "kimi", stream=stream)
            assert response.status_code == 502
            error = error_body(response)
            assert (error["type"], error["code"]) == ("upstream_error", "upstream_unreachable")
        assert metric(server, "toolcall_proxy_upstream_errors_total", kind="upstream_unreachable")


@BOTH
def test_no_response_head_within_read_timeout_gives_504(
    fault_proxy: ServerThread, stream: bool
) -> None:
    response = chat(fault_proxy, "fault-hang+stall_s=10", stream=stream)
    assert response.status_code == 504
    error = error_body(response)
    assert (error["type"], error["code"]) == ("upstream_error", "upstream_timeout")
    keeps_serving(fault_proxy)


@pytest.mark.parametrize("model", ["fault-reset", f"fault-stall+stall_s={READ_TIMEOUT * 5:g}"])
def test_stream_broken_or_stalled_mid_way_ends_with_an_error_event(
    fault_proxy: ServerThread, model: str
) -> None:
    response = chat(fault_proxy, model, stream=True)
    assert response.status_code == 200
    events = data_events(response.content)
    assert len(events) >= 3, "what arrived before the fault was forwarded"
    error = error_event(response.content)
    assert (error["type"], error["code"]) == ("upstream_error", "upstream_stream_error")
    # The openai SDK raises on it, so an agent does not take the partial message as final.
    client = openai.OpenAI(base_url=fault_proxy.url + "/v1", api_key="sk", max_retries=0)
    with pytest.raises(openai.APIError) as caught:
        list(client.chat.completions.create(model=model, messages=[], stream=True))
    assert isinstance(caught.value.body, dict)
    assert caught.value.body["code"] == "upstream_stream_error"
    keeps_serving(fault_proxy)


@pytest.mark.parametrize("model", ["fault-reset", f"fault-stall+stall_s={READ_TIMEOUT * 5:g}"])
def test_body_broken_or_stalled_mid_way_gives_502_without_stream(
    fault_proxy: ServerThread, model: str
) -> None:
    response = chat(fault_proxy, model, stream=False)
    assert response.status_code == 502
    error = error_body(response)
    assert (error["type"], error["code"]) == ("upstream_error", "upstream_stream_error")
    keeps_serving(fault_proxy)


@pytest.mark.parametrize("rounds", [3, 0], ids=["tool-round", "final-text"])
def test_stream_without_finish_or_done_is_completed(
    fault_proxy: ServerThread, simulator: ServerThread, rounds: int
) -> None:
    model = f"no-finish+rounds={rounds}"
    direct = chat(simulator, model, stream=True).content
    assert b"[DONE]" not in direct
    response = chat(fault_proxy, model, stream=True)
    events = data_events(response.content)
    assert events[-1] == b"[DONE]" and events.count(b"[DONE]") == 1
    result = reassemble(response.content)
    if rounds:
        assert result["finish"] == "tool_calls"
        assert orjson.loads(result["calls"][0]["arguments"]) == {"command": "echo round-1-0"}
        last = orjson.loads(events[-2])["choices"][0]
        assert last["finish_reason"] == "tool_calls", "the proxy's own finish chunk"
    else:
        assert (result["finish"], result["content"]) == ("stop", "All 0 rounds done.")
    completion = chat(fault_proxy, model, stream=False).json()
    assert completion["choices"][0]["finish_reason"] == ("tool_calls" if rounds else "stop")
    keeps_serving(fault_proxy)


def test_non_json_lines_become_comments_and_the_stream_stays_well_formed(
    fault_proxy: ServerThread, simulator: ServerThread
) -> None:
    # SPEC §4: a data line that is not JSON becomes a comment carrying the same text, in place.
    before = metric(fault_proxy, "toolcall_proxy_deltas_repaired_total", kind="non_json_data")
    direct = chat(simulator, "fault-garbage", stream=True).content
    response = chat(fault_proxy, "fault-garbage", stream=True)
    raw = response.content
    events = data_events(raw)  # strict framing
    upstream_non_json = [e for e in upstream_events(direct) if e == b"not json"]
    assert upstream_non_json
    assert [e for e in events if e != b"[DONE]" and not e.startswith(b"{")] == []
    non_json = [line for line in raw.split(b"\n") if line == b": not json"]
    assert len(non_json) == len(upstream_non_json), "each line kept, as a comment"
    assert raw.count(b": keep-alive\n\n") == direct.count(b": keep-alive\n\n")
    for event in events:
        if event.startswith(b"{"):
            assert isinstance(orjson.loads(event), dict)
    assert events[-1] == b"[DONE]"
    ours, theirs = reassemble(raw), reassemble_any(direct)
    assert ours["content"] == theirs["content"]
    assert [(c["name"], c["arguments"]) for c in ours["calls"].values()] == [
        (c["name"], c["arguments"]) for c in theirs["calls"].values()
    ]
    after = metric(fault_proxy, "toolcall_proxy_deltas_repaired_total", kind="non_json_data")
    assert after - before == len(non_json), "each non-JSON line is counted"
    keeps_serving(fault_proxy)


def test_a_broken_line_inside_a_call_ends_the_stream_with_an_error(
    fault_proxy: ServerThread, simulator: ServerThread
) -> None:
    """SPEC §4: a truncated line between a call's argument deltas may have carried a
    fragment: the call is never completed without it; the stream ends with the error event,
    counted as the upstream's failure, and the openai SDK raises so the agent asks again."""
    model = "fault-garbage-in-call"
    assert b'delta":{"tool_ca\n' in chat(simulator, model, stream=True).content
    before = metric(
        fault_proxy, "toolcall_proxy_upstream_errors_total", kind="upstream_stream_error"
    )
    raw = chat(fault_proxy, model, stream=True).content
    error = error_event(raw)
    assert (error["type"], error["code"]) == ("upstream_error", "upstream_stream_error")
    assert b"[DONE]" not in raw and b'"finish_reason":"tool_calls"' not in raw
    after = metric(
        fault_proxy, "toolcall_proxy_upstream_errors_total", kind="upstream_stream_error"
    )
    assert after - before == 1
    client = openai.OpenAI(base_url=fault_proxy.url + "/v1", api_key="sk", max_retries=0)
    with pytest.raises(openai.APIError) as caught:
        list(client.chat.completions.create(model=model, messages=[], stream=True))
    assert isinstance(caught.value.body, dict)
    assert caught.value.body["code"] == "upstream_stream_error"
    keeps_serving(fault_proxy)


@BOTH
def test_one_enormous_chunk_is_delivered_intact(
    fault_proxy: ServerThread, simulator: ServerThread, stream: bool
) -> None:
    model = "fault-huge+kb=8192"
    direct = chat(simulator, model, stream=stream)
    via = chat(fault_proxy, model, stream=stream)
    assert via.status_code == 200
    if stream:
        ours, theirs = reassemble(via.content), reassemble_any(direct.content)
        assert len(ours["content"]) == 8192 * 1024
        assert ours["content"] == theirs["content"]
        assert data_events(via.content)[-1] == b"[DONE]"
    else:
        content = via.json()["choices"][0]["message"]["content"]
        assert len(content) == 8192 * 1024
        assert content == direct.json()["choices"][0]["message"]["content"]
    keeps_serving(fault_proxy)


def test_one_byte_drip_gives_the_same_stream_as_one_write(
    fault_proxy: ServerThread, simulator: ServerThread, make_proxy: ProxyFactory
) -> None:
    # The simulator's drip profile, end to end: non-ASCII text split inside characters.
    dripped = reassemble(chat(fault_proxy, "fault-drip", stream=True).content)
    assert dripped["content"] == "Let me run that… ✓"
    assert dripped["finish"] == "tool_calls"
    assert orjson.loads(dripped["calls"][0]["arguments"]) == {"command": "echo round-1-0"}
    # Byte for byte: the same recorded upstream body, sent whole and one byte per write.
    recorded = chat(simulator, "fault-drip", stream=True).content
    outputs = []
    for drip in (False, True):
        script = Script(headers=SSE_HEADERS, pieces=(recorded,), drip=drip)
        with (
            scripted({"/v1/chat/completions": script}) as (upstream, _),
            make_proxy(upstream=upstream.url + "/v1") as server,
        ):
            outputs.append(chat(server, "reference", stream=True).content)
    assert outputs[0] == outputs[1]
    assert reassemble(outputs[0]) == {**dripped, "calls": reassemble(outputs[0])["calls"]}
    keeps_serving(fault_proxy)


def test_crlf_framing_is_normalized(fault_proxy: ServerThread, simulator: ServerThread) -> None:
    direct = chat(simulator, "fault-crlf", stream=True).content
    assert b"\r\n" in direct and b"data:{" in direct
    raw = chat(fault_proxy, "fault-crlf", stream=True).content
    events = data_events(raw)  # strict: LF only, `data: ` with a space
    assert events[-1] == b"[DONE]"
    ours, theirs = reassemble(raw), reassemble_any(direct)
    assert ours["content"] == theirs["content"]
    assert ours["calls"][0]["arguments"] == theirs["calls"][0]["arguments"]
    keeps_serving(fault_proxy)


def test_the_client_body_ends_with_done_while_the_upstream_keeps_its_body_open(
    make_proxy: ProxyFactory,
) -> None:
    """Nothing is forwarded after `[DONE]`, so the client's response ends there: a client is
    never kept waiting on an upstream that is slow to close its body (or never does)."""
    release = threading.Event()
    held = Script(headers=SSE_HEADERS, pieces=(sse_body("held"),), hold=release)
    with (
        scripted({"/v1/chat/completions": held}) as (upstream, _),
        make_proxy(upstream=upstream.url + "/v1") as proxy,
    ):
        served = metric(proxy, "toolcall_proxy_requests_total", status="200", stream="true")
        try:
            # The read timeout is well under the upstream's hold: the body must end first.
            response = httpx.post(
                proxy.url + "/v1/chat/completions",
                json={"model": "m", "stream": True, "messages": [{"role": "user", "content": "x"}]},
                timeout=HOLD_LIMIT_S / 2,
            )
            assert not release.is_set()
        finally:
            release.set()
        assert response.status_code == 200
        assert data_events(response.content)[-1] == b"[DONE]"
        assert reassemble_any(response.content)["content"] == "held"
        # Once the upstream ends, the request is counted as served, not as a client that left.
        deadline = time.monotonic() + HOLD_LIMIT_S
        while metric(proxy, "toolcall_proxy_requests_total", status="200", stream="true") == served:
            assert time.monotonic() < deadline, "the request was never counted as served"
        assert metric(proxy, "toolcall_proxy_requests_total", status="499", stream="true") == 0
        # The upstream connection was read to its end, and the proxy goes on serving.
        again = chat(proxy, "m", stream=True)
        assert data_events(again.content)[-1] == b"[DONE]"


@pytest.mark.parametrize("bound", ["bytes", "time"])
def test_reading_the_upstream_after_done_is_bounded(
    make_proxy: ProxyFactory,
    monkeypatch: pytest.MonkeyPatch,
    bound: str,
) -> None:
    """After the client's body ended, the rest of the upstream body is read only up to
    DRAIN_BYTES or DRAIN_SECONDS: an upstream that goes on sending, or holds its body open,
    cannot keep a task (and the request's accounting) waiting."""
    # Each case switches the other bound out of reach, so only its own can end the reading.
    monkeypatch.setattr(exchange_handler, "DRAIN_SECONDS", 0.2 if bound == "time" else 60.0)
    # In 8 KiB writes, so most of it comes after the read that carried `[DONE]`.
    pieces = 2 * exchange_handler.DRAIN_BYTES // 8192 if bound == "bytes" else 1
    tail = (b": after done" + b"." * 8178 + b"\n\n",) * pieces
    release = threading.Event()
    held = Script(headers=SSE_HEADERS, pieces=(sse_body("held"), *tail), hold=release)
    with (
        scripted({"/v1/chat/completions": held}) as (upstream, _),
        make_proxy(upstream=upstream.url + "/v1") as proxy,
    ):
        with proxy_records() as lines:
            try:
                served = metric(proxy, "toolcall_proxy_requests_total", status="200", stream="true")
                sent = time.monotonic()
                response = chat(proxy, "m", stream=True)
                client_ms = (time.monotonic() - sent) * 1000
                assert data_events(response.content)[-1] == b"[DONE]"
                deadline = time.monotonic() + HOLD_LIMIT_S / 2
                while (
                    metric(proxy, "toolcall_proxy_requests_total", status="200", stream="true")
                    == served
                ):
                    assert time.monotonic() < deadline, "the proxy kept reading the upstream"
                assert not release.is_set(), "counted while the upstream still holds its body"
                [line] = [r for r in lines if r.getMessage() == "request"]
                fields = line.fields  # type: ignore[attr-defined]
                # The logged duration is the client's (up to the body's end), not the reading after.
                assert fields["status"] == 200 and fields["duration_ms"] <= client_ms
            finally:
                release.set()
        again = chat(proxy, "m", stream=True)
        assert reassemble_any(again.content)["content"] == "held"


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_compressed_chat_answer_is_decoded_and_sanitized(
    make_proxy: ProxyFactory, stream: bool
) -> None:
    """The proxy asks for `identity`, but an upstream may compress anyway: the chat core needs
    the decoded body, and the client gets it decoded, without the content-encoding header."""
    body = sse_body("zipped") if stream else completion_body("zipped")
    packed = gzip.compress(body)
    pieces = (packed[:40], packed[40:])  # the decoder must carry state across reads
    headers = (*(SSE_HEADERS if stream else JSON_HEADERS), (b"content-encoding", b"gzip"))
    script = Script(headers=headers, pieces=pieces)
    with (
        scripted({"/v1/chat/completions": script}) as (upstream, seen),
        make_proxy(upstream=upstream.url + "/v1") as proxy,
    ):
        response = chat(proxy, "m", stream=stream)
    assert response.status_code == 200
    assert "content-encoding" not in response.headers
    assert seen.seen[-1].headers["accept-encoding"] == "identity"
    if stream:
        assert data_events(response.content)[-1] == b"[DONE]"
        assert reassemble_any(response.content)["content"] == "zipped"
    else:
        assert response.json()["choices"][0]["message"]["content"] == "zipped"


def test_a_compressed_passthrough_answer_is_relayed_as_it_came(make_proxy: ProxyFactory) -> None:
    listing = b'{"object":"list","data":[{"id":"m","object":"model"}]}'
    packed = gzip.compress(listing)
    script = Script(headers=(*JSON_HEADERS, (b"content-encoding", b"gzip")), pieces=(packed,))
    with (
        scripted({"/v1/models": script}) as (upstream, _),
        make_proxy(upstream=upstream.url + "/v1") as proxy,
        httpx.stream("GET", proxy.url + "/v1/models", timeout=10) as response,
    ):
        raw = b"".join(response.iter_raw())
        assert response.headers["content-encoding"] == "gzip"
    assert raw == packed
