"""proxy.server.http_protocol subclasses uvicorn's httptools protocol and relies on what uvicorn's
server does with a protocol. pyproject.toml pins the uvicorn versions this was tested with;
these tests fail loudly, naming what changed, when a uvicorn release moves any of it."""

from __future__ import annotations

import asyncio
import inspect

import uvicorn
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import Server, ServerState

from proxy.server.http_protocol import LeanHttpProtocol

# Set by HttpToolsProtocol.__init__ or connection_made and read by LeanHttpProtocol or by the
# inherited methods it keeps (upgrades, the 400 answer, shutdown).
ATTRIBUTES = (
    "config",
    "app",
    "loop",
    "logger",
    "access_logger",
    "access_log",
    "parser",
    "root_path",
    "asgi_version",
    "limit_concurrency",
    "app_state",
    "timeout_keep_alive",
    "server_state",
    "connections",
    "tasks",
    "cycle",
    "transport",
    "flow",
    "server",
    "client",
    "scheme",
    "ws_protocol_class",
)
INHERITED = (
    "_should_upgrade",
    "_unsupported_upgrade_warning",
    "handle_websocket_upgrade",
    "send_400_response",
    "shutdown",
    "pause_writing",
    "resume_writing",
    "eof_received",
)


async def _app(scope: object, receive: object, send: object) -> None:
    return None


def test_the_protocol_is_made_as_uvicorns_server_makes_it() -> None:
    source = inspect.getsource(Server.startup)
    for keyword in ("config=config", "server_state=self.server_state", "app_state=", "_loop="):
        assert keyword in source, f"uvicorn's Server no longer builds a protocol with {keyword}"
    config = uvicorn.Config(_app, http=LeanHttpProtocol, lifespan="off")
    config.load()
    assert config.http_protocol_class is LeanHttpProtocol
    assert hasattr(config, "reset_contextvars")
    loop = asyncio.new_event_loop()
    try:
        protocol = LeanHttpProtocol(
            config=config, server_state=ServerState(), app_state={}, _loop=loop
        )
        _, writer = loop.run_until_complete(_pair(loop, protocol))
        missing = [name for name in ATTRIBUTES if not hasattr(protocol, name)]
        assert not missing, f"uvicorn's protocol no longer sets {missing}"
        assert protocol.connections == {protocol}
        protocol.transport.close()
        writer.close()
        loop.run_until_complete(asyncio.sleep(0))
    finally:
        loop.close()


async def _pair(
    loop: asyncio.AbstractEventLoop, protocol: LeanHttpProtocol
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A real loopback connection with `protocol` on the server side."""
    server = await loop.create_server(lambda: protocol, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for _ in range(100):  # bounded: accepting takes a turn or two of the loop
        if protocol.transport is not None:
            break
        await asyncio.sleep(0.01)
    server.close()
    return reader, writer


def test_the_methods_kept_from_uvicorn_are_still_there() -> None:
    missing = [name for name in INHERITED if not callable(getattr(HttpToolsProtocol, name, None))]
    assert not missing, f"uvicorn's httptools protocol no longer has {missing}"


def test_the_head_callbacks_do_what_uvicorns_do() -> None:
    """LeanHttpProtocol compiles its own on_url and on_header (uvicorn's are interpreted):
    the same pieces of a head give the same url, header list and 100-continue flag."""
    url_pieces = (b"/v1/chat", b"/completions")
    headers = [
        (b"Host", b"127.0.0.1"),
        (b"EXPECT", b"100-Continue"),
        (b"X-Dup", b"a"),
        (b"x-dup", b"b"),
    ]
    seen = []
    for cls in (HttpToolsProtocol, LeanHttpProtocol):
        protocol = cls.__new__(cls)
        protocol.url = b""
        protocol.headers = []
        protocol.expect_100_continue = False
        for piece in url_pieces:
            cls.on_url(protocol, piece)
        for name, value in headers:
            cls.on_header(protocol, name, value)
        seen.append((protocol.url, protocol.headers, protocol.expect_100_continue))
    assert seen[0] == seen[1]
    assert seen[1] == (
        b"/v1/chat/completions",
        [(b"host", b"127.0.0.1"), (b"expect", b"100-Continue"), (b"x-dup", b"a"), (b"x-dup", b"b")],
        True,
    )


def test_the_server_drains_through_shutdown_and_its_task_set() -> None:
    source = inspect.getsource(Server.shutdown) + inspect.getsource(Server._wait_tasks_to_complete)
    assert "connection.shutdown()" in source, "uvicorn no longer asks connections to close"
    assert "server_state.tasks" in source, "uvicorn no longer waits on server_state.tasks"
    assert "server_state.connections" in source


def test_flow_control_is_as_the_protocol_reads_it() -> None:
    names = ("read_paused", "write_paused")
    flow = FlowControl.__new__(FlowControl)
    source = inspect.getsource(FlowControl.__init__)
    assert all(f"self.{name}" in source for name in names)
    for method in ("drain", "pause_reading", "resume_reading", "pause_writing", "resume_writing"):
        assert callable(getattr(flow, method, None)), method
