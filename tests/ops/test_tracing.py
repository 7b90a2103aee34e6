"""Traces (SPEC §12): one span per request of a repaired surface in the GenAI conventions, the
proxy's decisions as its events, a child span per upstream round whose `traceparent` the
upstream receives, and nothing of OpenTelemetry when traces are off. The spans are read from
the SDK's in-memory exporter; tests/e2e/test_otlp_traces.py sends them to an OTLP receiver."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import orjson
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from proxy.config.load import Route, Settings
from proxy.ops.otel import OtelTracer
from proxy.ops.trace_facts import BodyWatch, response_facts
from proxy.ops.tracing import tracing_asked
from proxy.server.app import ProxyApp, create_app
from proxy.simulator import SimulatorLog, create_simulator_app
from tests.agent import run_agent
from tests.servers import ServerThread, serving, wait_for

CLIENT_TRACE = "0af7651916cd43dd8448eb211c80319c"
CLIENT_SPAN = "b7ad6b7169203331"
TRACEPARENT = f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"


class HeaderRecorder:
    """The simulator, recording the headers of every request it receives."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.headers: list[dict[bytes, bytes]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"].endswith(("/completions", "/messages")):
            self.headers.append(dict(scope["headers"]))
        await self.app(scope, receive, send)


@pytest.fixture(scope="module")
def upstream() -> Iterator[tuple[ServerThread, HeaderRecorder]]:
    recorder = HeaderRecorder(create_simulator_app(SimulatorLog()))
    with serving(recorder) as server:
        yield server, recorder


@pytest.fixture()
def traced(
    upstream: tuple[ServerThread, HeaderRecorder],
) -> Iterator[tuple[ServerThread, InMemorySpanExporter, HeaderRecorder]]:
    server, recorder = upstream
    recorder.headers.clear()
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    app = create_app(Settings(routes=(Route(name="sim", upstream=server.url + "/v1"),)))
    assert isinstance(app, ProxyApp) and app.tracer is None  # no variable set in tests
    app.tracer = app.exchanges.report.tracer = OtelTracer(provider)
    with serving(app) as proxy:
        yield proxy, exporter, recorder


def _requests(exporter: InMemorySpanExporter, count: int) -> list[ReadableSpan]:
    """The request spans, once `count` have ended (they end after the response's last byte)."""
    wait_for(lambda: len(_servers(exporter)) >= count)
    return _servers(exporter)


def _servers(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.kind is SpanKind.SERVER]


def _rounds(exporter: InMemorySpanExporter, parent: ReadableSpan) -> list[ReadableSpan]:
    assert parent.context is not None
    return [
        s
        for s in exporter.get_finished_spans()
        if s.parent is not None and s.parent.span_id == parent.context.span_id
    ]


def _events(span: ReadableSpan) -> list[str]:
    return [event.name for event in span.events]


# -- on and off -----------------------------------------------------------------------------------


def test_the_standard_variables_ask_for_traces() -> None:
    endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}
    assert not tracing_asked({})
    assert tracing_asked(endpoint)
    assert tracing_asked({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"})
    assert not tracing_asked({**endpoint, "OTEL_SDK_DISABLED": "true"})
    assert not tracing_asked({**endpoint, "OTEL_TRACES_EXPORTER": "none"})


def _python(code: str, **env: str) -> str:
    base = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**base, **env},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return done.stdout + done.stderr


def test_off_nothing_of_opentelemetry_is_imported() -> None:
    out = _python(
        "import sys\n"
        "from proxy.config.load import Route, Settings\n"
        "from proxy.server.app import create_app\n"
        "app = create_app(Settings(routes=(Route(name='a', upstream='http://127.0.0.1:9/v1'),)))\n"
        "print('tracer', app.tracer, app.exchanges.report.tracer)\n"
        "print('imported', sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    assert "tracer None None" in out and "imported []" in out


def test_without_the_extra_the_proxy_runs_and_says_why_traces_are_off() -> None:
    out = _python(
        "import sys\n"
        "sys.modules['opentelemetry'] = None  # the extra not installed\n"
        "from proxy.config.load import Route, Settings\n"
        "from proxy.ops.observability import configure_logging\n"
        "from proxy.server.app import create_app\n"
        "configure_logging('info')\n"
        "app = create_app(Settings(routes=(Route(name='a', upstream='http://127.0.0.1:9/v1'),)))\n"
        "print('tracer', app.tracer)\n",
        OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9",
    )
    assert "tracer None" in out and "the otel extra is not installed" in out


def test_on_the_environment_builds_an_otlp_tracer() -> None:
    out = _python(
        "from proxy.config.load import Route, Settings\n"
        "from proxy.server.app import create_app\n"
        "app = create_app(Settings(routes=(Route(name='a', upstream='http://127.0.0.1:9/v1'),)))\n"
        "print('tracer', type(app.tracer).__name__, app.exchanges.report.tracer is app.tracer)\n"
        "print('service', app.tracer.provider.resource.attributes['service.name'])\n"
        "app.tracer.shutdown()\n",
        OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9",
    )
    assert "tracer OtelTracer True" in out and "service toolcall-proxy" in out


# -- spans ----------------------------------------------------------------------------------------


def test_a_stream_is_one_span_in_the_genai_conventions(
    traced: tuple[ServerThread, InMemorySpanExporter, HeaderRecorder],
) -> None:
    proxy, exporter, recorder = traced
    body = {
        "model": "kimi-k2/fast",
        "stream": True,
        "stream_options": {"include_usage": True},
        "messages": [{"role": "user", "content": "hi"}],
    }
    answer = httpx.post(proxy.url + "/v1/chat/completions", json=body, timeout=30)
    assert answer.status_code == 200
    (span,) = _requests(exporter, 1)
    attributes = dict(span.attributes or {})
    assert span.name == "chat kimi-k2/fast" and span.kind is SpanKind.SERVER
    assert span.parent is None  # the client sent no traceparent: a new trace
    assert attributes["gen_ai.operation.name"] == "chat"
    assert attributes["gen_ai.provider.name"] == "moonshot"
    assert attributes["gen_ai.request.model"] == "kimi-k2/fast"
    assert attributes["gen_ai.request.stream"] is True
    assert attributes["gen_ai.response.model"] == "kimi-k2/fast"
    assert attributes["gen_ai.response.finish_reasons"] == ("stop",)
    usage = orjson.loads([line for line in answer.text.splitlines() if '"usage"' in line][-1][6:])[
        "usage"
    ]
    assert attributes["gen_ai.usage.input_tokens"] == usage["prompt_tokens"]
    assert attributes["gen_ai.usage.output_tokens"] == usage["completion_tokens"]
    assert str(attributes["gen_ai.response.id"]).startswith("chatcmpl")
    ttfc = attributes["gen_ai.response.time_to_first_chunk"]
    assert isinstance(ttfc, float) and 0 < ttfc < (span.end_time - span.start_time) / 1e9
    assert attributes["http.response.status_code"] == 200
    assert attributes["toolcall_proxy.surface"] == "chat_completions"
    assert attributes["toolcall_proxy.rounds"] == 1
    assert span.status.status_code is StatusCode.UNSET
    (round_,) = _rounds(exporter, span)
    assert round_.kind is SpanKind.CLIENT and round_.name == span.name
    round_attributes = dict(round_.attributes or {})
    assert round_attributes["server.address"] == "127.0.0.1"
    assert round_attributes["http.response.status_code"] == 200
    assert round_attributes["toolcall_proxy.round"] == 1
    # W3C trace context: the upstream got the round's span as its parent.
    (headers,) = recorder.headers
    assert round_.context is not None
    version, trace_id, parent_id, flags = headers[b"traceparent"].decode().split("-")
    assert (version, trace_id) == ("00", f"{round_.context.trace_id:032x}")
    assert parent_id == f"{round_.context.span_id:016x}" and int(flags, 16) & 1  # sampled


def test_the_clients_traceparent_is_continued_upstream(
    traced: tuple[ServerThread, InMemorySpanExporter, HeaderRecorder],
) -> None:
    proxy, exporter, recorder = traced
    body = {"model": "fast", "messages": [{"role": "user", "content": "hi"}]}
    headers = {"traceparent": TRACEPARENT, "tracestate": "vendor=1"}
    answer = httpx.post(proxy.url + "/v1/chat/completions", json=body, headers=headers)
    assert answer.status_code == 200
    (span,) = _requests(exporter, 1)
    assert span.parent is not None and span.parent.is_remote
    assert f"{span.parent.trace_id:032x}" == CLIENT_TRACE
    assert f"{span.parent.span_id:016x}" == CLIENT_SPAN
    (round_,) = _rounds(exporter, span)
    sent = recorder.headers[0]
    assert round_.context is not None and span.context is not None
    trace_id, parent_id = sent[b"traceparent"].decode().split("-")[1:3]
    assert trace_id == CLIENT_TRACE and parent_id == f"{round_.context.span_id:016x}"
    assert sent[b"tracestate"] == b"vendor=1"
    assert list(sent).count(b"traceparent") == 1
    attributes = dict(span.attributes or {})
    assert attributes["gen_ai.response.finish_reasons"] == ("stop",)
    assert "gen_ai.response.time_to_first_chunk" not in attributes  # not a stream


@pytest.mark.parametrize("stream", [True, False])
def test_the_proxys_decisions_are_events_and_follow_ups_child_spans(
    traced: tuple[ServerThread, InMemorySpanExporter, HeaderRecorder], stream: bool
) -> None:
    """A Kimi-style conversation whose model replays a call: the ids the proxy rewrote and
    the replay it answered are the request's events; the follow-up is a second round."""
    proxy, exporter, recorder = traced
    client = openai.OpenAI(
        base_url=proxy.url + "/v1",
        api_key="sk-test",
        max_retries=0,
        default_headers={"traceparent": TRACEPARENT},
    )
    run = run_agent(client, "kimi-k2/replay-once", stream=stream)
    assert run.final_text == "All 3 rounds done."
    spans = _requests(exporter, run.steps)
    events = [name for span in spans for name in _events(span)]
    assert "toolcall_proxy.replay_answered" in events
    with_followup = [s for s in spans if "toolcall_proxy.replay_answered" in _events(s)]
    (span,) = with_followup
    rounds = _rounds(exporter, span)
    assert [dict(r.attributes or {})["toolcall_proxy.round"] for r in rounds] == [1, 2]
    assert dict(span.attributes or {})["toolcall_proxy.rounds"] == 2
    assert dict(span.attributes or {})["toolcall_proxy.replays_answered"] == 1
    replay = next(e for e in span.events if e.name == "toolcall_proxy.replay_answered")
    assert dict(replay.attributes or {})["toolcall_proxy.tool"] == "run_shell_command"
    # every round's traceparent reached the upstream, each naming its own span
    parents = {h[b"traceparent"].decode().split("-")[2] for h in recorder.headers}
    every_round = {
        f"{r.context.span_id:016x}" for s in spans for r in _rounds(exporter, s) if r.context
    }
    assert parents == every_round and len(every_round) == run.steps + 1
    assert all(f"{s.context.trace_id:032x}" == CLIENT_TRACE for s in spans if s.context)


def test_ids_rewritten_are_events(
    traced: tuple[ServerThread, InMemorySpanExporter, HeaderRecorder],
) -> None:
    proxy, exporter, _ = traced
    body = {
        "model": "kimi-k2/kimi",
        "stream": True,
        "messages": [{"role": "user", "content": "Run the build steps."}],
        "tools": [{"type": "function", "function": {"name": "run_shell_command"}}],
    }
    assert httpx.post(proxy.url + "/v1/chat/completions", json=body).status_code == 200
    (span,) = _requests(exporter, 1)
    rewritten = [e for e in span.events if e.name == "toolcall_proxy.id_rewritten"]
    assert rewritten, _events(span)
    attributes = dict(rewritten[0].attributes or {})
    assert str(attributes["toolcall_proxy.raw_id"]).startswith("functions.")
    assert attributes["toolcall_proxy.client_id"] != attributes["toolcall_proxy.raw_id"]
    assert dict(span.attributes or {})["gen_ai.response.finish_reasons"] == ("tool_calls",)


def test_a_loop_stopped_is_an_error_event(
    traced: tuple[ServerThread, InMemorySpanExporter, HeaderRecorder],
) -> None:
    proxy, exporter, _ = traced
    client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="sk-test", max_retries=0)
    with pytest.raises(openai.APIError):
        run_agent(client, "replay-loop", stream=True)
    spans = _requests(exporter, 1)
    wait_for(lambda: any("toolcall_proxy.loop_stopped" in _events(s) for s in _servers(exporter)))
    span = next(s for s in _servers(exporter) if "toolcall_proxy.loop_stopped" in _events(s))
    stopped = next(e for e in span.events if e.name == "toolcall_proxy.loop_stopped")
    assert dict(stopped.attributes or {})["toolcall_proxy.loop"] == "replay"
    assert dict(stopped.attributes or {})["error.type"] == "tool_call_replay_loop"
    assert spans


def test_an_upstream_error_marks_both_spans(
    traced: tuple[ServerThread, InMemorySpanExporter, HeaderRecorder],
) -> None:
    proxy, exporter, _ = traced
    body = {"model": "fault-500", "messages": [{"role": "user", "content": "hi"}]}
    answer = httpx.post(proxy.url + "/v1/chat/completions", json=body, timeout=30)
    assert answer.status_code >= 500
    (span,) = _requests(exporter, 1)
    assert span.status.status_code is StatusCode.ERROR
    assert dict(span.attributes or {})["error.type"]
    (round_,) = _rounds(exporter, span)
    assert round_.status.status_code is StatusCode.ERROR
    assert dict(round_.attributes or {})["http.response.status_code"] == answer.status_code


def test_an_anthropic_request_is_traced_too(
    traced: tuple[ServerThread, InMemorySpanExporter, HeaderRecorder],
) -> None:
    proxy, exporter, _ = traced
    body = {
        "model": "claude-sonnet-4/fast",
        "max_tokens": 64,
        "stream": True,
        "messages": [{"role": "user", "content": "hi"}],
    }
    assert httpx.post(proxy.url + "/v1/messages", json=body).status_code == 200
    (span,) = _requests(exporter, 1)
    attributes = dict(span.attributes or {})
    assert attributes["toolcall_proxy.surface"] == "anthropic_messages"
    assert attributes["gen_ai.provider.name"] == "anthropic"
    assert attributes["gen_ai.response.model"] == "claude-sonnet-4/fast"
    assert attributes["gen_ai.response.finish_reasons"] == ("end_turn",)
    assert isinstance(attributes["gen_ai.usage.output_tokens"], int)


# -- what the answer says of itself, per surface ---------------------------------------------------


def _watched(*bodies: bytes) -> BodyWatch:
    sent: list[Any] = []

    async def send(message: Any) -> None:
        sent.append(message)

    watch = BodyWatch(send)
    for body in bodies:
        asyncio.run(watch({"type": "http.response.body", "body": body, "more_body": True}))
    assert len(sent) == len(bodies)  # every message goes on, as it came
    return watch


def test_the_answers_facts_in_every_surfaces_shape() -> None:
    chat = response_facts(
        _watched(
            b'data: {"id":"c1","model":"m","choices":[{"index":0,"delta":{"role":"assistant"}}]}\n\n',
            b'data: {"id":"c1","model":"m","choices":[{"index":1,"finish_reason":"length"},'
            b'{"index":0,"finish_reason":"tool_calls"}]}\n\n',
            b'data: {"id":"c1","model":"m","choices":[],"usage":{"prompt_tokens":7,'
            b'"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":2}}}\n\ndata: [DONE]\n\n',
        ),
        stream=True,
    )
    assert (chat.model, chat.id, chat.finish_reasons) == ("m", "c1", ("tool_calls", "length"))
    assert (chat.input_tokens, chat.output_tokens, chat.cache_read) == (7, 3, 2)
    anthropic = response_facts(
        _watched(
            b'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_1",'
            b'"model":"claude","usage":{"input_tokens":5,"cache_read_input_tokens":4,'
            b'"output_tokens":1}}}\n\n',
            b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":'
            b'"tool_use"},"usage":{"output_tokens":9}}\n\n',
            b'event: message_stop\ndata: {"type":"message_stop"}\n\n',
        ),
        stream=True,
    )
    assert (anthropic.model, anthropic.id, anthropic.finish_reasons) == (
        "claude",
        "msg_1",
        ("tool_use",),
    )
    assert (anthropic.input_tokens, anthropic.output_tokens, anthropic.cache_read) == (9, 9, 4)
    responses = response_facts(
        _watched(
            b'event: response.created\ndata: {"type":"response.created","response":{"id":"resp_1",'
            b'"model":"gpt","status":"in_progress"}}\n\n',
            b'event: response.completed\ndata: {"type":"response.completed","response":{'
            b'"id":"resp_1","model":"gpt","status":"incomplete","incomplete_details":'
            b'{"reason":"max_output_tokens"},"usage":{"input_tokens":4,"output_tokens":6}}}\n\n',
        ),
        stream=True,
    )
    assert (responses.model, responses.finish_reasons) == ("gpt", ("max_output_tokens",))
    assert (responses.input_tokens, responses.output_tokens) == (4, 6)
    whole = response_facts(
        _watched(b'{"id":"msg_2","model":"claude","stop_reason":"end_turn","usage":{}}'),
        stream=False,
    )
    assert (whole.model, whole.finish_reasons) == ("claude", ("end_turn",))
    assert response_facts(_watched(b"not json"), stream=False).model is None


def test_the_start_up_output_says_where_traces_go(monkeypatch: pytest.MonkeyPatch) -> None:
    from proxy.ops.startup import startup_lines

    for name in [n for n in os.environ if n.startswith("OTEL_")]:
        monkeypatch.delenv(name)
    settings = Settings(routes=(Route(name="a", upstream="http://127.0.0.1:9/v1"),))
    assert not any("traces" in line for line in startup_lines(settings))
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "gateway")
    (line,) = [line for line in startup_lines(settings) if "traces" in line]
    assert "traces to http://collector:4318/v1/traces over OTLP/HTTP (service gateway" in line


def test_a_client_trace_not_sampled_is_continued_unrecorded(
    traced: tuple[ServerThread, InMemorySpanExporter, HeaderRecorder],
) -> None:
    """The default sampler follows the client's decision: its trace goes on upstream, not
    sampled, and nothing is recorded or exported."""
    proxy, exporter, recorder = traced
    body = {"model": "fast", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    headers = {"traceparent": TRACEPARENT[:-2] + "00"}
    assert httpx.post(proxy.url + "/v1/chat/completions", json=body, headers=headers).is_success
    wait_for(lambda: len(recorder.headers) == 1)
    _, trace_id, _, flags = recorder.headers[0][b"traceparent"].decode().split("-")
    assert trace_id == CLIENT_TRACE and int(flags, 16) & 1 == 0
    assert exporter.get_finished_spans() == ()
