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
from collections.abc import Callable, Iterable
from itertools import islice
from typing import Any

import orjson

from proxy.core.errors import RepeatLoopDetected, ReplayLoopDetected
from proxy.core.guard import Replay
from proxy.core.notes import CallDropped, DeltaRepaired, IdRewritten, Note, RepeatNoted, explain
from proxy.ops.inspect_summary import short, summarize
from proxy.ops.observability import LOGGER, RequestLog

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
    """What one exchange's report points handed over: the two request bodies (references),
    and its notes, replays answered and loops stopped (the objects, as they were reported;
    turned into what the page shows only when it is asked for)."""

    __slots__ = ("items", "raw", "upstream")

    def __init__(self, raw: bytes, upstream: bytes) -> None:
        self.raw = raw
        self.upstream = upstream
        self.items: list[Note | Replay | ReplayLoopDetected] = []

    def add(self, items: Iterable[Note | Replay | ReplayLoopDetected]) -> None:
        room = MAX_DECISIONS - len(self.items)
        if room > 0:
            self.items.extend(islice(items, room))


class _Entry:
    """One exchange in the ring, as captured until the page asks: its row when a page lists
    it (the decisions turned into words: cheap), its detail when a page opens it (the request
    bodies summarized: the costly part, done at the end of the exchange only for bodies too
    large for the ring to keep, see `Inspector.finish`)."""

    __slots__ = ("_decisions", "_detail", "_row", "capture", "fields", "seq", "ts")

    def __init__(self, seq: int, fields: dict[str, Any], capture: _Capture) -> None:
        self.seq = seq
        self.ts = round(time.time(), 3)
        self.fields = fields
        self.capture: _Capture | None = capture
        self._decisions: list[dict[str, Any]] | None = None
        self._row = b""
        self._detail = b""

    def row(self, inspector: Inspector) -> bytes:
        if not self._row:
            self._guarded(self._build_row)
        return self._row

    def detail(self, inspector: Inspector) -> bytes:
        if not self._detail:
            self._guarded(lambda: self._build_detail(inspector))
        return self._detail

    def _guarded(self, build: Callable[[], None]) -> None:
        try:
            build()
        except Exception:  # a bug of the inspector's reaches neither a request nor the page
            LOGGER.exception(
                "the inspector could not summarize an exchange",
                extra={"fields": {"request_id": self.fields.get("request_id")}},
            )
            self._row = self._row or orjson.dumps(_row(self.seq, self.ts, self.fields, [], []))
            self._detail = orjson.dumps({"row": orjson.loads(self._row), "failed": True})
            self.capture = None

    def _decided(self) -> list[dict[str, Any]]:
        if self._decisions is None:
            items = self.capture.items if self.capture is not None else []
            self._decisions = [_decision(item) for item in items]
        return self._decisions

    def _build_row(self) -> None:
        """The row: the log line's facts and the decisions; the tool names are those of the
        calls the proxy decided something about (rewrote, dropped, answered, stopped)."""
        items = self.capture.items if self.capture is not None else []
        names = sorted({short(name) or "" for item in items if (name := _name_of(item))})
        self._row = orjson.dumps(_row(self.seq, self.ts, self.fields, self._decided(), names))

    def _build_detail(self, inspector: Inspector) -> None:
        row = orjson.loads(self.row(inspector))
        capture = self.capture or _Capture(b"", b"")
        budget = inspector.exchange_bytes * 2 // 5  # each side of the request, then decisions
        client = summarize(capture.raw, inspector.content, budget)
        upstream = (
            client
            if capture.upstream == capture.raw  # sent as it came (a memcmp, then no parse)
            else summarize(capture.upstream, inspector.content, budget)
        )
        decisions = self._decided()
        kept = _bounded(decisions, inspector.exchange_bytes // 5)
        detail = {
            "row": row,
            "log": {key: _plain(self.fields[key]) for key in _LOG_FIELDS if key in self.fields},
            "content": inspector.content,
            "decisions": kept,
            "decisions_omitted": len(decisions) - len(kept),
            "request": {"client": client, "upstream": upstream},
        }
        self._detail = orjson.dumps(detail, default=str)
        self.capture = None  # the bodies go: only the bounded summary stays


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
            capture.add(notes)

    def answered(self, log: RequestLog, replays: Iterable[Replay]) -> None:
        capture = self._open.get(id(log))
        if capture is not None:
            capture.add(replays)

    def tripped(self, log: RequestLog, error: ReplayLoopDetected) -> None:
        capture = self._open.get(id(log))
        if capture is not None:
            capture.add((error,))

    def finish(self, log: RequestLog) -> None:
        """The request ended (its log line is written): the exchange joins the ring. Its row
        is built now if a page is watching; its request bodies are summarized now only if they
        are larger than what the ring may keep of one exchange, otherwise when a page opens it."""
        capture = self._open.pop(id(log), None)
        if capture is None:
            return  # not an exchange (passed through, or refused before it began)
        self._seq += 1
        entry = _Entry(self._seq, log.fields.copy(), capture)
        self.ring.append(entry)
        if len(capture.raw) + len(capture.upstream) > self.exchange_bytes:
            entry.detail(self)  # not kept: summarized now, within the bound
        if self._feeds:
            row = entry.row(self)
            for feed in self._feeds:
                feed.push(row)

    # -- what the page reads -------------------------------------------------------------------

    def subscribe(self) -> tuple[Feed, list[bytes]]:
        """A live feed, and the rows already in the ring (oldest first)."""
        feed = Feed(self.size)
        self._feeds.add(feed)
        return feed, [entry.row(self) for entry in self.ring]

    def unsubscribe(self, feed: Feed) -> None:
        self._feeds.discard(feed)

    def detail(self, seq: int) -> bytes | None:
        """One exchange's detail, while it is in the ring."""
        if not self.ring:
            return None
        at = seq - self.ring[0].seq
        return self.ring[at].detail(self) if 0 <= at < len(self.ring) else None


def _name_of(item: Note | Replay | ReplayLoopDetected) -> str | None:
    if isinstance(item, ReplayLoopDetected):
        return item.tool_name
    return getattr(item, "name", None)


def _plain(value: object) -> object:
    """A log value as the page shows it: numbers and booleans as they are, text bounded."""
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, list):
        return [short(item) for item in value[:32]]
    return short(value)


def _row(
    seq: int, ts: float, fields: dict[str, Any], decisions: list[dict[str, Any]], names: list[str]
) -> dict[str, Any]:
    counts = {
        "ids_rewritten": fields.get("ids_rewritten", 0),
        "calls_dropped": fields.get("calls_dropped", 0),
        "replays_answered": fields.get("replays_answered", 0),
        "text_calls": sum(d["kind"] == "text_call_recovered" for d in decisions),
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
        "ts": ts,
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


def _replay(replay: Replay) -> dict[str, Any]:
    what = "repeated call" if replay.repeat else "replay"
    known = f"; the client knows it as {short(replay.client_id)}" if replay.client_id else ""
    return {
        "kind": "repeat_answered" if replay.repeat else "replay_answered",
        "direction": "response",
        "before": f"{what} of {short(replay.name)} id {short(replay.raw_id)}",
        "after": "not sent: answered by the proxy (a follow-up round)",
        "note": f"matched the {replay.form}{known}",
    }


def _stopped(error: ReplayLoopDetected) -> dict[str, Any]:
    repeat = isinstance(error, RepeatLoopDetected)
    return {
        "kind": "repeat_stopped" if repeat else "loop_stopped",
        "direction": "response",
        "before": f"{'repeat' if repeat else 'replay'} of {short(error.tool_name)} "
        f"id {short(error.raw_id)}",
        "after": f"error {error.error_type} ({error.code})",
        "note": error.reason,
    }


def _decision(note: Note | Replay | ReplayLoopDetected) -> dict[str, Any]:
    """One decision as the page shows it: what arrived beside what the proxy passed on (for
    the response: what the upstream sent and what the client got)."""
    if isinstance(note, Replay):
        return _replay(note)
    if isinstance(note, ReplayLoopDetected):
        return _stopped(note)
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
