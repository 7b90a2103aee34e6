"""The inspector's memory (SPEC §12): the newest exchanges of this process, and their live feed.

A bounded ring of exchanges, nothing on disk, lost on restart. The shell hands it what it
already has at an exchange's report points, never per chunk: the client's request and the
first upstream request when the exchange opens (references to bytes that exist anyway), the
decision notes and the replays answered or loops stopped as they are reported, and the log
line's fields when the request ends. Only then is the exchange summarized (after the client's
response is complete), into a row for the list and a detail for the page, both JSON and
bounded in size. With the inspector off none of this exists: the app holds no Inspector and
every hook is one `is None` test.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Iterable
from typing import Any

import orjson

from proxy.core.errors import RepeatLoopDetected, ReplayLoopDetected
from proxy.core.guard import Replay
from proxy.core.notes import CallDropped, DeltaRepaired, IdRewritten, Note, RepeatNoted, explain
from proxy.ops.inspect_summary import call_names, short, summarize
from proxy.ops.observability import RequestLog

# The repairs made to the request the upstream receives (SPEC §11); every other repair is
# made to the response the client receives.
REQUEST_REPAIRS = frozenset(
    {
        "missing_result",
        "result_moved",
        "orphan_result",
        "duplicate_result",
        "result_order",
        "history_arguments",
        "tool_schema",
    }
)
# Decisions kept per exchange (a response may hold thousands of rewritten calls).
MAX_DECISIONS = 200
# The log line's fields shown with an exchange (the rest are its row's).
_LOG_FIELDS = (
    "request_id",
    "route",
    "surface",
    "model",
    "method",
    "path",
    "stream",
    "dialect",
    "status",
    "duration_ms",
    "ttfb_ms",
    "ids_rewritten",
    "calls_dropped",
    "repairs",
    "replays_answered",
    "breaker",
    "repeat",
    "error",
    "dropped",
    "non_json_events",
)


class _Capture:
    """What one exchange's report points handed over, until its request ends."""

    __slots__ = ("decisions", "names", "raw", "upstream")

    def __init__(self, raw: bytes, upstream: bytes) -> None:
        self.raw = raw
        self.upstream = upstream
        self.decisions: list[dict[str, Any]] = []
        self.names: set[str] = set()

    def add(self, decision: dict[str, Any], name: object = None) -> None:
        if len(self.decisions) < MAX_DECISIONS:
            self.decisions.append(decision)
        if name is not None:
            self.names.add(short(name) or "")


class _Entry:
    __slots__ = ("detail", "row", "seq")

    def __init__(self, seq: int, row: bytes, detail: bytes) -> None:
        self.seq = seq
        self.row = row
        self.detail = detail


class Feed:
    """One page's live feed: the rows published since it last read (bounded; a page that
    does not read loses the oldest, never the proxy's memory)."""

    def __init__(self, bound: int) -> None:
        self.rows: deque[bytes] = deque(maxlen=bound)
        self.wake = asyncio.Event()

    def push(self, row: bytes) -> None:
        self.rows.append(row)
        self.wake.set()

    async def next(self, timeout: float) -> list[bytes]:
        """The rows published since the last call, waiting up to `timeout` for one."""
        if not self.rows:
            try:
                await asyncio.wait_for(self.wake.wait(), timeout)
            except TimeoutError:
                return []
        self.wake.clear()
        rows = list(self.rows)
        self.rows.clear()
        return rows


class Inspector:
    """The newest `size` exchanges of this process, each at most about `exchange_bytes`."""

    def __init__(self, size: int, exchange_bytes: int, content: bool) -> None:
        self.size = size
        self.exchange_bytes = exchange_bytes
        self.content = content
        self.ring: deque[_Entry] = deque(maxlen=size)
        self._open: dict[int, _Capture] = {}  # by the request's RequestLog
        self._feeds: set[Feed] = set()
        self._seq = 0

    # -- the report points (proxy.server.exchange_handler, exchange_report, app) -------------

    def opened(self, log: RequestLog, raw: bytes, upstream_request: bytes) -> None:
        self._open[id(log)] = _Capture(raw, upstream_request)

    def notes(self, log: RequestLog, notes: Iterable[Note]) -> None:
        capture = self._open.get(id(log))
        if capture is not None:
            for note in notes:
                capture.add(_decision(note), getattr(note, "name", None))

    def answered(self, log: RequestLog, replays: Iterable[Replay]) -> None:
        capture = self._open.get(id(log))
        if capture is None:
            return
        for replay in replays:
            what = "repeated call" if replay.repeat else "replay"
            capture.add(
                {
                    "kind": "repeat_answered" if replay.repeat else "replay_answered",
                    "direction": "response",
                    "before": f"{what} of {short(replay.name)} id {short(replay.raw_id)}",
                    "after": "not sent: answered by the proxy (a follow-up round)",
                    "note": f"matched the {replay.form}"
                    + (
                        f"; the client knows it as {short(replay.client_id)}"
                        if replay.client_id
                        else ""
                    ),
                },
                replay.name,
            )

    def tripped(self, log: RequestLog, error: ReplayLoopDetected) -> None:
        capture = self._open.get(id(log))
        if capture is None:
            return
        repeat = isinstance(error, RepeatLoopDetected)
        capture.add(
            {
                "kind": "repeat_stopped" if repeat else "loop_stopped",
                "direction": "response",
                "before": f"{'repeat' if repeat else 'replay'} of {short(error.tool_name)} "
                f"id {short(error.raw_id)}",
                "after": f"error {error.error_type} ({error.code})",
                "note": error.reason,
            },
            error.tool_name,
        )

    def finish(self, log: RequestLog) -> None:
        """The request ended (its log line is written): the exchange joins the ring."""
        capture = self._open.pop(id(log), None)
        if capture is None:
            return  # not an exchange (passed through, or refused before it began)
        self._seq += 1
        entry = self._entry(self._seq, log.fields, capture)
        self.ring.append(entry)
        for feed in self._feeds:
            feed.push(entry.row)

    # -- what the page reads -------------------------------------------------------------------

    def subscribe(self) -> tuple[Feed, list[bytes]]:
        """A live feed, and the rows already in the ring (oldest first)."""
        feed = Feed(self.size)
        self._feeds.add(feed)
        return feed, [entry.row for entry in self.ring]

    def unsubscribe(self, feed: Feed) -> None:
        self._feeds.discard(feed)

    def detail(self, seq: int) -> bytes | None:
        """One exchange's detail, while it is in the ring."""
        if not self.ring:
            return None
        at = seq - self.ring[0].seq
        return self.ring[at].detail if 0 <= at < len(self.ring) else None

    # -- building an entry ---------------------------------------------------------------------

    def _entry(self, seq: int, fields: dict[str, Any], capture: _Capture) -> _Entry:
        budget = self.exchange_bytes * 2 // 5  # each side of the request; the rest: decisions
        client = summarize(capture.raw, self.content, budget)
        upstream = summarize(capture.upstream, self.content, budget)
        capture.raw = capture.upstream = b""
        names = capture.names | set(call_names(client)) | set(call_names(upstream))
        row = _row(seq, fields, capture, sorted(names))
        decisions = _bounded(capture.decisions, self.exchange_bytes // 5)
        detail = {
            "row": row,
            "log": {key: _plain(fields[key]) for key in _LOG_FIELDS if key in fields},
            "content": self.content,
            "decisions": decisions,
            "decisions_omitted": len(capture.decisions) - len(decisions),
            "request": {"client": client, "upstream": upstream},
        }
        return _Entry(seq, orjson.dumps(row), orjson.dumps(detail, default=str))


def _plain(value: object) -> object:
    """A log value as the page shows it: numbers and booleans as they are, text bounded."""
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, list):
        return [short(item) for item in value[:32]]
    return short(value)


def _row(seq: int, fields: dict[str, Any], capture: _Capture, names: list[str]) -> dict[str, Any]:
    kinds = [d["kind"] for d in capture.decisions]
    counts = {
        "ids_rewritten": fields.get("ids_rewritten", 0),
        "calls_dropped": fields.get("calls_dropped", 0),
        "replays_answered": fields.get("replays_answered", 0),
        "text_calls": kinds.count("text_call_recovered"),
        "repairs": fields.get("repairs", 0),
    }
    flags = {
        "breaker": bool(fields.get("breaker")),
        "repeat": _plain(fields.get("repeat")),
        "error": _plain(fields.get("error")),
        "dropped": _plain(fields.get("dropped")),
    }
    changed = any(counts.values()) or any(flags.values())
    return {
        "seq": seq,
        "ts": round(time.time(), 3),
        "request_id": _plain(fields.get("request_id")),
        "route": _plain(fields.get("route")),
        "surface": _plain(fields.get("surface")),
        "model": _plain(fields.get("model")),
        "stream": bool(fields.get("stream")),
        "status": fields.get("status"),
        "duration_ms": fields.get("duration_ms"),
        "counts": counts,
        **flags,
        "changed": changed,
        "tools": names[:64],
    }


def _bounded(decisions: list[dict[str, Any]], budget: int) -> list[dict[str, Any]]:
    """The first decisions whose JSON fits `budget` bytes."""
    spent = 0
    for count, decision in enumerate(decisions):
        spent += len(orjson.dumps(decision))
        if spent > budget:
            return decisions[:count]
    return decisions


def _decision(note: Note) -> dict[str, Any]:
    """One note as the page shows it: what the upstream sent beside what the client got."""
    text = explain(note)
    match note:
        case IdRewritten():
            raw = "no id" if note.raw_id is None else f"id {short(note.raw_id)}"
            return {
                "kind": "id_rewritten",
                "direction": "response",
                "before": f"call {short(note.name)} {raw}",
                "after": f"call {short(note.name)} id {short(note.client_id)}",
                "note": f"{note.reason}: {text}",
            }
        case CallDropped():
            why = f"{note.reason}, matched the {note.matched}" if note.matched else note.reason
            return {
                "kind": "call_dropped",
                "direction": "response",
                "before": f"call {short(note.name)} id {short(note.raw_id)}",
                "after": f"not sent ({why})",
                "note": text,
            }
        case DeltaRepaired(kind="text_tool_call"):
            return {
                "kind": "text_call_recovered",
                "direction": "response",
                "before": f"a tool call written as {note.detail} markup in the text",
                "after": "a tool call",
                "note": text,
            }
        case DeltaRepaired():
            request = note.kind in REQUEST_REPAIRS
            return {
                "kind": "request_repair" if request else "repair",
                "direction": "request" if request else "response",
                "before": note.kind,
                "after": "repaired" + (f": {note.detail}" if note.detail else ""),
                "note": text,
            }
        case RepeatNoted():
            return {
                "kind": "repeat_noted",
                "direction": "request",
                "before": f"{note.tools} called {note.count} times with the same result",
                "after": "the last tool result carries the repeat guard's note",
                "note": text,
            }
