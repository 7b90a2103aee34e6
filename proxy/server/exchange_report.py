"""What the shell tells logs and metrics about an exchange's decisions (SPEC §7).

Kept apart from the round loop: what is counted and logged changes for other reasons than how
bytes move.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from proxy.core.errors import RepeatLoopDetected, ReplayLoopDetected
from proxy.core.guard import Replay
from proxy.core.notes import Note
from proxy.core.surface_codec import Exchange
from proxy.ops.inspector import Inspector
from proxy.ops.observability import LOGGER, Metrics, log_decisions, request_repair_kinds
from proxy.ops.tracing import Tracer

if TYPE_CHECKING:
    from proxy.server.exchange_handler import ExchangeRequest


class ExchangeReporter:
    """Counts and logs one app's exchanges (its metrics registry)."""

    def __init__(self, metrics: Metrics):
        self.metrics = metrics
        self.inspector: Inspector | None = None  # SPEC §12, set by the app when it is on
        self.tracer: Tracer | None = None  # SPEC §12, likewise

    def opened(self, req: ExchangeRequest, exchange: Exchange) -> None:
        """What the exchange decided before any round: the request's repairs (SPEC §11) and
        the repeat guard's note, reported before the answer's head, which names the repairs
        (`x-toolcall-proxy-repaired`, from the log line's `request_repairs`)."""
        self.record(req, exchange)

    def notes(self, req: ExchangeRequest, notes: list[Note]) -> None:
        if notes:
            if self.inspector is not None:
                self.inspector.notes(req.log, notes)
            if self.tracer is not None:
                self.tracer.notes(req.log, notes)
            surface = req.codec.surface.label
            self.metrics.record_notes(notes, surface)
            kinds = request_repair_kinds(notes)
            if kinds:  # SPEC §11: each request once per kind
                self.metrics.requests_repaired_once(req.log.request_repaired(kinds), surface)
            req.log.count(notes)
            log_decisions(req.request_id, notes)
            notes.clear()

    def answered(self, req: ExchangeRequest, replays: list[Replay]) -> None:
        """Replays (SPEC §5) and repeated calls (SPEC §10) the proxy answered itself; the
        repeats are counted as the repeat guard's (`blocked`, from their CallDropped note)."""
        if self.inspector is not None:
            self.inspector.answered(req.log, replays)
        if self.tracer is not None:
            self.tracer.answered(req.log, replays)
        true_replays = [replay for replay in replays if not replay.repeat]
        self.metrics.replays_answered.labels(req.codec.surface.label).inc(len(true_replays))
        req.log.fields["replays_answered"] += len(true_replays)
        for replay in replays:
            LOGGER.warning(
                "repeated call answered" if replay.repeat else "replay answered",
                extra={
                    "fields": {
                        "request_id": req.request_id,
                        "route": req.route.name,
                        "tool": replay.name,
                        "raw_id": replay.raw_id,
                        "client_id": replay.client_id,
                        "matched": replay.form,
                        "event": "repeat_answered" if replay.repeat else "replay_answered",
                    }
                },
            )

    def tripped(self, req: ExchangeRequest, exc: ReplayLoopDetected) -> None:
        if self.inspector is not None:
            self.inspector.tripped(req.log, exc)
        if self.tracer is not None:
            self.tracer.tripped(req.log, exc)
        surface = req.codec.surface.label
        self.metrics.breaker_trips.labels(surface).inc()
        req.log.fields["breaker"] = True
        repeat = isinstance(exc, RepeatLoopDetected)
        if repeat:  # SPEC §10
            self.metrics.repeats.labels("stopped", surface).inc()
            req.log.fields["repeat"] = "stopped"
        LOGGER.warning(
            "repeat loop stopped" if repeat else "replay loop stopped",
            extra={
                "fields": {
                    "request_id": req.request_id,
                    "route": req.route.name,
                    "tool": exc.tool_name,
                    "raw_id": exc.raw_id,
                    "client_id": exc.client_id,
                    "reason": exc.reason,
                    "event": "breaker_trip",
                }
            },
        )

    def record(self, req: ExchangeRequest, exchange: Exchange) -> None:
        notes, non_json = exchange.report()
        if notes:
            self.notes(req, notes)
        if non_json:
            req.log.fields["non_json_events"] = non_json
