"""The request line: written straight to the configured handler when only it would get the
record, and then the same JSON line the record's way writes."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from proxy.ops.observability import LOGGER, JsonFormatter, RequestLog, configure_logging


@pytest.fixture
def sink() -> Iterator[io.StringIO]:
    handlers, level, propagate = LOGGER.handlers[:], LOGGER.level, LOGGER.propagate
    configure_logging("info")
    stream = io.StringIO()
    LOGGER.handlers[0].setStream(stream)  # type: ignore[attr-defined]
    try:
        yield stream
    finally:
        LOGGER.handlers[:] = handlers
        LOGGER.setLevel(level)
        LOGGER.propagate = propagate


def lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [orjson.loads(line) for line in stream.getvalue().splitlines()]


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_the_direct_line_is_the_formatters_line(sink: io.StringIO) -> None:
    log = RequestLog("req_1", "r", "POST", "/v1/chat/completions")
    log.fields["odd"] = b"x"  # not JSON: written with str(), as the formatter does
    log.mark_response_end()  # the same duration both times
    log.finish(200, stream=False)
    [direct] = lines(sink)
    # The same request through the record's way: a second handler takes that way.
    watcher = Records()
    LOGGER.addHandler(watcher)
    log.finish(200, stream=False)
    LOGGER.removeHandler(watcher)
    [record] = watcher.records
    formatted = orjson.loads(JsonFormatter().format(record))
    [_, through_record] = lines(sink)
    for line in (direct, formatted, through_record):
        line.pop("ts")
    assert direct == formatted == through_record
    assert list(direct)[:5] == ["level", "msg", "request_id", "route", "method"]
    assert direct["odd"] == "b'x'" and direct["status"] == 200


def test_no_line_below_the_level_and_records_for_other_handlers(sink: io.StringIO) -> None:
    LOGGER.setLevel(logging.WARNING)
    RequestLog("req_2", "r", "GET", "/v1/models").finish(200)
    assert sink.getvalue() == ""
    LOGGER.setLevel(logging.INFO)
    watcher = Records()
    LOGGER.addHandler(watcher)
    try:
        RequestLog("req_3", "r", "GET", "/v1/models").finish(404)
    finally:
        LOGGER.removeHandler(watcher)
    assert [r.fields["status"] for r in watcher.records] == [404]  # type: ignore[attr-defined]
    assert [line["request_id"] for line in lines(sink)] == ["req_3"]


def test_a_record_carries_the_fields_alone(sink: io.StringIO) -> None:
    """The line is kept as the formatter's dict (ts, level, msg first); a record handed to
    other handlers carries only the request's fields, as `extra` always did."""
    watcher = Records()
    LOGGER.addHandler(watcher)
    try:
        RequestLog("req_4", "r", "POST", "/v1/chat/completions").finish(200, stream=False)
    finally:
        LOGGER.removeHandler(watcher)
    [record] = watcher.records
    assert record.getMessage() == "request"
    fields = record.fields  # type: ignore[attr-defined]
    assert list(fields)[:4] == ["request_id", "route", "method", "path"]
    assert not {"ts", "level", "msg"} & set(fields)


@pytest.mark.parametrize("line_buffering", [True, False])
def test_each_request_line_reaches_the_file_when_written(line_buffering: bool) -> None:
    """Whether or not the text stream is line-buffered (stderr is), the line is in the file
    below it once written: nothing waits in the stream's buffers for a crash to lose."""
    handlers, level, propagate = LOGGER.handlers[:], LOGGER.level, LOGGER.propagate
    configure_logging("info")
    below = io.BytesIO()
    stream = io.TextIOWrapper(
        io.BufferedWriter(below),
        encoding="utf-8",
        line_buffering=line_buffering,  # type: ignore[arg-type]
    )
    LOGGER.handlers[0].setStream(stream)  # type: ignore[attr-defined]
    try:
        for n in range(3):
            RequestLog(f"req_{n}", "r", "POST", "/v1/chat/completions").finish(200)
            written = [orjson.loads(line) for line in below.getvalue().splitlines()]
            assert [entry["request_id"] for entry in written] == [f"req_{i}" for i in range(n + 1)]
    finally:
        LOGGER.handlers[:] = handlers
        LOGGER.setLevel(level)
        LOGGER.propagate = propagate


def test_on_a_line_buffered_file_each_line_is_written_whole_and_in_order(tmp_path: Path) -> None:
    """stderr's case: a line-buffered text stream on a file, which the request line skips
    for the file below it. Lines other writers put in the same stream keep their order, and
    a part of a line left in the stream does not split a request line."""
    handlers, level, propagate = LOGGER.handlers[:], LOGGER.level, LOGGER.propagate
    configure_logging("info")
    path = tmp_path / "log"
    with path.open("w", buffering=1, encoding="utf-8") as stream:
        assert type(stream) is io.TextIOWrapper and stream.line_buffering
        LOGGER.handlers[0].setStream(stream)  # type: ignore[attr-defined]
        try:
            RequestLog("req_a", "r", "POST", "/v1/chat/completions").finish(200)
            stream.write("another writer's line\n")
            RequestLog("req_b", "r", "POST", "/v1/chat/completions").finish(200)
            stream.write("a part")
            RequestLog("req_c", "r", "POST", "/v1/chat/completions").finish(200)
            stream.write(" of a line\n")
            text = path.read_text(encoding="utf-8")  # the stream still open: nothing waits
        finally:
            LOGGER.handlers[:] = handlers
            LOGGER.setLevel(level)
            LOGGER.propagate = propagate
    read = [
        line if line[:1] != "{" else orjson.loads(line)["request_id"] for line in text.splitlines()
    ]
    assert read == ["req_a", "another writer's line", "req_b", "req_c", "a part of a line"]
