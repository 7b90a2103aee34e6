"""SPEC §11's "is said": a request the proxy repaired before it left is counted in
`toolcall_proxy_requests_repaired_total{kind, surface}` (once per request and kind; no longer
in the deltas' counter), listed in the request's log line (`request_repairs`) and named in the
response's head (`x-toolcall-proxy-repaired: kind,kind`), streamed or not, on every surface
and over each bridge; a request that needed nothing carries none of it. Through the real
proxy on loopback, in front of the strict simulator."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from proxy.simulator import SimulatorLog
from tests.e2e.conftest import ProxyFactory
from tests.e2e.test_request_repair import HISTORY, MODEL, TOOLS
from tests.e2e.test_strict_surfaces import (
    INTERRUPTED,
    RESPONSES_HISTORY,
    RESPONSES_TOOLS,
    tool_result,
)
from tests.logcapture import proxy_records
from tests.servers import ServerThread, wait_for

HEADER = "x-toolcall-proxy-repaired"
ANTHROPIC_TOOLS = [{"name": "Bash", "input_schema": {"type": "object", "properties": {}}}]
# The interrupted session, and a result whose call was compacted away after it.
ANTHROPIC_HISTORY = [
    *INTERRUPTED,
    {"role": "assistant", "content": "Stopped."},
    {"role": "user", "content": [tool_result("toolu_gone01", "old output")]},
]
CLEAN_CHAT = [{"role": "user", "content": "hi"}]


def chat(stream: bool, messages: list[Any] = HISTORY) -> dict[str, Any]:
    return {"model": MODEL, "messages": messages, "tools": TOOLS, "stream": stream}


def messages(stream: bool) -> dict[str, Any]:
    return {
        "model": MODEL,
        "max_tokens": 256,
        "messages": ANTHROPIC_HISTORY,
        "tools": ANTHROPIC_TOOLS,
        "stream": stream,
    }


def responses(stream: bool) -> dict[str, Any]:
    return {
        "model": MODEL,
        "input": RESPONSES_HISTORY,
        "tools": RESPONSES_TOOLS,
        "store": False,
        "stream": stream,
    }


# (path, body, the surface's label, the kinds named) per client API.
CASES = {
    "chat": ("/v1/chat/completions", chat, "chat_completions", "missing_result,orphan_result"),
    "anthropic": ("/v1/messages", messages, "anthropic_messages", "missing_result,orphan_result"),
    "responses": ("/v1/responses", responses, "responses", "missing_result"),
}


@pytest.fixture(scope="module")
def bridge(make_proxy: ProxyFactory) -> Iterator[ServerThread]:
    with make_proxy(upstream_api="chat_completions") as server:
        yield server


def post(server: ServerThread, path: str, body: dict[str, Any]) -> httpx.Headers:
    """The answer's head (read before any of a stream's body), after checking it is a 200
    whose body then arrives whole."""
    with httpx.stream("POST", server.url + path, json=body, timeout=30) as response:
        headers = response.headers
        assert response.status_code == 200, response.read()
        body_bytes = response.read()
    assert body_bytes
    return headers


def request_lines(records: list[logging.LogRecord]) -> list[dict[str, Any]]:
    return [
        r.fields  # type: ignore[attr-defined]
        for r in records
        if r.getMessage() == "request" and isinstance(getattr(r, "fields", None), dict)
    ]


def counters(server: ServerThread, name: str) -> dict[tuple[str, str], float]:
    """A `{kind, surface}` counter's `_total` samples."""
    text = httpx.get(server.url + "/metrics").text
    return {
        (sample.labels["kind"], sample.labels["surface"]): sample.value
        for family in text_string_to_metric_families(text)
        if family.name == name
        for sample in family.samples
        if sample.name == name + "_total"
    }


# Every API on its own, and each over a bridge to Chat Completions (the bridges' upstream API,
# so Chat has no bridged case).
PAIRINGS = [
    pytest.param(api, bridged, id=f"{api}-{'bridge' if bridged else 'own-api'}")
    for api in ["chat", "anthropic", "responses"]
    for bridged in (False, True)
    if not (api == "chat" and bridged)
]


@pytest.mark.parametrize(("api", "bridged"), PAIRINGS)
def test_a_repaired_request_is_named_logged_and_counted(
    make_proxy: ProxyFactory, log: SimulatorLog, api: str, bridged: bool
) -> None:
    path, body, surface, kinds = CASES[api]
    route = {"upstream_api": "chat_completions"} if bridged else {}
    with make_proxy(**route) as proxy, proxy_records() as records:
        for stream in (False, True):
            headers = post(proxy, path, body(stream))
            assert headers.get(HEADER) == kinds, (stream, headers)
        wait_for(lambda: len(request_lines(records)) == 2)
        repaired = counters(proxy, "toolcall_proxy_requests_repaired")
        deltas = counters(proxy, "toolcall_proxy_deltas_repaired")
    if bridged:
        assert all(path.endswith("/chat/completions") for path in log.paths)
    for line in request_lines(records):
        assert line["request_repairs"] == kinds.split(",")
        assert line["repairs"] >= len(line["request_repairs"])
    # Both requests, once each under each of their kinds; every other kind at 0.
    for kind in kinds.split(","):
        assert repaired.pop((kind, surface)) == 2
    assert set(repaired.values()) == {0}
    assert not {kind for kind, _ in deltas} & {"missing_result", "orphan_result"}


def test_a_request_that_needed_no_repair_says_nothing(proxy: ServerThread) -> None:
    with proxy_records() as records:
        for stream in (False, True):
            assert HEADER not in post(proxy, "/v1/chat/completions", chat(stream, CLEAN_CHAT))
        wait_for(lambda: len(request_lines(records)) == 2)
    assert all("request_repairs" not in line for line in request_lines(records))


@pytest.mark.parametrize("bridged", [False, True], ids=["own-api", "bridge"])
def test_an_upstream_error_to_a_repaired_request_names_the_repairs(
    make_proxy: ProxyFactory, bridged: bool
) -> None:
    """The upstream's refusal of a repaired request (relayed, or in the client's shape over a
    bridge) still says what the proxy changed in it."""
    route = {"upstream_api": "chat_completions"} if bridged else {}
    body = messages(False) | {"model": "fault-429"}
    with make_proxy(**route) as proxy:
        response = httpx.post(proxy.url + "/v1/messages", json=body, timeout=30)
    assert response.status_code == 429
    assert response.headers.get(HEADER) == "missing_result,orphan_result"
