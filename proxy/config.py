"""Settings: one frozen object built once at start-up from flags, environment and YAML.

Precedence (highest first): command-line flag, `TOOLCALL_PROXY_<NAME>` environment variable,
YAML file, built-in default. Nothing here is mutated after start-up; handlers only read it.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import yaml

IdsPolicy = Literal["auto", "always", "collisions", "off"]
Dialect = Literal["auto", "passthrough", "kimi", "alnum9"]
TextToolCalls = Literal["auto", "off"]

IDS_POLICIES: tuple[str, ...] = ("auto", "always", "collisions", "off")
DIALECTS: tuple[str, ...] = ("auto", "passthrough", "kimi", "alnum9")

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8787
DEFAULT_CONNECT_TIMEOUT = 10.0
# The longest a model may think before its first byte, and the longest silence in a stream.
DEFAULT_READ_TIMEOUT = 300.0
# Larger than any real chat request (long histories with images stay well below it), small
# enough that one client cannot make the proxy buffer gigabytes.
DEFAULT_MAX_BODY_BYTES = 32 * 1024 * 1024
DEFAULT_MAX_FOLLOWUPS = 2
# Where the built-in simulated provider is mounted when no upstream is configured.
SIMULATOR_MOUNT = "/_simulator"


class ConfigError(ValueError):
    """A configuration mistake, with the field (and YAML line when known) that causes it."""

    def __init__(self, field_name: str, message: str, line: int | None = None):
        where = f"{field_name} (line {line})" if line else field_name
        super().__init__(f"{where}: {message}")
        self.field_name = field_name
        self.line = line


@dataclass(frozen=True, slots=True)
class Route:
    """Where a request goes and how its tool calls are treated."""

    name: str
    upstream: str
    model_glob: str | None = None
    path_prefix: str | None = None
    upstream_key_env: str | None = None
    ids: IdsPolicy = "auto"
    dialect: Dialect = "auto"
    replay_guard: bool = True
    max_followups: int = DEFAULT_MAX_FOLLOWUPS
    text_tool_calls: TextToolCalls = "auto"
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    read_timeout: float = DEFAULT_READ_TIMEOUT

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
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    log_level: str = "info"
    workers: int = 1
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    proxy_keys: tuple[str, ...] = field(default=(), repr=False)
    cors_origins: tuple[str, ...] = ()
    drain_timeout: float = 30.0
    simulated: bool = False

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
    def path_prefixes(self) -> tuple[str, ...]:
        return tuple(r.path_prefix for r in self.routes if r.path_prefix)


def parse_bool(value: object, field_name: str, line: int | None = None) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("on", "true", "yes", "1"):
        return True
    if text in ("off", "false", "no", "0"):
        return False
    raise ConfigError(field_name, f"expected on or off, got {value!r}", line)


def _choice(value: object, allowed: tuple[str, ...], field_name: str, line: int | None) -> str:
    text = str(value).strip().lower()
    if text not in allowed:
        raise ConfigError(field_name, f"expected one of {', '.join(allowed)}, got {value!r}", line)
    return text


def _number(value: object, field_name: str, line: int | None, *, integer: bool = False) -> Any:
    try:
        number = int(str(value)) if integer else float(str(value))
    except ValueError:
        kind = "a whole number" if integer else "a number"
        raise ConfigError(field_name, f"expected {kind}, got {value!r}", line) from None
    if number < 0:
        raise ConfigError(field_name, f"must not be negative, got {value!r}", line)
    return number


def _upstream_url(value: object, field_name: str, line: int | None) -> str:
    url = str(value).strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ConfigError(field_name, f"expected an http:// or https:// URL, got {value!r}", line)
    return url


ROUTE_KEYS = frozenset(
    {
        "name",
        "match",
        "upstream",
        "upstream_key_env",
        "ids",
        "dialect",
        "replay_guard",
        "max_followups",
        "text_tool_calls",
        "connect_timeout",
        "read_timeout",
    }
)


def route_from_mapping(
    raw: Mapping[str, Any], index: int, lines: Mapping[str, int], defaults: Route
) -> Route:
    """Build one route from its YAML mapping; `lines` maps a key to its line number."""
    prefix = f"routes[{index}]"

    def line(key: str) -> int | None:
        return lines.get(key) or lines.get("")

    unknown = sorted(set(raw) - ROUTE_KEYS)
    if unknown:
        raise ConfigError(f"{prefix}.{unknown[0]}", "unknown field", line(unknown[0]))
    if "upstream" not in raw:
        raise ConfigError(f"{prefix}.upstream", "is required", line(""))
    match = raw.get("match") or {}
    if not isinstance(match, Mapping):
        raise ConfigError(
            f"{prefix}.match", "expected a mapping with model or path_prefix", line("match")
        )
    extra = sorted(set(match) - {"model", "path_prefix"})
    if extra:
        raise ConfigError(f"{prefix}.match.{extra[0]}", "unknown field", line("match"))
    path_prefix = match.get("path_prefix")
    if path_prefix is not None:
        path_prefix = "/" + str(path_prefix).strip("/")
        if path_prefix == "/" or path_prefix.endswith("/v1") or "/v1/" in path_prefix:
            raise ConfigError(
                f"{prefix}.match.path_prefix", "must be like /kimi (without /v1)", line("match")
            )
    return replace(
        defaults,
        name=str(raw.get("name") or f"route{index}"),
        upstream=_upstream_url(raw["upstream"], f"{prefix}.upstream", line("upstream")),
        model_glob=str(match["model"]) if "model" in match else None,
        path_prefix=path_prefix,
        upstream_key_env=str(raw["upstream_key_env"]) if raw.get("upstream_key_env") else None,
        ids=_choice(raw.get("ids", defaults.ids), IDS_POLICIES, f"{prefix}.ids", line("ids")),  # type: ignore[arg-type]
        dialect=_choice(
            raw.get("dialect", defaults.dialect), DIALECTS, f"{prefix}.dialect", line("dialect")
        ),  # type: ignore[arg-type]
        replay_guard=parse_bool(
            raw.get("replay_guard", defaults.replay_guard),
            f"{prefix}.replay_guard",
            line("replay_guard"),
        ),
        max_followups=_number(
            raw.get("max_followups", defaults.max_followups),
            f"{prefix}.max_followups",
            line("max_followups"),
            integer=True,
        ),
        text_tool_calls=_choice(
            raw.get("text_tool_calls", defaults.text_tool_calls),
            ("auto", "off"),
            f"{prefix}.text_tool_calls",
            line("text_tool_calls"),
        ),  # type: ignore[arg-type]
        connect_timeout=_number(
            raw.get("connect_timeout", defaults.connect_timeout),
            f"{prefix}.connect_timeout",
            line("connect_timeout"),
        ),
        read_timeout=_number(
            raw.get("read_timeout", defaults.read_timeout),
            f"{prefix}.read_timeout",
            line("read_timeout"),
        ),
    )


def load_yaml_routes(text: str, defaults: Route) -> tuple[dict[str, Any], tuple[Route, ...]]:
    """Parse a YAML config: returns its top-level settings and its routes."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise ConfigError(
            "yaml", str(exc).splitlines()[0], mark.line + 1 if mark else None
        ) from None
    if root is None:
        return {}, ()
    data = yaml.safe_load(text)
    if not isinstance(data, dict) or not isinstance(root, yaml.MappingNode):
        raise ConfigError("(top level)", "expected a mapping with a routes list", 1)
    allowed = {
        "routes",
        "host",
        "port",
        "log_level",
        "max_body_bytes",
        "cors_origins",
        "drain_timeout",
    }
    for key_node, _ in root.value:
        if key_node.value not in allowed:
            raise ConfigError(str(key_node.value), "unknown field", key_node.start_mark.line + 1)
    routes_node = next((v for k, v in root.value if k.value == "routes"), None)
    raw_routes = data.get("routes") or []
    if not isinstance(raw_routes, list) or (
        routes_node is not None and not isinstance(routes_node, yaml.SequenceNode)
    ):
        line = routes_node.start_mark.line + 1 if routes_node is not None else None
        raise ConfigError("routes", "expected a list of routes", line)
    routes = []
    for index, raw in enumerate(raw_routes):
        node = routes_node.value[index] if routes_node is not None else None
        lines: dict[str, int] = {"": node.start_mark.line + 1} if node is not None else {}
        if isinstance(node, yaml.MappingNode):
            lines.update({k.value: k.start_mark.line + 1 for k, _ in node.value})
        if not isinstance(raw, Mapping):
            raise ConfigError(f"routes[{index}]", "expected a mapping", lines.get(""))
        routes.append(route_from_mapping(raw, index, lines, defaults))
    top = {k: v for k, v in data.items() if k != "routes"}
    return top, tuple(routes)
