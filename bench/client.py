"""A blocking one-connection HTTP/1.1 client that timestamps every read.

Blocking sockets and httptools keep the client's own cost small and, above all, the same for
the direct and the proxied request, so differences between the two are the proxy's.
"""

from __future__ import annotations

import bisect
import re
import socket
import time
from dataclasses import dataclass, field

import httptools
import orjson

# Longer than any single benchmark response (the paced stream takes about 1.3 s).
RESPONSE_TIMEOUT_S = 10.0
_STAMP = re.compile(rb'"content":"t(\d+)"')


def chat_request(port: int, body: dict[str, object], path: str = "/v1/chat/completions") -> bytes:
    payload = orjson.dumps(body)
    return (
        b"POST %b HTTP/1.1\r\nhost: 127.0.0.1:%d\r\ncontent-type: application/json\r\n"
        b"accept: */*\r\ncontent-length: %d\r\n\r\n%b"
        % (path.encode(), port, len(payload), payload)
    )


def chat_body(model: str, *, stream: bool) -> dict[str, object]:
    return {
        "model": model,
        "messages": [{"role": "user", "content": "Say hello."}],
        "stream": stream,
    }


@dataclass(slots=True)
class Reply:
    status: int = 0
    start_ns: int = 0
    first_body_ns: int = 0
    end_ns: int = 0
    # (end offset in the body, arrival time) of every read that carried body bytes
    pieces: list[tuple[int, int]] = field(default_factory=list)
    body: bytearray = field(default_factory=bytearray)

    @property
    def total_ms(self) -> float:
        return (self.end_ns - self.start_ns) / 1e6

    @property
    def first_byte_ms(self) -> float:
        return (self.first_body_ns - self.start_ns) / 1e6

    def stamps(self) -> list[tuple[int, int]]:
        """(send time, arrival time) in ns of every stamped delta, in order."""
        ends = [end for end, _ in self.pieces]
        out = []
        for match in _STAMP.finditer(self.body):
            arrived = self.pieces[bisect.bisect_left(ends, match.end())][1]
            out.append((int(match.group(1)), arrived))
        return out

    def stamp_delays_ms(self) -> list[float]:
        """For each stamped delta: arrival time minus the upstream's send time."""
        return [(arrived - sent) / 1e6 for sent, arrived in self.stamps()]

    def events(self) -> int:
        return self.body.count(b"data: ")


# An agent's second turn against a Kimi-like upstream through the proxy: its first call was
# answered, under the id the proxy minted for the upstream's `functions.bash:0` (SPEC §2.2:
# turn 1, index 0, four random hex digits, then the raw id's digest), and the request offers
# the tool. The kimi dialect (model name) sends that call upstream as `functions.bash:0`.
HISTORY_CALL_ID = "call_1_0_5e1f691d"
BASH_TOOL = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run a shell command.",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
        },
    },
}


def toolcall_body(model: str = "bench-kimi") -> dict[str, object]:
    """The request whose answer is the upstream's `bench-kimi` stream (bench.upstream)."""
    call = {
        "id": HISTORY_CALL_ID,
        "type": "function",
        "function": {"name": "bash", "arguments": '{"command": "pwd"}'},
    }
    return {
        "model": model,
        "messages": [
            {"role": "user", "content": "List the source files."},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": HISTORY_CALL_ID, "content": "/work/project"},
        ],
        "tools": [BASH_TOOL],
        "stream": True,
    }


class _Parser:
    """httptools callbacks writing into the current Reply."""

    __slots__ = ("done", "now", "reply")

    def __init__(self) -> None:
        self.reply = Reply()
        self.now = 0
        self.done = False

    def on_body(self, body: bytes) -> None:
        reply = self.reply
        if not reply.body:
            reply.first_body_ns = self.now
        reply.body += body
        reply.pieces.append((len(reply.body), self.now))

    def on_message_complete(self) -> None:
        self.done = True


class Connection:
    """One keep-alive connection; `send()` returns when the whole response arrived."""

    def __init__(self, port: int, host: str = "127.0.0.1") -> None:
        self.port = port
        self.sock = socket.create_connection((host, port), timeout=RESPONSE_TIMEOUT_S)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def send(self, request: bytes) -> Reply:
        state = _Parser()
        parser = httptools.HttpResponseParser(state)
        reply = state.reply
        recv = self.sock.recv
        clock = time.monotonic_ns
        reply.start_ns = clock()
        self.sock.sendall(request)
        while not state.done:
            data = recv(262144)
            state.now = clock()
            if not data:
                raise ConnectionError("the server closed the connection mid-response")
            parser.feed_data(data)
        reply.end_ns = state.now
        reply.status = parser.get_status_code()
        if not reply.first_body_ns:
            reply.first_body_ns = reply.end_ns
        return reply

    def close(self) -> None:
        self.sock.close()
