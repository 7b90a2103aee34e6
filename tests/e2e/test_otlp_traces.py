"""Traces end to end (SPEC §12): `toolcall-proxy serve` with OTEL_EXPORTER_OTLP_ENDPOINT set
sends its spans over OTLP/HTTP to a receiver on loopback (a small HTTP server here that
accepts POST /v1/traces and decodes the protobuf with opentelemetry-proto), with the repairs
of a Kimi conversation on them and the client's trace continued."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import openai
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from tests.agent import run_agent
from tests.e2e.test_cli_serve import BIN, environment, process
from tests.servers import ServerThread, free_port, wait_for

CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{CLIENT_TRACE}-00f067aa0ba902b7-01"


class Receiver:
    """An OTLP/HTTP trace receiver: every span of every export, with its service name."""

    def __init__(self) -> None:
        self.spans: list[tuple[str, Span]] = []
        self.paths: list[str] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                receiver.paths.append(self.path)
                request = ExportTraceServiceRequest.FromString(body)
                for resource_spans in request.resource_spans:
                    service = _attributes(resource_spans.resource.attributes)["service.name"]
                    for scope_spans in resource_spans.scope_spans:
                        receiver.spans.extend((service, span) for span in scope_spans.spans)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    @contextmanager
    def running(self) -> Iterator[Receiver]:
        thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self.server.shutdown()
            self.server.server_close()


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return tuple(_value(item) for item in value.array_value.values)
    return getattr(value, kind) if kind else None


def _attributes(pairs: Any) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs}


def test_the_spans_reach_an_otlp_receiver(simulator: ServerThread) -> None:
    port = free_port()
    args = [
        str(BIN / "toolcall-proxy"),
        "serve",
        "--upstream",
        simulator.url + "/v1",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--log-level",
        "warning",
    ]
    with Receiver().running() as receiver:
        env = environment(
            OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url,
            OTEL_BSP_SCHEDULE_DELAY="100",
            OTEL_SERVICE_NAME="proxy-under-test",
        )
        with process(args, port, env):
            client = openai.OpenAI(
                base_url=f"http://127.0.0.1:{port}/v1",
                api_key="x",
                max_retries=0,
                default_headers={"traceparent": TRACEPARENT},
            )
            run = run_agent(client, "kimi-k2/replay-once", stream=True)
            assert run.final_text == "All 3 rounds done."

            def servers() -> list[Span]:
                return [s for _, s in receiver.spans if s.kind == Span.SPAN_KIND_SERVER]

            wait_for(lambda: len(servers()) >= run.steps, timeout=20)
        spans = [span for _, span in receiver.spans]
        assert set(receiver.paths) == {"/v1/traces"}
        assert {service for service, _ in receiver.spans} == {"proxy-under-test"}
        requests = servers()
        assert len(requests) == run.steps  # one per client request, none for the simulator's
        assert all(span.trace_id.hex() == CLIENT_TRACE for span in spans)
        rounds = [s for s in spans if s.kind == Span.SPAN_KIND_CLIENT]
        by_id = {span.span_id: span for span in requests}
        assert all(r.parent_span_id in by_id for r in rounds)
        assert len(rounds) == run.steps + 1  # the answered replay's follow-up round
        events = {event.name for span in requests for event in span.events}
        assert {"toolcall_proxy.id_rewritten", "toolcall_proxy.replay_answered"} <= events
        first = _attributes(requests[0].attributes)
        assert requests[0].name == "chat kimi-k2/replay-once"
        assert first["gen_ai.operation.name"] == "chat"
        assert first["gen_ai.provider.name"] == "moonshot"
        assert first["gen_ai.response.model"] == "kimi-k2/replay-once"
        assert first["gen_ai.response.finish_reasons"] == ("tool_calls",)
        assert first["gen_ai.response.time_to_first_chunk"] > 0
