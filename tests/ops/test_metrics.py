"""/metrics: Prometheus text with every metric SPEC §7 names, moved by real traffic.

The proxy runs in process in front of the simulated provider; a small agent loop drives the
quirky profiles that make the proxy rewrite ids, repair deltas, answer a replay and trip the
breaker. The text is parsed with prometheus_client's own parser, so a malformed exposition
fails here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from proxy.app import ProxyApp
from proxy.config import Route, Settings
from proxy.observability import Metrics
from proxy.simulator import create_simulator_app

SECRET = "sk-metrics-test-secret-0123456789"
PROXY_KEY = "pk-metrics-test-key-9876543210"
USER = [{"role": "user", "content": "run the build"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "run_shell_command",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
        },
    }
]

# name -> (type, label names) of every family SPEC §7 requires.
REQUIRED: dict[str, tuple[str, set[str]]] = {
    "toolcall_proxy_requests": ("counter", {"route", "status", "stream"}),
    "toolcall_proxy_ids_rewritten": ("counter", {"reason"}),
    "toolcall_proxy_deltas_repaired": ("counter", {"kind"}),
    "toolcall_proxy_replays_answered": ("counter", set()),
    "toolcall_proxy_breaker_trips": ("counter", set()),
    "toolcall_proxy_upstream_errors": ("counter", {"kind"}),
    "toolcall_proxy_active_streams": ("gauge", set()),
    "toolcall_proxy_upstream_ttfb_seconds": ("histogram", set()),
    "toolcall_proxy_request_duration_seconds": ("histogram", set()),
}


@pytest.fixture
async def proxy() -> AsyncIterator[tuple[httpx.AsyncClient, ProxyApp]]:
    upstream = httpx.AsyncClient(transport=httpx.ASGITransport(app=create_simulator_app()))
    settings = Settings(
        routes=(Route(name="sim", upstream="http://sim/v1", upstream_key_env=None),),
        proxy_keys=(PROXY_KEY,),
    )
    app = ProxyApp(settings, client=upstream, metrics=Metrics())
    headers = {"authorization": f"Bearer {PROXY_KEY}", "x-upstream-secret": SECRET}
    client = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://proxy", headers=headers
    )
    yield client, app
    await client.aclose()
    await upstream.aclose()


async def _agent(client: httpx.AsyncClient, model: str, steps: int = 5) -> int:
    """A non-streaming tool loop; returns the last HTTP status."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "run the build"}]
    status = 0
    for _ in range(steps):
        reply = await client.post(
            "/v1/chat/completions", json={"model": model, "messages": messages, "tools": TOOLS}
        )
        status = reply.status_code
        if status != 200:
            return status
        message = reply.json()["choices"][0]["message"]
        messages.append(message)
        if not message.get("tool_calls"):
            return status
        for call in message["tool_calls"]:
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": "done"})
    return status


def _families(text: str) -> dict[str, Any]:
    return {family.name: family for family in text_string_to_metric_families(text)}


def _value(families: dict[str, Any], name: str, sample: str, **labels: str) -> float:
    total = 0.0
    for s in families[name].samples:
        if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items()):
            total += s.value
    return total


async def test_metrics_expose_every_required_family_with_its_labels(
    proxy: tuple[httpx.AsyncClient, ProxyApp],
) -> None:
    client, _ = proxy
    assert await _agent(client, "kimi") == 200  # ids rewritten
    assert await _agent(client, "missing-id") == 200  # object arguments, missing ids
    assert await _agent(client, "replay-once") == 200  # a replay answered
    assert await _agent(client, "replay-loop") == 422  # the breaker trips
    assert await _agent(client, "fault-500") == 500  # relayed; an upstream error
    stream = await client.post(
        "/v1/chat/completions",
        json={"model": "repeat-fields", "stream": True, "tools": TOOLS, "messages": USER},
    )
    assert stream.status_code == 200 and stream.text.rstrip().endswith("[DONE]")

    reply = await client.get("/metrics")
    assert reply.status_code == 200
    assert reply.headers["content-type"].startswith("text/plain; version=0.0.4")
    families = _families(reply.text)
    for name, (kind, labels) in REQUIRED.items():
        assert name in families, f"{name} missing from /metrics"
        assert families[name].type == kind, name
        for sample in families[name].samples:
            assert set(sample.labels) - {"le"} == labels, (name, sample.labels)

    requests = families["toolcall_proxy_requests"]
    assert _value(families, requests.name, "toolcall_proxy_requests_total", route="sim") >= 10
    assert (
        _value(
            families,
            requests.name,
            "toolcall_proxy_requests_total",
            status="200",
            stream="true",
        )
        == 1
    )
    assert _value(families, "toolcall_proxy_ids_rewritten", "toolcall_proxy_ids_rewritten_total")
    assert _value(
        families, "toolcall_proxy_deltas_repaired", "toolcall_proxy_deltas_repaired_total"
    )
    assert (
        _value(families, "toolcall_proxy_replays_answered", "toolcall_proxy_replays_answered_total")
        >= 1
    )
    assert (
        _value(families, "toolcall_proxy_breaker_trips", "toolcall_proxy_breaker_trips_total") == 1
    )
    assert (
        _value(
            families,
            "toolcall_proxy_upstream_errors",
            "toolcall_proxy_upstream_errors_total",
            kind="status_500",
        )
        == 1
    )
    assert _value(families, "toolcall_proxy_active_streams", "toolcall_proxy_active_streams") == 0
    ttfb = families["toolcall_proxy_upstream_ttfb_seconds"]
    assert _value(families, ttfb.name, "toolcall_proxy_upstream_ttfb_seconds_count") >= 10
    duration = families["toolcall_proxy_request_duration_seconds"]
    count = _value(families, duration.name, "toolcall_proxy_request_duration_seconds_count")
    assert count == _value(families, requests.name, "toolcall_proxy_requests_total")


async def test_metrics_never_carry_credentials(proxy: tuple[httpx.AsyncClient, ProxyApp]) -> None:
    client, _ = proxy
    await _agent(client, "kimi")
    text = (await client.get("/metrics")).text
    assert SECRET not in text and PROXY_KEY not in text


async def test_each_app_has_its_own_registry() -> None:
    first, second = Metrics(), Metrics()
    first.requests.labels("a", "200", "false").inc()
    assert b'route="a"' in first.render()
    assert b'route="a"' not in second.render()
