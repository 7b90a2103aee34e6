"""The proxy served with a chosen upstream transport, for `python -m bench --transports`.

It builds the same settings and uvicorn options as `toolcall-proxy serve`, but hands the app
the proxy's `UpstreamClient` over the transport under comparison:

- `default`: httpx's own transport (httpcore);
- `aiohttp`: `httpx_aiohttp.AiohttpTransport`;
- `proxy`: whatever `proxy.upstream.client.make_upstream_client()` picks (what production runs).

Run as `python -m bench.variant TRANSPORT serve-flags...`.
"""

from __future__ import annotations

import sys

import httpx

TRANSPORTS = ("default", "aiohttp", "proxy")


def make_client(name: str) -> httpx.AsyncClient:
    """The proxy's own client class over the named transport: the rows differ by transport."""
    from proxy.upstream.client import UpstreamClient, make_upstream_client

    if name == "proxy":
        return make_upstream_client()
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=256, keepalive_expiry=30)
    transport: httpx.AsyncBaseTransport
    if name == "default":
        transport = httpx.AsyncHTTPTransport(limits=limits, trust_env=False)
    elif name == "aiohttp":
        from httpx_aiohttp import AiohttpTransport

        transport = AiohttpTransport(limits=limits, trust_env=False)
    else:
        raise SystemExit(f"unknown transport {name!r}; expected one of {', '.join(TRANSPORTS)}")
    return UpstreamClient(transport=transport, timeout=None, trust_env=False)


def main(argv: list[str]) -> int:
    import uvicorn

    from proxy.cli.main import settings_from_argv
    from proxy.ops.observability import configure_logging
    from proxy.server.app import create_app
    from proxy.server.draining import OpenAIErrorHttpProtocol

    name, *serve_argv = argv
    settings = settings_from_argv(serve_argv)
    configure_logging(settings.log_level)
    app = create_app(settings, make_client(name))
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        loop="uvloop",
        # The protocol `serve` runs, so rows differ by transport alone.
        http=OpenAIErrorHttpProtocol,
        log_level=settings.log_level,
        access_log=False,
        timeout_graceful_shutdown=int(settings.drain_timeout),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
