"""The tracer (SPEC §12), in the OpenTelemetry GenAI conventions: imported only when traces
are on (`proxy.ops.tracing`), so the proxy runs without the `otel` extra.

Per client request of a repaired surface, one span `chat {model}`: the proxy serves the
client's request (kind SERVER, under the client's `traceparent`), with the GenAI attributes
of the answer (the provider family, the request's and the response's model, finish reasons,
usage, time to first chunk) and the proxy's decisions as events in the `toolcall_proxy.*`
namespace. Under it, one span per upstream round (kind CLIENT, as the conventions make a call
to a model: the first round and each follow-up the proxy sent), whose `traceparent` is what
the upstream receives. Nothing per streamed chunk.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, set_span_in_context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AttributeValue

from proxy import __version__
from proxy.config.load import Route
from proxy.core.errors import RepeatLoopDetected, ReplayLoopDetected
from proxy.core.families import resolve_family, route_profile
from proxy.core.guard import Replay
from proxy.core.note_labels import REQUEST_REPAIRS
from proxy.core.notes import CallDropped, DeltaRepaired, IdRewritten, Note, RepeatNoted
from proxy.ops.observability import LOGGER, RequestLog
from proxy.ops.trace_facts import BodyWatch, response_facts
from proxy.ops.tracing import Headers, Send

# The provider families whose name the GenAI conventions spell otherwise (gen_ai.provider.name's
# well-known values); the others are named as the proxy names their family.
PROVIDER_NAMES = {"gemini": "gcp.gemini", "mistral": "mistral_ai"}
# Events kept per request (a response may rewrite thousands of ids); the rest are counted.
MAX_EVENTS = 128
# The (route, model) pairs whose provider family is remembered.
FAMILY_MEMORY = 1024
NS = "toolcall_proxy"
_PROPAGATOR = TraceContextTextMapPropagator()
_TRACE_HEADERS = (b"traceparent", b"tracestate")
# The log line's counts, set on the request's span when it ends.
_COUNTS = ("ids_rewritten", "calls_dropped", "replays_answered", "repairs")


def otlp_tracer() -> OtelTracer:
    """The tracer `OTEL_EXPORTER_OTLP_*` asks for: spans batched and sent over OTLP/HTTP
    (the exporter reads the endpoint, headers, timeout and compression from the standard
    variables; the resource its service name and attributes, `toolcall-proxy` by default)."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    resource = Resource.create({"service.version": __version__})  # OTEL_SERVICE_NAME and
    name = resource.attributes.get("service.name")  # OTEL_RESOURCE_ATTRIBUTES are read here
    if not isinstance(name, str) or name.startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": "toolcall-proxy"}))
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return OtelTracer(provider)


class _Trace:
    """One request's spans: its own, the open round's, and what they end with."""

    __slots__ = (
        "attributes",
        "epoch",
        "events",
        "name",
        "round",
        "rounds",
        "span",
        "stream",
        "watch",
    )

    def __init__(
        self,
        name: str,
        span: Span,
        attributes: dict[str, AttributeValue],
        epoch: int,
        stream: bool,
    ) -> None:
        self.name = name
        self.span = span
        self.attributes = attributes  # what every round's span repeats
        self.epoch = epoch  # wall-clock ns at perf_counter() == 0
        self.stream = stream
        self.round: Span | None = None
        self.rounds = 0
        self.events = 0
        self.watch: BodyWatch | None = None

    def event(self, name: str, attributes: dict[str, AttributeValue]) -> None:
        self.events += 1
        if self.events <= MAX_EVENTS:
            self.span.add_event(f"{NS}.{name}", attributes)

    def end_round(self, error: str | None = None) -> None:
        if self.round is not None:
            if error is not None:
                self.round.set_attribute("error.type", error)
                self.round.set_status(Status(StatusCode.ERROR))
            self.round.end()
            self.round = None


class OtelTracer:
    """The shell's report points as spans (`proxy.ops.tracing.Tracer`)."""

    def __init__(self, provider: TracerProvider) -> None:
        self.provider = provider
        self._tracer = provider.get_tracer("toolcall_proxy", __version__)
        self._open: dict[int, _Trace] = {}
        self._servers: dict[int, tuple[Route, dict[str, AttributeValue]]] = {}
        self._families: dict[tuple[int, str | None], tuple[Route, str]] = {}

    # -- the report points ---------------------------------------------------------------------

    def opened(
        self,
        log: RequestLog,
        route: Route,
        surface: str,
        body: Mapping[str, Any],
        headers: Headers,
        send: Send,
    ) -> Send:
        model = body.get("model")
        model = model if isinstance(model, str) else None
        family = self._family(route, model)
        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": PROVIDER_NAMES.get(family, family),
        }
        if model:
            attributes["gen_ai.request.model"] = model
        stream = body.get("stream") is True
        epoch = time.time_ns() - time.perf_counter_ns()
        name = f"chat {model}" if model else "chat"
        span = self._tracer.start_span(
            name,
            context=_parent(headers),
            kind=SpanKind.SERVER,
            attributes={
                **attributes,
                "gen_ai.request.stream": stream,
                f"{NS}.family": family,
                f"{NS}.surface": surface,
                f"{NS}.route": route.name,
                f"{NS}.request_id": str(log.fields.get("request_id")),
            },
            start_time=epoch + int(log.started * 1e9),
        )
        trace = _Trace(name, span, {**attributes, **self._server(route)}, epoch, stream)
        self._open[id(log)] = trace
        trace.watch = watch = BodyWatch(send)
        return watch

    def round(self, log: RequestLog, headers: Headers) -> Headers:
        trace = self._open.get(id(log))
        if trace is None:
            return headers
        trace.end_round()
        trace.rounds += 1
        span = self._tracer.start_span(
            trace.name,
            context=set_span_in_context(trace.span),
            kind=SpanKind.CLIENT,
            attributes={**trace.attributes, f"{NS}.round": trace.rounds},
        )
        trace.round = span
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier, context=set_span_in_context(span))
        kept = [(name, value) for name, value in headers if name not in _TRACE_HEADERS]
        kept.extend((name.encode(), value.encode("latin-1")) for name, value in carrier.items())
        return kept

    def round_answered(self, log: RequestLog, status: int) -> None:
        trace = self._open.get(id(log))
        if trace is not None and trace.round is not None:
            trace.round.set_attribute("http.response.status_code", status)
            if status >= 400:
                trace.round.set_attribute("error.type", str(status))
                trace.round.set_status(Status(StatusCode.ERROR))

    def notes(self, log: RequestLog, notes: Iterable[Note]) -> None:
        trace = self._open.get(id(log))
        if trace is not None:
            for note in notes:
                trace.event(*_note_event(note))

    def answered(self, log: RequestLog, replays: Iterable[Replay]) -> None:
        trace = self._open.get(id(log))
        if trace is not None:
            for replay in replays:
                trace.event(
                    "repeat_answered" if replay.repeat else "replay_answered",
                    {
                        f"{NS}.tool": replay.name,
                        f"{NS}.raw_id": replay.raw_id,
                        f"{NS}.client_id": replay.client_id or "",
                        f"{NS}.matched": replay.form,
                    },
                )

    def tripped(self, log: RequestLog, error: ReplayLoopDetected) -> None:
        trace = self._open.get(id(log))
        if trace is not None:
            repeat = isinstance(error, RepeatLoopDetected)
            trace.event(
                "loop_stopped",
                {
                    f"{NS}.loop": "repeat" if repeat else "replay",
                    f"{NS}.tool": error.tool_name,
                    f"{NS}.raw_id": error.raw_id,
                    f"{NS}.client_id": error.client_id or "",
                    f"{NS}.reason": error.reason,
                    "error.type": error.code or "loop_detected",
                },
            )

    def finish(self, log: RequestLog) -> None:
        trace = self._open.pop(id(log), None)
        if trace is None:
            return  # not an exchange (passed through, or refused before it began)
        try:
            self._finish(trace, log)
        except Exception:  # a bug of the tracer's reaches no request
            LOGGER.exception(
                "the tracer could not end a request's span",
                extra={"fields": {"request_id": log.fields.get("request_id")}},
            )
            trace.end_round()
            trace.span.end()

    def shutdown(self) -> None:
        self.provider.shutdown()

    # -- the parts -----------------------------------------------------------------------------

    def _finish(self, trace: _Trace, log: RequestLog) -> None:
        if not trace.span.is_recording():  # not sampled: nothing to read for it
            trace.end_round()
            trace.span.end()
            return
        fields = log.fields
        status = fields.get("status")
        error = fields.get("error")
        failed = error is not None or not isinstance(status, int) or status >= 400
        error_type = str(error or status) if failed else None
        trace.end_round(error_type if trace.round is not None and failed else None)
        span = trace.span
        span.set_attributes(_answer_attributes(trace, log))
        if error_type is not None:
            span.set_attribute("error.type", error_type)
            span.set_status(Status(StatusCode.ERROR))
        ended = log.ended if log.ended is not None else time.perf_counter()
        span.end(end_time=trace.epoch + int(ended * 1e9))

    def _family(self, route: Route, model: str | None) -> str:
        """The request's provider family (a route's, else its model's), per route and model
        (a regular expression's search less per request); a bounded memory."""
        key = (id(route), model)
        cached = self._families.get(key)
        if cached is not None and cached[0] is route:
            return cached[1]
        profile = route_profile(route.upstream_profile, route.upstream)
        family = resolve_family(profile, model).name
        if len(self._families) >= FAMILY_MEMORY:
            self._families.clear()
        self._families[key] = (route, family)
        return family

    def _server(self, route: Route) -> dict[str, AttributeValue]:
        """The upstream's address and port, per route (routes live as long as the app)."""
        cached = self._servers.get(id(route))
        if cached is not None and cached[0] is route:
            return cached[1]
        found: dict[str, AttributeValue] = {}
        if route.upstream:
            parts = urlsplit(route.upstream)
            if parts.hostname:
                found["server.address"] = parts.hostname
                found["server.port"] = parts.port or (443 if parts.scheme == "https" else 80)
        self._servers[id(route)] = (route, found)
        return found


def _parent(headers: Headers) -> Context | None:
    """The client's trace context (W3C `traceparent`, `tracestate`), if it sent one."""
    carrier = {
        name.decode("latin-1"): value.decode("latin-1")
        for name, value in headers
        if name in _TRACE_HEADERS
    }
    return _PROPAGATOR.extract(carrier) if carrier else None


def _answer_attributes(trace: _Trace, log: RequestLog) -> dict[str, AttributeValue]:
    fields = log.fields
    attributes: dict[str, AttributeValue] = {f"{NS}.rounds": trace.rounds}
    if isinstance(fields.get("status"), int):
        attributes["http.response.status_code"] = fields["status"]
    for key in _COUNTS:
        if fields.get(key):
            attributes[f"{NS}.{key}"] = fields[key]
    if trace.events > MAX_EVENTS:
        attributes[f"{NS}.events_dropped"] = trace.events - MAX_EVENTS
    watch = trace.watch
    if watch is None or watch.first_at is None:
        return attributes
    if trace.stream:  # from the client's request to the first byte of its stream
        first = watch.first_at - log.started
        attributes["gen_ai.response.time_to_first_chunk"] = round(max(first, 0.0), 6)
    facts = response_facts(watch, trace.stream)
    if facts.model:
        attributes["gen_ai.response.model"] = facts.model
    if facts.id:
        attributes["gen_ai.response.id"] = facts.id
    if facts.reasons:
        attributes["gen_ai.response.finish_reasons"] = facts.finish_reasons
    if facts.input_tokens is not None:
        attributes["gen_ai.usage.input_tokens"] = facts.input_tokens
    if facts.output_tokens is not None:
        attributes["gen_ai.usage.output_tokens"] = facts.output_tokens
    if facts.cache_read is not None:
        attributes["gen_ai.usage.cache_read.input_tokens"] = facts.cache_read
    return attributes


def _note_event(note: Note) -> tuple[str, dict[str, AttributeValue]]:
    """A decision note as an event: its name in the namespace, and what it says."""
    match note:
        case IdRewritten():
            return "id_rewritten", {
                f"{NS}.tool": note.name,
                f"{NS}.raw_id": note.raw_id or "",
                f"{NS}.client_id": note.client_id,
                f"{NS}.reason": note.reason,
                f"{NS}.choice": note.choice,
                f"{NS}.index": note.index,
            }
        case CallDropped():
            return "call_dropped", {
                f"{NS}.tool": note.name,
                f"{NS}.raw_id": note.raw_id or "",
                f"{NS}.reason": note.reason,
                f"{NS}.matched": note.matched,
                f"{NS}.choice": note.choice,
            }
        case DeltaRepaired(kind="text_tool_call"):
            return "text_call_recovered", {f"{NS}.format": note.detail}
        case DeltaRepaired():
            name = "request_repaired" if note.kind in REQUEST_REPAIRS else "delta_repaired"
            return name, {f"{NS}.kind": note.kind, f"{NS}.detail": note.detail}
        case RepeatNoted():
            return "repeat_noted", {f"{NS}.count": note.count, f"{NS}.tools": note.tools}


__all__ = ["MAX_EVENTS", "OtelTracer", "otlp_tracer"]
