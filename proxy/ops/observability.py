"""Metrics (Prometheus text at /metrics) and structured JSON logs.

Each app owns its own CollectorRegistry, so tests and several apps in one process never share
counters. With several uvicorn workers each process has its own registry: scrape each worker,
or run one worker per container and scale with replicas (README, "Operations").
Credentials never reach a label or a log line: labels are route names, reasons and kinds.
"""

from __future__ import annotations

import logging
import math
import os
import sys
import time
from bisect import bisect_left
from collections.abc import Iterable
from io import TextIOWrapper
from itertools import accumulate
from logging import INFO
from typing import Any

import orjson
from mypy_extensions import mypyc_attr
from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

from proxy.core.errors import ProxyError
from proxy.core.note_labels import (
    DELTA_REPAIR_KINDS,
    DROP_REASONS,
    REPEAT_ACTIONS,
    REQUEST_REPAIR_KINDS,
    REQUEST_REPAIRS,
    REWRITE_REASONS,
)
from proxy.core.notes import CallDropped, DeltaRepaired, IdRewritten, Note, RepeatNoted, explain
from proxy.core.surfaces import SURFACES

LOGGER = logging.getLogger("toolcall_proxy")
# toolcall_proxy_upstream_errors' kinds: the codes of the upstream failures the proxy answers
# itself (SPEC §6: proxy.core.errors' UpstreamError and its subclasses), its own failure on upstream
# data, and the statuses relayed as upstream failures (429 and 5xx; 529 is Anthropic's
# "overloaded"). Any other status is counted too, its series appearing when it first happens.
UPSTREAM_ERROR_KINDS: tuple[str, ...] = (
    "upstream_error",
    "upstream_unreachable",
    "upstream_timeout",
    "upstream_stream_error",
    "proxy_internal_error",
    "status_429",
    "status_500",
    "status_502",
    "status_503",
    "status_504",
    "status_529",
)
# The surfaces whose decisions are counted (the others pass through).
_REPAIRED_SURFACES = tuple(surface.label for surface in SURFACES if surface.repaired)
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        # Counted on every request, so kept as plain numbers and exported at scrape time, in
        # the same families prometheus_client's Counter, Gauge and Histogram would write:
        # their per-call lookups and locks made a small request cost 520,194 instructions against
        # 501,891 with these (bench.inprocess --instructions). The event loop is the only writer.
        self.requests = _Counter(
            "toolcall_proxy_requests",
            "Requests served",
            ("route", "status", "stream", "surface"),
        )
        r.register(self.requests)
        # `surface`: the API surface (proxy.core.surfaces labels; "other" for passed-through paths)
        # Counted per decision (a stream that ends in a rewritten call counts one): plain
        # numbers too, as prometheus_client's `labels()` costs about 10K instructions a call.
        self.ids_rewritten = _Counter(
            "toolcall_proxy_ids_rewritten", "Tool-call ids rewritten", ("reason", "surface")
        )
        self.calls_dropped = _Counter(
            "toolcall_proxy_calls_dropped",
            "Tool calls withheld from the client",
            ("reason", "surface"),
        )
        self.deltas_repaired = _Counter(
            "toolcall_proxy_deltas_repaired", "Stream shapes repaired", ("kind", "surface")
        )
        # SPEC §11: requests repaired before they left, one per request and kind (a request
        # with two calls left unanswered counts once under missing_result).
        self.requests_repaired = _Counter(
            "toolcall_proxy_requests_repaired",
            "Requests repaired before they reached the upstream",
            ("kind", "surface"),
        )
        for counter in (
            self.ids_rewritten,
            self.calls_dropped,
            self.deltas_repaired,
            self.requests_repaired,
        ):
            r.register(counter)
        self.replays_answered = Counter(
            "toolcall_proxy_replays_answered",
            "Replays answered with a synthetic tool message",
            ["surface"],
            registry=r,
        )
        self.breaker_trips = Counter(
            "toolcall_proxy_breaker_trips", "Replay loops stopped", ["surface"], registry=r
        )
        # SPEC §10: a note added, a repeated call answered by the proxy, a repeat loop stopped.
        self.repeats = Counter(
            "toolcall_proxy_repeats",
            "Repeat guard actions (note, blocked, stopped)",
            ["action", "surface"],
            registry=r,
        )
        self.upstream_errors = Counter(
            "toolcall_proxy_upstream_errors", "Upstream failures", ["kind"], registry=r
        )
        self.shutdown_cuts = Counter(
            "toolcall_proxy_shutdown_cut",
            "Requests ended with the shutting_down error when the drain timeout expired",
            registry=r,
        )
        self.active_streams = _Gauge("toolcall_proxy_active_streams", "Streams being served")
        r.register(self.active_streams)
        self.ttfb = _Histogram(
            "toolcall_proxy_upstream_ttfb_seconds",
            "Upstream time to response head",
            _LATENCY_BUCKETS,
        )
        r.register(self.ttfb)
        self.duration = _Histogram(
            "toolcall_proxy_request_duration_seconds", "Total request duration", _LATENCY_BUCKETS
        )
        r.register(self.duration)
        self._export_known_labels()

    def _export_known_labels(self) -> None:
        """Every labelled counter at 0, for every label value it is known to take, from
        start-up: a dashboard then shows 0, not "No data", until the first event. (The requests
        counter's routes and statuses are known only once requests come.)"""
        for surface in _REPAIRED_SURFACES:
            for reason in REWRITE_REASONS:
                self.ids_rewritten.labels(reason, surface)
            for reason in DROP_REASONS:
                self.calls_dropped.labels(reason, surface)
            for kind in DELTA_REPAIR_KINDS:
                self.deltas_repaired.labels(kind, surface)
            for kind in REQUEST_REPAIR_KINDS:
                self.requests_repaired.labels(kind, surface)
            self.replays_answered.labels(surface)
            self.breaker_trips.labels(surface)
            for action in REPEAT_ACTIONS:
                self.repeats.labels(action, surface)
        for kind in UPSTREAM_ERROR_KINDS:
            self.upstream_errors.labels(kind)

    def record_notes(self, notes: Iterable[Note], surface: str) -> None:
        """Each decision in its counter; the request's repairs (SPEC §11) are not counted here
        but per request, by `requests_repaired_once`."""
        for note in notes:
            match note:
                case IdRewritten():
                    self.ids_rewritten.labels(note.reason, surface).inc()
                case CallDropped():
                    self.calls_dropped.labels(note.reason, surface).inc()
                    if note.reason == "duplicate_in_response":
                        self.ids_rewritten.labels(note.reason, surface).inc()
                    elif note.reason == "repeat":
                        self.repeats.labels("blocked", surface).inc()
                case DeltaRepaired():
                    if note.kind not in REQUEST_REPAIRS:
                        self.deltas_repaired.labels(note.kind, surface).inc()
                case RepeatNoted():
                    self.repeats.labels("note", surface).inc()

    def requests_repaired_once(self, kinds: Iterable[str], surface: str) -> None:
        """SPEC §11: one request repaired, under each kind of repair it needed."""
        for kind in kinds:
            self.requests_repaired.labels(kind, surface).inc()

    def stream_failed(self, log: RequestLog, error: ProxyError) -> None:
        """A response that broke after its head went out: counted, and named in the log line."""
        self.upstream_errors.labels(error.code or "stream").inc()
        log.fields["error"] = error.code

    def render(self) -> bytes:
        return generate_latest(self.registry)


# The three below are what a prometheus_client Collector is (`collect()`, which the registry
# asks for; it needs no base class), and native classes (setup.py compiles this module).
class _Counter:
    """A counter by labels, exported as prometheus_client's Counter would be: a `_total` and
    a `_created` sample per label set. `count()` is the requests counter's: its key is
    (route, status, stream, surface)."""

    def __init__(self, name: str, documentation: str, labels: tuple[str, ...]) -> None:
        self._name = name
        self._documentation = documentation
        self._labels = labels
        self._by_labels: dict[tuple[str, ...], _Count] = {}
        self._by_key: dict[tuple[str, int, bool, str], _Count] = {}  # count()'s, bound once

    def count(self, key: tuple[str, int, bool, str]) -> None:
        entry = self._by_key.get(key)
        if entry is None:
            route, status, stream, surface = key
            entry = self._by_key[key] = self.labels(
                route, str(status), str(stream).lower(), surface
            )
        entry.value += 1

    def labels(self, *values: str) -> _Count:
        """The count of one label set, as a Counter's child (`.inc()`)."""
        entry = self._by_labels.get(values)
        if entry is None:
            if len(values) != len(self._labels):
                raise ValueError(f"{self._name} takes the labels {self._labels}")
            entry = self._by_labels[values] = _Count()
        return entry

    def collect(self) -> Iterable[Metric]:
        family = CounterMetricFamily(self._name, self._documentation, labels=self._labels)
        for labels, entry in list(self._by_labels.items()):
            family.add_metric(labels, entry.value, created=entry.created)
        yield family


class _Count:
    __slots__ = ("created", "value")

    def __init__(self) -> None:
        self.value = 0.0
        self.created = time.time()

    def inc(self, amount: float = 1) -> None:
        self.value += amount


class _Gauge:
    """A gauge without labels (prometheus_client's Gauge takes a lock per change)."""

    def __init__(self, name: str, documentation: str) -> None:
        self._name = name
        self._documentation = documentation
        self.value = 0

    def inc(self) -> None:
        self.value += 1

    def dec(self) -> None:
        self.value -= 1

    def collect(self) -> Iterable[Metric]:
        yield GaugeMetricFamily(self._name, self._documentation, value=self.value)


class _Histogram:
    """A histogram without labels, exported as prometheus_client's Histogram would be:
    cumulative buckets, count, sum and `_created`. Kept as one count per bucket, found by
    bisection (prometheus_client walks the bounds and takes a lock per bucket and sum)."""

    def __init__(self, name: str, documentation: str, bounds: tuple[float, ...]) -> None:
        self._name = name
        self._documentation = documentation
        self._bounds = (*bounds, math.inf)
        to_text = floatToGoString  # the `le` labels as prometheus_client writes them
        self._les = [to_text(bound) for bound in self._bounds]  # type: ignore[no-untyped-call]
        self._counts = [0] * len(self._bounds)
        self._sum = 0.0
        self._created = time.time()

    def observe(self, value: float) -> None:
        self._counts[bisect_left(self._bounds, value)] += 1  # the first bound >= value
        self._sum += value

    def collect(self) -> Iterable[Metric]:
        family = HistogramMetricFamily(self._name, self._documentation)
        family.add_metric(
            [], list(zip(self._les, accumulate(self._counts), strict=True)), self._sum
        )
        family.samples.append(Sample(self._name + "_created", {}, self._created))
        yield family


@mypyc_attr(native_class=False)  # its base is not compiled: setup.py says why
class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "msg": record.getMessage(),
        }
        if record.name != LOGGER.name:
            entry["logger"] = record.name
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            entry.update(fields)
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(entry, default=str).decode()


@mypyc_attr(native_class=False)  # its base is not compiled: setup.py says why
class JsonLineHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler `configure_logging` installs: JSON lines on a stream.

    `write_info` writes one info line of the proxy's logger without a LogRecord, the same
    bytes JsonFormatter writes for the record: the per-request line's record, dispatch and
    formatting cost about 50K instructions, the line itself about 10K (bench.inprocess).
    """

    def write_entry(self, entry: dict[str, Any]) -> None:
        """Write a line given as the dict JsonFormatter would make of its record: `ts`,
        `level` and `msg` first, then the fields (RequestLog keeps its line in that shape)."""
        newline = self.terminator == "\n"
        # orjson ends the line when the terminator is a newline: no second copy of it
        line = orjson.dumps(
            entry, default=str, option=orjson.OPT_APPEND_NEWLINE if newline else None
        )
        stream = self.stream
        if newline and type(stream) is TextIOWrapper and stream.line_buffering:
            # A line-buffered text stream on a file (stderr, as Python opens it) holds no
            # whole line: each write of one is flushed at its newline. The line goes to the
            # file at once, as bytes, without the text layer's encoding and buffer: about
            # 6K instructions of the 15K the line cost (bench.serverprocess). A part of a
            # line another writer left in the stream stays behind this one, which keeps
            # this line whole.
            fd = _file_number(stream)
            if fd >= 0:
                with self.lock:  # type: ignore[union-attr]  # created by Handler.__init__
                    _write_all(fd, line)
                return
        text = line.decode() if newline else line.decode() + self.terminator
        with self.lock:  # type: ignore[union-attr]
            stream.write(text)
            try:  # StreamHandler.flush, without its second locking
                flush = stream.flush
            except AttributeError:
                return
            flush()


def _file_number(stream: TextIOWrapper) -> int:
    """The stream's file descriptor; -1 when it has none (a text stream over memory)."""
    try:
        return stream.fileno()
    except (OSError, ValueError):  # io.UnsupportedOperation is both
        return -1


def _write_all(fd: int, data: bytes) -> None:
    """os.write until all of `data` is written (a write may take part of it)."""
    written = os.write(fd, data)
    while written < len(data):  # rare: a copy of the rest is no matter
        written += os.write(fd, data[written:])


def _sole_handler() -> JsonLineHandler | None:
    """The configured handler, when an info record of LOGGER would reach it and nothing
    else: no filter, no other handler (tests and embedding code add theirs), no propagation."""
    if LOGGER.disabled or LOGGER.filters or LOGGER.propagate or not LOGGER.isEnabledFor(INFO):
        return None
    handlers = LOGGER.handlers
    if len(handlers) != 1:
        return None
    handler = handlers[0]
    if type(handler) is not JsonLineHandler or handler.filters or handler.level > INFO:
        return None
    if type(handler.formatter) is not JsonFormatter:
        return None
    return handler


# The keys every JSON line starts with (JsonFormatter's), in their order.
_LINE_HEAD = ("ts", "level", "msg")


def log_info(entry: dict[str, Any]) -> None:
    """`LOGGER.info(msg, extra={"fields": fields})` for a line kept as JsonFormatter's dict
    (`ts`, `level` and `msg`, then the fields): written straight to the configured handler
    when that is where the record would go (and only there), without a record and without
    copying the fields into a new dict behind the three (the copy cost as much as the JSON)."""
    handler = _sole_handler()
    if handler is not None:
        # round(t, 3) for the log's non-negative times, without its decimal conversion (about
        # 3,500 instructions against 1,500), and inline: a function call cost as much again.
        entry["ts"] = int(time.time() * 1000 + 0.5) / 1000
        try:
            handler.write_entry(entry)
            return
        except Exception:  # the record's way reports it (handleError)
            pass
    fields = {key: value for key, value in entry.items() if key not in _LINE_HEAD}
    LOGGER.info(entry["msg"], extra={"fields": fields})


def configure_logging(level: str) -> None:
    # The JSON lines carry no caller, thread or process fields, so the logging module need not
    # collect them for every record (the logging HOWTO's "Optimization" switches): about 6 of
    # the 35 us the per-request line cost on the benchmark machine.
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    handler = JsonLineHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    LOGGER.handlers[:] = [handler]
    LOGGER.setLevel(level.upper())
    LOGGER.propagate = False


def uvicorn_log_config() -> dict[str, Any]:
    """uvicorn's own lines (start-up, shutdown, server errors) as JSON on stderr too."""
    return {
        "version": 1,
        "disable_existing_loggers": False,  # keep the proxy's logger configured before
        "formatters": {"json": {"()": f"{__name__}.JsonFormatter"}},
        "handlers": {
            "stderr": {
                "class": "logging.StreamHandler",
                "formatter": "json",
                "stream": "ext://sys.stderr",
            }
        },
        "loggers": {
            "uvicorn": {"handlers": ["stderr"], "level": "INFO", "propagate": False},
            "uvicorn.access": {"handlers": ["stderr"], "level": "INFO", "propagate": False},
        },
    }


def request_repair_kinds(notes: Iterable[Note]) -> list[str]:
    """The kinds of the request's repairs (SPEC §11) among `notes`, each once, in the order
    they were made."""
    kinds: list[str] = []
    for note in notes:
        kind = note.kind if isinstance(note, DeltaRepaired) else ""
        if kind in REQUEST_REPAIRS and kind not in kinds:
            kinds.append(kind)
    return kinds


def log_decisions(request_id: str, notes: Iterable[Note]) -> None:
    if LOGGER.isEnabledFor(logging.DEBUG):
        for note in notes:
            LOGGER.debug(
                explain(note), extra={"fields": {"request_id": request_id, "event": "decision"}}
            )


# The request line's keys in their order, and the values it starts with.
_REQUEST_LINE: dict[str, Any] = {
    "ts": 0.0,
    "level": "info",
    "msg": "request",
    "request_id": "",
    "route": "",
    "method": "",
    "path": "",
    "ids_rewritten": 0,
    "calls_dropped": 0,
    "repairs": 0,
    "replays_answered": 0,
    "breaker": False,
}


class RequestLog:
    """Accumulates one request's facts and writes them as one JSON line at the end."""

    __slots__ = ("ended", "fields", "started", "ttfb")

    def __init__(self, request_id: str, route: str, method: str, path: str):
        self.started = time.perf_counter()
        self.ttfb: float | None = None
        self.ended: float | None = None
        # The line itself (see log_info): its `ts` is set when it is written. A copy of the
        # line's start with four values set costs about half of a dict display of it.
        self.fields = fields = _REQUEST_LINE.copy()
        fields["request_id"] = request_id
        fields["route"] = route
        fields["method"] = method
        fields["path"] = path

    def mark_first_byte(self) -> None:
        if self.ttfb is None:
            self.ttfb = time.perf_counter() - self.started

    def count(self, notes: Iterable[Note]) -> None:
        f = self.fields
        for note in notes:
            if isinstance(note, IdRewritten):
                f["ids_rewritten"] += 1
            elif isinstance(note, CallDropped):
                f["calls_dropped"] += 1
                if note.reason == "repeat":
                    f["repeat"] = "blocked"
            elif isinstance(note, RepeatNoted):
                f.setdefault("repeat", "note")  # SPEC §10: the strongest action stands
            else:
                f["repairs"] += 1

    def request_repaired(self, kinds: list[str]) -> list[str]:
        """SPEC §11: the line's `request_repairs` gains these kinds; returns the ones it did
        not list yet."""
        listed: list[str] = self.fields.setdefault("request_repairs", [])
        new = [kind for kind in kinds if kind not in listed]
        listed += new
        return new

    def mark_response_end(self) -> None:
        """The client's response is complete, though the request's work may go on (reading
        the rest of an upstream body): its duration is the client's, up to here."""
        if self.ended is None:
            self.ended = time.perf_counter()

    def finish(self, status: int, stream: bool | None = None) -> float:
        duration = (self.ended or time.perf_counter()) - self.started
        if stream is not None:
            self.fields["stream"] = stream
        self.fields["status"] = status
        # Thousandths of a millisecond, as `ts` above.
        self.fields["duration_ms"] = int(duration * 1000 * 1000 + 0.5) / 1000
        if self.ttfb is not None:
            self.fields["ttfb_ms"] = int(self.ttfb * 1000 * 1000 + 0.5) / 1000
        log_info(self.fields)
        return duration
