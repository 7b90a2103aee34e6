"""SPEC §4, framing: the SSE decoder tolerates every framing an upstream uses, and the encoder
writes OpenAI's."""

from __future__ import annotations

import pytest

import proxy.core.sse
from proxy.core.sse import DONE_EVENT, SSEDecoder, SSEEvent, SSEFramingError, encode_event
from tests.chat.helpers import splittings


def decode(*reads: bytes, end: bool = True) -> list[SSEEvent]:
    decoder = SSEDecoder()
    events: list[SSEEvent] = []
    for read in reads:
        events += decoder.feed(read)
    if end:
        events += decoder.end()
    return events


def decode_everywhere(data: bytes) -> list[SSEEvent]:
    """The same events whatever the reads: whole, byte by byte, and at every split point."""
    expected = decode(data)
    for label, reads in splittings(data):
        assert decode(*reads) == expected, label
    return expected


TWO = [SSEEvent(b'{"a":1}'), SSEEvent(b'{"b":2}')]


@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"], ids=["LF", "CRLF", "CR"])
def test_line_ends_lf_crlf_cr(eol: bytes) -> None:
    data = b'data: {"a":1}' + eol + eol + b'data: {"b":2}' + eol + eol
    assert decode_everywhere(data) == TWO


def test_mixed_line_ends_in_one_stream() -> None:
    data = b'data: {"a":1}\r\n\ndata: {"b":2}\r\r'
    assert decode_everywhere(data) == TWO


def test_crlf_split_across_reads_is_one_line_end() -> None:
    # A `\r` ending one read and the `\n` starting the next are a single line end: a blank
    # line must not appear between them (it would end the event early).
    decoder = SSEDecoder()
    assert decoder.feed(b"data: x\r") == []
    assert decoder.feed(b"\ndata: y\r") == []
    assert decoder.feed(b"\n") == []
    assert decoder.feed(b"\r\n") == [SSEEvent(b"x\ny")]


def test_cr_then_crlf_are_two_line_ends() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: x\r") == []
    assert decoder.feed(b"\r\n") == [SSEEvent(b"x")]


def test_empty_reads_do_not_lose_a_pending_cr() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: x\r") == []
    assert decoder.feed(b"") == []
    assert decoder.feed(b"\n\n") == [SSEEvent(b"x")]


def test_data_with_and_without_space() -> None:
    data = b'data:{"a":1}\n\ndata: {"b":2}\n\n'
    assert decode_everywhere(data) == TWO


def test_only_one_space_after_colon_is_removed() -> None:
    assert decode(b"data:  x\n\n") == [SSEEvent(b" x")]


def test_multi_line_data_joined_with_newline() -> None:
    data = b'data: {"a":\ndata: 1}\n\n'
    assert decode_everywhere(data) == [SSEEvent(b'{"a":\n1}')]


def test_comment_only_event_is_kept() -> None:
    data = b": OPENROUTER PROCESSING\n\n: keep-alive\n\ndata: {}\n\n"
    assert decode_everywhere(data) == [
        SSEEvent(None, (b": OPENROUTER PROCESSING",)),
        SSEEvent(None, (b": keep-alive",)),
        SSEEvent(b"{}"),
    ]


def test_event_id_and_retry_lines_travel_with_their_data() -> None:
    data = b"event: message\nid: 7\nretry: 10\ndata: {}\n\n"
    assert decode_everywhere(data) == [SSEEvent(b"{}", (b"event: message", b"id: 7", b"retry: 10"))]


def test_blank_lines_alone_make_no_events() -> None:
    assert decode_everywhere(b"\n\n\r\n\r\r\n") == []


def test_event_split_inside_a_utf8_character() -> None:
    payload = '{"content":"héllo 世界 🎉"}'.encode()
    data = b"data: " + payload + b"\n\n"
    # every split point includes the ones between the bytes of é, 世, 界 and 🎉
    assert decode_everywhere(data) == [SSEEvent(payload)]
    (event,) = decode(data)
    assert event.data is not None
    assert event.data.decode("utf-8") == '{"content":"héllo 世界 🎉"}'


def test_unicode_line_separators_are_not_line_ends() -> None:
    # U+2028, U+2029 and U+0085 are legal inside JSON strings; SSE only splits on CR and LF.
    payload = '{"content":"a\u2028b\u2029c\u0085d"}'.encode()
    assert decode_everywhere(b"data: " + payload + b"\n\n") == [SSEEvent(payload)]


def test_several_events_in_one_read() -> None:
    data = b"data: 1\n\ndata: 2\n\n: c\n\ndata: [DONE]\n\n"
    events = SSEDecoder().feed(data)
    assert events == [
        SSEEvent(b"1"),
        SSEEvent(b"2"),
        SSEEvent(None, (b": c",)),
        SSEEvent(b"[DONE]"),
    ]
    assert events[-1].is_done
    assert not events[0].is_done


def test_events_are_returned_as_soon_as_their_blank_line_arrives() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: 1\n") == []
    assert decoder.feed(b"\n") == [SSEEvent(b"1")]
    assert decoder.feed(b"data: 2") == []
    assert decoder.feed(b"\n\n") == [SSEEvent(b"2")]


@pytest.mark.parametrize("tail", [b"data: 1", b"data: 1\n", b"data: 1\r", b"data: 1\r\n"])
def test_missing_trailing_blank_line_is_dispatched_at_end(tail: bytes) -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: 0\n\n" + tail) == [SSEEvent(b"0")]
    assert decoder.end() == [SSEEvent(b"1")]


def test_end_with_nothing_pending_gives_nothing() -> None:
    decoder = SSEDecoder()
    decoder.feed(b"data: 0\n\n")
    assert decoder.end() == []


def test_done_is_recognised_with_spaces() -> None:
    assert SSEEvent(b" [DONE] ").is_done
    assert decode(b"data:[DONE]\r\n\r\n")[0].is_done
    assert not SSEEvent(None, (b": [DONE]",)).is_done
    assert not SSEEvent(b'"[DONE]"').is_done


def test_size_limit_raises_on_an_event_without_end(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(proxy.core.sse, "MAX_EVENT_BYTES", 100)
    decoder = SSEDecoder()
    # a line that never ends: the buffered bytes count
    with pytest.raises(SSEFramingError):
        decoder.feed(b"data: " + b"x" * 200)


def test_size_limit_counts_every_line_of_one_event(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(proxy.core.sse, "MAX_EVENT_BYTES", 100)
    decoder = SSEDecoder()
    with pytest.raises(SSEFramingError):  # lines arrive over several reads
        for _ in range(20):
            decoder.feed(b"data: 0123456789\n")


def test_size_limit_is_per_event(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(proxy.core.sse, "MAX_EVENT_BYTES", 100)
    decoder = SSEDecoder()
    events = []
    for _ in range(50):  # 50 events of 60 bytes: 3000 bytes in total, each under the limit
        events += decoder.feed(b"data: " + b"y" * 54 + b"\n\n")
    assert len(events) == 50


def test_default_size_limit_is_generous() -> None:
    assert proxy.core.sse.MAX_EVENT_BYTES >= 16 * 1024 * 1024


def test_encode_event_single_line() -> None:
    assert encode_event(b'{"a":1}') == b'data: {"a":1}\n\n'


def test_encode_event_multi_line_and_other_lines() -> None:
    assert encode_event(b"a\nb", (b"event: x",)) == b"event: x\ndata: a\ndata: b\n\n"


def test_encode_event_comment_only() -> None:
    assert encode_event(None, (b": keep-alive",)) == b": keep-alive\n\n"


def test_decode_of_encode_round_trips() -> None:
    events = [SSEEvent(b"a\nb", (b"event: x",)), SSEEvent(None, (b": c",)), SSEEvent(b"[DONE]")]
    data = b"".join(encode_event(e.data, e.other) for e in events)
    assert decode_everywhere(data) == events
    assert encode_event(b"[DONE]") == DONE_EVENT
