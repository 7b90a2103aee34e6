"""/metrics: Prometheus text with every metric SPEC §7 names, moved by real traffic.

The proxy runs in process in front of the simulated provider (or a scripted upstream); a small
agent loop drives the quirky profiles that make the proxy rewrite ids, repair deltas, answer a
replay and trip the breaker, and every counter is then checked label by label against what the
scenario must have moved, exactly. The text is parsed with prometheus_client's own parser, so a
malformed exposition fails here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from proxy.config.load import Route, Settings
from proxy.core.note_labels import (
    DELTA_REPAIR_KINDS,
    DROP_REASONS,
    REPEAT_ACTIONS,
    REQUEST_REPAIR_KINDS,
    REWRITE_REASONS,
)
from proxy.core.surfaces import SURFACES
from proxy.ops.observability import UPSTREAM_ERROR_KINDS, Metrics
from proxy.server.app import ProxyApp
from proxy.simulator import SimulatorLog, create_simulator_app
from tests.reliability.upstreams import SequenceUpstream, answer, tool_calls

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
    "toolcall_proxy_requests": ("counter", {"route", "status", "stream", "surface"}),
    "toolcall_proxy_ids_rewritten": ("counter", {"reason", "surface"}),
    "toolcall_proxy_deltas_repaired": ("counter", {"kind", "surface"}),
    "toolcall_proxy_requests_repaired": ("counter", {"kind", "surface"}),
    "toolcall_proxy_replays_answered": ("counter", {"surface"}),
    "toolcall_proxy_breaker_trips": ("counter", {"surface"}),
    "toolcall_proxy_repeats": ("counter", {"action", "surface"}),
    "toolcall_proxy_upstream_errors": ("counter", {"kind"}),
    "toolcall_proxy_active_streams": ("gauge", set()),
    "toolcall_proxy_upstream_ttfb_seconds": ("histogram", set()),
    "toolcall_proxy_request_duration_seconds": ("histogram", set()),
}


@pytest.fixture
async def proxy() -> AsyncIterator[tuple[httpx.AsyncClient, ProxyApp]]:
    async with _proxy_over(create_simulator_app()) as pair:
        yield pair


@asynccontextmanager
async def _proxy_over(upstream_app: Any) -> AsyncIterator[tuple[httpx.AsyncClient, ProxyApp]]:
    upstream = httpx.AsyncClient(transport=httpx.ASGITransport(app=upstream_app))
    settings = Settings(
        routes=(Route(name="sim", upstream="http://sim/v1", upstream_key_env=None),),
        proxy_keys=(PROXY_KEY,),
    )
    app = ProxyApp(settings, client=upstream, metrics=Metrics())
    headers = {"authorization": f"Bearer {PROXY_KEY}", "x-upstream-secret": SECRET}
    client = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://proxy", headers=headers
    )
    try:
        yield client, app
    finally:
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


def _counters(text: str, surface: str = "chat_completions") -> Counter[str]:
    """Every non-zero counter sample, keyed `name{label=value,...}` without the common prefix
    and `_total` suffix: what a scenario moved, label by label. The `surface` label is left
    out where it is the expected one (any other value stays in the key, and fails a match)."""
    found: Counter[str] = Counter()
    for family in text_string_to_metric_families(text):
        if family.type != "counter":
            continue
        for sample in family.samples:
            if not sample.name.endswith("_total") or not sample.value:
                continue
            name = sample.name.removeprefix("toolcall_proxy_").removesuffix("_total")
            shown = {k: v for k, v in sample.labels.items() if (k, v) != ("surface", surface)}
            labels = ",".join(f"{k}={v}" for k, v in sorted(shown.items()))
            found[f"{name}{{{labels}}}" if labels else name] = int(sample.value)
    return found


OK = "requests{route=sim,status=200,stream=false}"
# What one non-streaming agent loop (_agent) against each simulated profile moves, exactly.
# Each profile runs 3 tool rounds and a final answer (4 requests) unless it faults or loops.
AGENT_COUNTERS: dict[str, dict[str, int]] = {
    # call_0 every round: counter-shaped.
    "call-index": {OK: 4, "ids_rewritten{reason=counter_shaped}": 3},
    # functions.run_shell_command:0 is not even a valid client id. A Kimi model is Moonshot's
    # family (SPEC §11): its tool-call turns go back with reasoning_content.
    "kimi": {
        OK: 4,
        "ids_rewritten{reason=invalid}": 3,
        "requests_repaired{kind=reasoning_passback}": 3,
    },
    # No id and arguments as an object, every round.
    "missing-id": {
        OK: 4,
        "ids_rewritten{reason=absent}": 3,
        "deltas_repaired{kind=object_arguments}": 3,
    },
    # Two identical calls under one id per round: the second is dropped, and counted as a
    # rewritten id too (the client never sees the upstream's duplicate).
    "dup-in-response": {
        OK: 4,
        "ids_rewritten{reason=counter_shaped}": 3,
        "ids_rewritten{reason=duplicate_in_response}": 3,
        "calls_dropped{reason=duplicate_in_response}": 3,
    },
    # Round 2 replays round 1: dropped (its claimed tool_calls finish made truthful), answered
    # once, and the follow-up's fresh call reaches the client.
    "replay-once": {
        OK: 4,
        "ids_rewritten{reason=counter_shaped}": 3,
        "calls_dropped{reason=replay}": 1,
        "deltas_repaired{kind=finish_reason}": 1,
        "replays_answered": 1,
    },
    # Request 2 replays round 1 (answered once), the follow-up replays the answered copy:
    # the breaker trips and the client gets a 422.
    "replay-loop": {
        OK: 1,
        "requests{route=sim,status=422,stream=false}": 1,
        "ids_rewritten{reason=counter_shaped}": 1,
        "calls_dropped{reason=replay}": 1,
        "deltas_repaired{kind=finish_reason}": 1,
        "replays_answered": 1,
        "breaker_trips": 1,
    },
    # Upstream errors relayed as they came, each counted under its status.
    "fault-429": {
        "requests{route=sim,status=429,stream=false}": 1,
        "upstream_errors{kind=status_429}": 1,
    },
    "fault-500": {
        "requests{route=sim,status=500,stream=false}": 1,
        "upstream_errors{kind=status_500}": 1,
    },
}
AGENT_STATUS = {"replay-loop": 422, "fault-429": 429, "fault-500": 500}
# One streamed request to repeat-fields: call_0 (counter-shaped), and each of its 4 argument
# deltas repeats the call's id and name (2 repairs each).
STREAM_COUNTERS = {
    "requests{route=sim,status=200,stream=true}": 1,
    "ids_rewritten{reason=counter_shaped}": 1,
    "deltas_repaired{kind=repeated_fields}": 8,
}


@pytest.mark.parametrize("model", list(AGENT_COUNTERS))
async def test_counters_after_an_agent_loop_are_exact_per_label(
    proxy: tuple[httpx.AsyncClient, ProxyApp], model: str
) -> None:
    client, _ = proxy
    assert await _agent(client, model) == AGENT_STATUS.get(model, 200)
    text = (await client.get("/metrics")).text
    assert _counters(text) == Counter(AGENT_COUNTERS[model])


async def test_counters_after_a_stream_are_exact_per_label(
    proxy: tuple[httpx.AsyncClient, ProxyApp],
) -> None:
    client, _ = proxy
    stream = await client.post(
        "/v1/chat/completions",
        json={"model": "repeat-fields", "stream": True, "tools": TOOLS, "messages": USER},
    )
    assert stream.status_code == 200 and stream.text.rstrip().endswith("[DONE]")
    assert _counters((await client.get("/metrics")).text) == Counter(STREAM_COUNTERS)


TWO_CALLS = (
    ("call_Q7vR2kLm9XpT4sWzA1bC3dE5", '{"command":"make"}'),
    ("call_Zy9Xw8Vu7Ts6Rq5Po4Nm3Lk2", '{"command":"make test"}'),
)
TWO_ANSWERED: list[dict[str, Any]] = [
    {"role": "user", "content": "build and test"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": tool_calls(*((i, "run_shell_command", a) for i, a in TWO_CALLS)),
    },
    *({"role": "tool", "tool_call_id": i, "content": "ok"} for i, _ in TWO_CALLS),
]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_replays_are_counted_one_by_one_not_per_round(stream: bool) -> None:
    """One follow-up round that answers two replays counts two answered replays."""
    # Round 1 replays both answered calls; round 2 answers in text.
    replays = [(i, "run_shell_command", a) for i, a in TWO_CALLS]
    rounds = (answer(*replays, stream=stream), answer(content="Done.", stream=stream))
    upstream = SequenceUpstream(rounds=rounds)
    async with _proxy_over(upstream) as (client, _):
        body = {"model": "m", "stream": stream, "tools": TOOLS, "messages": TWO_ANSWERED}
        reply = await client.post("/v1/chat/completions", json=body)
        assert reply.status_code == 200 and "Done." in reply.text
        counters = _counters((await client.get("/metrics")).text)
    first, followup = upstream.chat_requests()  # exactly one follow-up round
    answers = followup["messages"][len(first["messages"]) + 1 :]
    assert len(answers) == 2
    assert all(m["content"].startswith("Duplicate tool call id") for m in answers)
    assert counters == Counter(
        {
            f"requests{{route=sim,status=200,stream={str(stream).lower()}}}": 1,
            "calls_dropped{reason=replay}": 2,
            "deltas_repaired{kind=finish_reason}": 1,
            "replays_answered": 2,
        }
    )


async def test_metrics_expose_every_required_family_with_its_labels() -> None:
    sim_log = SimulatorLog()
    async with _proxy_over(create_simulator_app(sim_log)) as (client, _):
        models = ["kimi", "missing-id", "replay-once", "replay-loop", "fault-500"]
        for model in models:
            assert await _agent(client, model) == AGENT_STATUS.get(model, 200)
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

    # The scenarios' counters add up, label by label, with nothing else moved.
    expected: Counter[str] = Counter(STREAM_COUNTERS)
    for model in models:
        expected.update(AGENT_COUNTERS[model])
    assert _counters(reply.text) == expected
    assert _value(families, "toolcall_proxy_active_streams", "toolcall_proxy_active_streams") == 0
    # One time-to-first-byte per upstream request (follow-up rounds included), one duration
    # per client request.
    ttfb = families["toolcall_proxy_upstream_ttfb_seconds"]
    assert _value(families, ttfb.name, "toolcall_proxy_upstream_ttfb_seconds_count") == len(
        sim_log.requests
    )
    assert len(sim_log.requests) == 4 + 4 + 5 + 3 + 1 + 1
    duration = families["toolcall_proxy_request_duration_seconds"]
    count = _value(families, duration.name, "toolcall_proxy_request_duration_seconds_count")
    assert count == sum(expected[k] for k in expected if k.startswith("requests{")) == 16


# Labelled counters a dashboard panel reads, each at 0 on a proxy that has served nothing yet:
# without these series the panels show "No data" instead of 0 on a healthy proxy.
SOME_ZERO_SERIES = (
    ("toolcall_proxy_breaker_trips_total", {"surface": "chat_completions"}),
    ("toolcall_proxy_breaker_trips_total", {"surface": "anthropic_messages"}),
    ("toolcall_proxy_replays_answered_total", {"surface": "responses"}),
    ("toolcall_proxy_calls_dropped_total", {"reason": "replay", "surface": "chat_completions"}),
    ("toolcall_proxy_ids_rewritten_total", {"reason": "absent", "surface": "responses"}),
    (
        "toolcall_proxy_deltas_repaired_total",
        {"kind": "finish_reason", "surface": "chat_completions"},
    ),
    ("toolcall_proxy_deltas_repaired_total", {"kind": "stop_reason", "surface": "responses"}),
    (
        "toolcall_proxy_requests_repaired_total",
        {"kind": "missing_result", "surface": "anthropic_messages"},
    ),
    ("toolcall_proxy_upstream_errors_total", {"kind": "upstream_stream_error"}),
    ("toolcall_proxy_upstream_errors_total", {"kind": "status_429"}),
)


def _labelled_series(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every `_total` sample of a labelled counter but the requests' (whose routes and statuses
    are not known before traffic), by name and sorted labels."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        if family.type == "counter" and family.name != "toolcall_proxy_requests"
        for sample in family.samples
        if sample.name.endswith("_total") and sample.labels
    }


def _known_series() -> set[tuple[str, tuple[tuple[str, str], ...]]]:
    """Each labelled counter with each value its label is known to take (proxy.core.note_labels,
    proxy.ops.observability), for each surface the core repairs."""
    surfaces = [s.label for s in SURFACES if s.repaired]
    by_surface = {
        "toolcall_proxy_ids_rewritten_total": ("reason", REWRITE_REASONS),
        "toolcall_proxy_calls_dropped_total": ("reason", DROP_REASONS),
        "toolcall_proxy_deltas_repaired_total": ("kind", DELTA_REPAIR_KINDS),
        "toolcall_proxy_requests_repaired_total": ("kind", REQUEST_REPAIR_KINDS),
        "toolcall_proxy_repeats_total": ("action", REPEAT_ACTIONS),
    }
    known = {
        (name, tuple(sorted({label: value, "surface": surface}.items())))
        for name, (label, values) in by_surface.items()
        for value in values
        for surface in surfaces
    }
    known |= {
        (name, (("surface", surface),))
        for name in ("toolcall_proxy_replays_answered_total", "toolcall_proxy_breaker_trips_total")
        for surface in surfaces
    }
    return known | {
        ("toolcall_proxy_upstream_errors_total", (("kind", kind),)) for kind in UPSTREAM_ERROR_KINDS
    }


async def test_a_fresh_proxy_exports_every_labelled_counter_at_zero(
    proxy: tuple[httpx.AsyncClient, ProxyApp],
) -> None:
    client, _ = proxy
    series = _labelled_series((await client.get("/metrics")).text)
    for name, labels in SOME_ZERO_SERIES:
        assert series.get((name, tuple(sorted(labels.items())))) == 0, (name, labels)
    # Each known label value, for each repaired surface, and nothing else.
    assert set(series) == _known_series()
    assert set(series.values()) == {0}


async def test_counters_exported_at_zero_move_from_zero(
    proxy: tuple[httpx.AsyncClient, ProxyApp],
) -> None:
    """The series exported at start-up are the ones traffic moves: a replay loop's counters
    go from 0 to their counts in the same series, and the others stay at 0."""
    client, _ = proxy
    assert await _agent(client, "replay-loop") == 422
    series = _labelled_series((await client.get("/metrics")).text)
    assert set(series) == _known_series()
    moved = {key: value for key, value in series.items() if value}
    chat = ("surface", "chat_completions")
    assert moved == {
        ("toolcall_proxy_ids_rewritten_total", (("reason", "counter_shaped"), chat)): 1,
        ("toolcall_proxy_calls_dropped_total", (("reason", "replay"), chat)): 1,
        ("toolcall_proxy_deltas_repaired_total", (("kind", "finish_reason"), chat)): 1,
        ("toolcall_proxy_replays_answered_total", (chat,)): 1,
        ("toolcall_proxy_breaker_trips_total", (chat,)): 1,
    }


async def test_metrics_never_carry_credentials(proxy: tuple[httpx.AsyncClient, ProxyApp]) -> None:
    client, _ = proxy
    await _agent(client, "kimi")
    text = (await client.get("/metrics")).text
    assert SECRET not in text and PROXY_KEY not in text


async def test_each_app_has_its_own_registry() -> None:
    first, second = Metrics(), Metrics()
    first.requests.labels("a", "200", "false", "chat_completions").inc()
    assert b'route="a"' in first.render()
    assert b'route="a"' not in second.render()


async def test_requests_carry_the_api_surface_they_used(
    proxy: tuple[httpx.AsyncClient, ProxyApp],
) -> None:
    """The `surface` label tells a repaired surface's traffic from passed-through paths."""
    client, _ = proxy
    chat = await client.post(
        "/v1/chat/completions", json={"model": "call-index", "tools": TOOLS, "messages": USER}
    )
    listing = await client.get("/v1/models")
    assert chat.status_code == 200 and listing.status_code == 200
    counters = _counters((await client.get("/metrics")).text, surface="")
    assert counters["requests{route=sim,status=200,stream=false,surface=chat_completions}"] == 1
    assert counters["requests{route=sim,status=200,stream=false,surface=other}"] == 1
    assert counters["ids_rewritten{reason=counter_shaped,surface=chat_completions}"] == 1


async def test_each_upstream_round_observes_its_own_time_to_first_byte() -> None:
    """A follow-up round's time to its response head is its own, not the first round's again:
    here the provider takes half a second to answer the follow-up and none for the first."""
    replays = [(i, "run_shell_command", a) for i, a in TWO_CALLS]
    slow = replace(answer(content="Done.", stream=False), head_delay=0.5)
    upstream = SequenceUpstream(rounds=(answer(*replays, stream=False), slow))
    async with _proxy_over(upstream) as (client, _):
        body = {"model": "m", "tools": TOOLS, "messages": TWO_ANSWERED}
        reply = await client.post("/v1/chat/completions", json=body)
        assert reply.status_code == 200 and "Done." in reply.text
        families = _families((await client.get("/metrics")).text)
    name = "toolcall_proxy_upstream_ttfb_seconds"
    assert _value(families, name, name + "_count") == 2  # one per upstream request
    # The slow round is in the histogram (observing the first round twice would need it to
    # take a quarter of a second to reach this sum)
    assert _value(families, name, name + "_sum") >= 0.5


async def test_responses_traffic_is_labelled_with_its_surface(
    proxy: tuple[httpx.AsyncClient, ProxyApp],
) -> None:
    """A Responses request whose Kimi-style `call_id` is rewritten, streamed and not."""
    client, _ = proxy
    tools = [{"type": "function", "name": "run_shell_command", "parameters": {"type": "object"}}]
    for stream in (False, True):
        body = {"model": "kimi", "input": "go", "tools": tools, "stream": stream}
        answer_ = await client.post("/v1/responses", json=body)
        assert answer_.status_code == 200 and "call_" in answer_.text
    counters = _counters((await client.get("/metrics")).text, surface="responses")
    assert counters["requests{route=sim,status=200,stream=false}"] == 1
    assert counters["requests{route=sim,status=200,stream=true}"] == 1
    assert counters["ids_rewritten{reason=invalid}"] == 2
