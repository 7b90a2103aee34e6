"""What `serve` says before it listens: one line per route, so the output names what runs.

Each line names the route, where clients reach it, the upstream (never a key: only the name
of the variable that holds it), whether clients need a proxy key, the id dialect and policy,
the replay guard, request repair and the upstream's provider family with the rules it brings
(SPEC §11), text tool calls and the API surfaces it repairs or passes through
(proxy.core.surfaces).
"""

from __future__ import annotations

import os

from proxy.bridge.codecs import bridges_from
from proxy.config.load import Route, Settings
from proxy.core.families import describe_family, route_profile
from proxy.core.surfaces import describe_surfaces
from proxy.ops.tracing import traces_line, tracing_asked

PREFIX = "toolcall-proxy:"


def _base_url(settings: Settings, route: Route) -> str:
    """Where a client points its base URL for this route (the path alone when the port is
    chosen at start-up: uvicorn names the real one a moment later)."""
    path = f"{route.path_prefix or ''}/v1"
    if settings.port == 0:
        return path
    return f"http://{settings.host}:{settings.port}{path}"


def _match(route: Route) -> str:
    return f" for models {route.model_glob}" if route.model_glob is not None else ""


def _key(route: Route) -> str:
    forwarded = "the client's Authorization is forwarded"
    if route.upstream_key_env is None:
        return forwarded
    if not os.environ.get(route.upstream_key_env):
        return f"key from ${route.upstream_key_env} (not set: {forwarded})"
    return f"key from ${route.upstream_key_env}"


def _clients(settings: Settings) -> str:
    """SPEC §6: whether a client must send a proxy key (said on every line, so that an open
    proxy is never a surprise)."""
    if settings.proxy_keys:
        return "proxy key required"
    return "no proxy key required (TOOLCALL_PROXY_KEYS not set)"


def _dialect(route: Route) -> str:
    if route.dialect == "auto":
        return "dialect auto (kimi for models named kimi or moonshot, else passthrough)"
    return f"dialect {route.dialect}"


def _requests(route: Route) -> str:
    """SPEC §11: whether requests are repaired, and under which provider family."""
    if not route.request_repair:
        return "request repair off"
    profile = route_profile(route.upstream_profile, route.upstream)
    return "request repair on, " + describe_family(profile, route.reasoning_passback)


def _upstream_api(route: Route) -> str:
    """SPEC §9: which clients a route bridges, when its upstream speaks another API."""
    if route.upstream_api == "same":
        return ""
    bridged = " and ".join(bridges_from(route.upstream_api)) or "no client path"
    return f"upstream speaks {route.upstream_api}, bridging {bridged} to it; "


def route_line(settings: Settings, route: Route) -> str:
    guard = (
        f"replay guard on, max {route.max_followups} follow-ups"
        if route.replay_guard
        else "replay guard off"
    )
    return (
        f"{PREFIX} route {route.name} at {_base_url(settings, route)}{_match(route)} -> "
        f"{route.upstream}, {_key(route)}; {_clients(settings)}; "
        f"{_upstream_api(route)}{_dialect(route)}; "
        f"ids {route.ids}; {guard}; "
        f"repeat guard {route.repeat_guard}; {_requests(route)}; "
        f"text tool calls {route.text_tool_calls}; {describe_surfaces()}"
    )


def startup_lines(settings: Settings) -> list[str]:
    lines = []
    if settings.simulated:
        lines.append(
            f"{PREFIX} no upstream configured; serving the built-in simulated provider "
            f"(a Kimi-like upstream that reuses ids) on http://{settings.host}:{settings.port}/v1"
        )
    lines += [route_line(settings, route) for route in settings.routes]
    if settings.inspecting:
        lines.append(inspector_line(settings))
    if tracing_asked():  # SPEC §12
        lines.append(f"{PREFIX} {traces_line()}")
    return lines


def inspector_line(settings: Settings) -> str:
    """SPEC §12: where the inspector is, and what it shows."""
    address = f"http://{settings.host}:{settings.port}"
    where = "/_inspect" if settings.port == 0 else f"{address}/_inspect"
    shows = "message content shown" if settings.inspect_content else "structure only"
    per = "per worker process" if settings.workers > 1 else "in memory"
    keys = "; the page asks for a proxy key" if settings.proxy_keys else ""
    return (
        f"{PREFIX} inspector at {where} ({shows}; the last {settings.inspect_exchanges} "
        f"exchanges, {per}{keys})"
    )


__all__ = ["inspector_line", "route_line", "startup_lines"]
