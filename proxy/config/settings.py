"""The resolved settings: frozen, built once at start-up, only read by the handlers.

Field defaults come from the one declaration of each setting (proxy.config.options).
"""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass, field

from proxy.config.options import (
    Dialect,
    IdsPolicy,
    InspectMode,
    RepeatGuard,
    TextToolCalls,
    UpstreamApi,
    UpstreamProfile,
    default,
)


@dataclass(frozen=True, slots=True)
class Route:
    """Where a request goes and how its tool calls are treated."""

    name: str
    upstream: str
    model_glob: str | None = None
    path_prefix: str | None = None
    upstream_key_env: str | None = default("upstream_key_env")
    upstream_api: UpstreamApi = default("upstream_api")  # noqa: RUF009 -- a str
    ids: IdsPolicy = default("ids")  # noqa: RUF009 -- a str
    dialect: Dialect = default("dialect")  # noqa: RUF009 -- a str
    replay_guard: bool = default("replay_guard")
    max_followups: int = default("max_followups")
    repeat_guard: RepeatGuard = default("repeat_guard")  # noqa: RUF009 -- a str
    repeat_exempt: tuple[str, ...] = default("repeat_exempt")
    text_tool_calls: TextToolCalls = default("text_tool_calls")  # noqa: RUF009 -- a str
    request_repair: bool = default("request_repair")
    upstream_profile: UpstreamProfile = default("upstream_profile")  # noqa: RUF009 -- a str
    reasoning_passback: bool = default("reasoning_passback")
    connect_timeout: float = default("connect_timeout")
    read_timeout: float = default("read_timeout")

    @property
    def upstream_key(self) -> str | None:
        """Read from the environment on use, so the secret never sits in the settings repr."""
        return os.environ.get(self.upstream_key_env) if self.upstream_key_env else None

    def matches_model(self, model: str | None) -> bool:
        if self.model_glob is None:
            return True
        return model is not None and fnmatch.fnmatchcase(model.lower(), self.model_glob.lower())


@dataclass(frozen=True, slots=True)
class Settings:
    routes: tuple[Route, ...]
    host: str = default("host")
    port: int = default("port")
    log_level: str = default("log_level")
    workers: int = default("workers")
    max_body_bytes: int = default("max_body_bytes")
    proxy_keys: tuple[str, ...] = field(default=default("keys"), repr=False)
    cors_origins: tuple[str, ...] = default("cors_origins")
    drain_timeout: float = default("drain_timeout")
    head_timeout: float = default("head_timeout")
    body_timeout: float = default("body_timeout")
    keep_alive_timeout: float = default("keep_alive_timeout")
    max_connections: int = default("max_connections")
    inspect: InspectMode = default("inspect")  # noqa: RUF009 -- a str
    inspect_content: bool = default("inspect_content")
    inspect_exchanges: int = default("inspect_exchanges")
    inspect_exchange_bytes: int = default("inspect_exchange_bytes")
    simulated: bool = False  # no upstream configured: the built-in simulator is the route

    def route_for(self, path_prefix: str, model: str | None) -> Route | None:
        """Path-prefixed routes win; then the first route whose model glob matches."""
        if path_prefix:
            for route in self.routes:
                if route.path_prefix == path_prefix:
                    return route
            return None
        for route in self.routes:
            if route.path_prefix is None and route.matches_model(model):
                return route
        return None

    @property
    def inspecting(self) -> bool:
        """SPEC §12: the inspector is served (auto: with the built-in simulated provider)."""
        return self.inspect == "on" or (self.inspect == "auto" and self.simulated)

    @property
    def path_prefixes(self) -> tuple[str, ...]:
        return tuple(r.path_prefix for r in self.routes if r.path_prefix)
