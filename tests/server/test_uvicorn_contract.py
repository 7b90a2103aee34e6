"""What the proxy overrides or reads in uvicorn, and nothing more: `DrainingServer` (a
`uvicorn.Server`) and `OpenAIErrorHttpProtocol` (uvicorn's `HttpToolsProtocol`), both in
proxy/server/draining.py. pyproject.toml accepts the uvicorn releases where all of it is there
(0.29 on: `capture_signals` and `_captured_signals` came then); these tests fail loudly,
naming what moved, when a release changes any of it."""

from __future__ import annotations

import asyncio
import importlib.util
import inspect

import uvicorn
import uvicorn.server
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle
from uvicorn.server import Server, ServerState

from proxy.server.draining import DrainingServer, OpenAIErrorHttpProtocol


async def _app(scope: object, receive: object, send: object) -> None:
    return None


def _source(function: object) -> str:
    return inspect.getsource(function)  # type: ignore[arg-type]


def _uvicorns_own_server() -> type[Server]:
    """uvicorn's `Server` as its module defines it. Other libraries patch the class on import
    (sse-starlette, which the Agents SDK brings through mcp, replaces `Server.handle_exit`), and
    which of them a test run has imported depends on the order the tests ran in; the contract is
    with uvicorn's own code, so it is read from a fresh load of uvicorn's module."""
    spec = importlib.util.spec_from_file_location(
        "uvicorn_server_as_shipped", uvicorn.server.__file__
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    own: type[Server] = module.Server
    return own


UVICORN_SERVER = _uvicorns_own_server()


# -- DrainingServer --------------------------------------------------------------------------


def test_the_server_still_has_each_method_draining_server_overrides() -> None:
    overridden = [
        name for name in vars(DrainingServer) if callable(getattr(UVICORN_SERVER, name, None))
    ]
    assert sorted(overridden) == ["capture_signals", "handle_exit", "shutdown"], (
        "DrainingServer overrides a method uvicorn's Server no longer has, or a new one"
    )
    assert list(inspect.signature(UVICORN_SERVER.handle_exit).parameters) == [
        "self",
        "sig",
        "frame",
    ], "uvicorn's Server.handle_exit takes other arguments"
    assert list(inspect.signature(UVICORN_SERVER.shutdown).parameters) == ["self", "sockets"], (
        "uvicorn's Server.shutdown takes other arguments"
    )
    assert inspect.iscoroutinefunction(UVICORN_SERVER.shutdown), "Server.shutdown is no coroutine"


def test_signals_reach_handle_exit_and_are_raised_again_from_captured_signals() -> None:
    """DrainingServer.handle_exit flips the app to draining from the signal handler, and its
    capture_signals empties `_captured_signals` so that a stop carried out exits 0."""
    serve = _source(UVICORN_SERVER.serve)
    assert "self.capture_signals()" in serve, "Server.serve no longer enters capture_signals"
    capture = _source(UVICORN_SERVER.capture_signals)
    assert "self.handle_exit" in capture, "capture_signals no longer installs handle_exit"
    assert "self._captured_signals" in capture, (
        "capture_signals no longer raises the signals again from _captured_signals"
    )
    assert "self._captured_signals.append(sig)" in _source(UVICORN_SERVER.handle_exit)
    server = UVICORN_SERVER(uvicorn.Config(_app, lifespan="off"))
    assert server._captured_signals == [], "Server no longer starts with _captured_signals"


def test_shutdown_waits_for_open_requests_up_to_the_graceful_timeout() -> None:
    """DrainingServer.shutdown arms the app's drain timer, then lets uvicorn wait for the open
    requests, which it must do for up to `timeout_graceful_shutdown` (the backstop)."""
    source = _source(UVICORN_SERVER.shutdown) + _source(UVICORN_SERVER._wait_tasks_to_complete)
    assert "timeout_graceful_shutdown" in source, "Server.shutdown no longer waits its timeout"
    assert "server_state.tasks" in source, "Server.shutdown no longer waits on the open requests"


def test_the_config_keeps_the_loaded_app_where_draining_server_finds_it() -> None:
    config = uvicorn.Config(_app, lifespan="off")
    assert config.loaded is False
    config.load()
    assert config.loaded is True, "uvicorn's Config no longer says it has loaded"
    assert hasattr(config, "loaded_app"), "uvicorn's Config no longer keeps loaded_app"


# -- OpenAIErrorHttpProtocol -----------------------------------------------------------------


# What OpenAIErrorHttpProtocol overrides: each calls uvicorn's own first (but the two answers).
OVERRIDDEN = {
    "connection_made": ["self", "transport"],
    "connection_lost": ["self", "exc"],
    "data_received": ["self", "data"],
    "on_message_begin": ["self"],
    "on_headers_complete": ["self"],
    "on_body": ["self", "body"],
    "on_message_complete": ["self"],
    "handle_websocket_upgrade": ["self"],
    "send_400_response": ["self", "msg"],
}


def test_the_protocol_still_has_each_method_the_proxy_overrides() -> None:
    overridden = {
        name
        for name in vars(OpenAIErrorHttpProtocol)
        if callable(getattr(HttpToolsProtocol, name, None)) and not name.startswith("__")
    }
    assert overridden == set(OVERRIDDEN), "update this contract to what it overrides now"
    for name, parameters in OVERRIDDEN.items():
        assert list(inspect.signature(getattr(HttpToolsProtocol, name)).parameters) == parameters, (
            f"uvicorn's httptools protocol's {name} takes other arguments"
        )


def test_a_parse_error_and_a_websocket_upgrade_are_answered_where_the_proxy_hooks_in() -> None:
    received = _source(HttpToolsProtocol.data_received)
    assert "self.send_400_response(" in received, (
        "a request httptools cannot parse is no longer answered by send_400_response"
    )
    assert "self.handle_websocket_upgrade()" in received, (
        "a WebSocket upgrade no longer goes through handle_websocket_upgrade"
    )
    assert "self._unset_keepalive_if_required()" in received, (
        "data_received no longer stops the keep-alive timer the proxy arms at connection_made"
    )


def test_trailer_fields_land_in_the_list_the_scope_holds() -> None:
    """Why on_headers_complete gives `self.headers` a copy: uvicorn's on_header appends every
    field to `self.headers`, which on_message_begin made the scope's `headers`."""
    assert "self.headers.append(" in _source(HttpToolsProtocol.on_header)
    begin = _source(HttpToolsProtocol.on_message_begin)
    assert "self.headers = []" in begin and '"headers": self.headers' in begin
    assert "timeout_keep_alive_handler" in dir(HttpToolsProtocol)
    assert "timeout_keep_alive_task" in _source(HttpToolsProtocol.__init__)


def test_the_protocol_has_what_send_400_response_reads() -> None:
    """`cycle` (its response_started and response_complete), `transport` and
    `server_state.default_headers`, on a protocol made as uvicorn's server makes it."""
    cycle_init = _source(RequestResponseCycle.__init__)
    for name in ("response_started", "response_complete"):
        assert f"self.{name} = " in cycle_init, f"uvicorn's request cycle no longer has {name}"
    config = uvicorn.Config(_app, http=OpenAIErrorHttpProtocol, lifespan="off")
    config.load()
    assert config.http_protocol_class is OpenAIErrorHttpProtocol
    loop = asyncio.new_event_loop()
    try:
        protocol = OpenAIErrorHttpProtocol(
            config=config, server_state=ServerState(), app_state={}, _loop=loop
        )
        assert protocol.cycle is None, "uvicorn's protocol no longer keeps its request in .cycle"
        assert protocol.server_state.default_headers == [], "ServerState has no default_headers"
        writer = loop.run_until_complete(_connect(loop, protocol))
        assert protocol.transport is not None, "uvicorn's protocol no longer keeps .transport"
        protocol.transport.close()
        writer.close()
        loop.run_until_complete(asyncio.sleep(0))
    finally:
        loop.close()


async def _connect(
    loop: asyncio.AbstractEventLoop, protocol: OpenAIErrorHttpProtocol
) -> asyncio.StreamWriter:
    """A real loopback connection with `protocol` on the server side."""
    server = await loop.create_server(lambda: protocol, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    for _ in range(100):  # bounded: accepting takes a turn or two of the loop
        if getattr(protocol, "transport", None) is not None:
            break
        await asyncio.sleep(0.01)
    server.close()
    return writer
