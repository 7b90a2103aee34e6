"""Traces (SPEC §12): whether they are on, and what the shell's report points hand them.

On only when the `otel` extra is installed and the standard OpenTelemetry variable
`OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set, and not
`OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none`. This module imports nothing of
OpenTelemetry: the tracer itself is `proxy.ops.otel`, imported only when traces are on. Off,
the app holds no tracer and every hook (the app, the exchange handler and its reporter) is one
`is None` test, as the inspector's are.

The report points are the inspector's, plus two per upstream round: the exchange opens (its
span begins, from the client's `traceparent`), each round is sent (a child span, whose
`traceparent` goes upstream) and answered (its status), decisions are reported (span events),
and the request ends (its log line's facts, the response's model, finish reasons and usage).
Nothing happens per streamed chunk but keeping a reference to the first and the last few
bodies sent, which are read once, at the end.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping
from typing import Any, Protocol

from proxy.config.load import Route
from proxy.core.errors import ReplayLoopDetected
from proxy.core.guard import Replay
from proxy.core.notes import Note
from proxy.ops.observability import LOGGER, RequestLog

Headers = list[tuple[bytes, bytes]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class Tracer(Protocol):
    """What the shell calls at its report points (`proxy.ops.otel.OtelTracer` is the one)."""

    def opened(
        self,
        log: RequestLog,
        route: Route,
        surface: str,
        body: Mapping[str, Any],
        headers: Headers,
        send: Send,
    ) -> Send:
        """A repaired exchange begins: its span starts (at the request's arrival, under the
        client's `traceparent` in `headers`). Returns the `send` the answer goes through."""

    def round(self, log: RequestLog, headers: Headers) -> Headers:
        """An upstream round is sent: its span starts; the headers it goes with carry it."""

    def round_answered(self, log: RequestLog, status: int) -> None: ...

    def notes(self, log: RequestLog, notes: Iterable[Note]) -> None: ...

    def answered(self, log: RequestLog, replays: Iterable[Replay]) -> None: ...

    def tripped(self, log: RequestLog, error: ReplayLoopDetected) -> None: ...

    def finish(self, log: RequestLog) -> None:
        """The request ended (its log line is written): its spans end."""

    def shutdown(self) -> None:
        """The process stops: the spans not yet exported are sent."""


def tracing_asked(environ: Mapping[str, str] = os.environ) -> bool:
    """Do the standard OpenTelemetry variables ask for traces?"""
    if not (
        environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    ):
        return False
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower()
    return exporters != "none"


def traces_line(environ: Mapping[str, str] = os.environ) -> str:
    """The start-up line of traces asked for: where they go, or why they are off."""
    endpoint = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or (
        environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").rstrip("/") + "/v1/traces"
    )
    if importlib.util.find_spec("opentelemetry.sdk") is None:
        return "traces off: OTEL_EXPORTER_OTLP_ENDPOINT is set but the otel extra is not installed"
    service = environ.get("OTEL_SERVICE_NAME") or "toolcall-proxy"
    return f"traces to {endpoint} over OTLP/HTTP (service {service}; one span per request)"


def tracer_from_environment(environ: Mapping[str, str] = os.environ) -> Tracer | None:
    """The tracer the environment asks for, or None (traces off: nothing is imported)."""
    if not tracing_asked(environ):
        return None
    try:
        from proxy.ops.otel import otlp_tracer
    except ImportError as exc:
        LOGGER.warning(
            "traces are off: OTEL_EXPORTER_OTLP_ENDPOINT is set but the otel extra is not "
            "installed (pip install 'toolcall-proxy[otel]')",
            extra={"fields": {"event": "tracing_unavailable", "missing": exc.name}},
        )
        return None
    return otlp_tracer()


__all__ = ["Headers", "Send", "Tracer", "tracer_from_environment", "traces_line", "tracing_asked"]
