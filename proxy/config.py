"""Settings: one frozen object built once at start-up from flags, environment and YAML.

Precedence (highest first): command-line flag, `TOOLCALL_PROXY_<NAME>` environment variable,
YAML file, built-in default. Nothing here is mutated after start-up; handlers only read it.
"""

from __future__ import annotations

import fnmatch
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal
from urllib.parse import urlsplit

import yaml

IdsPolicy = Literal["auto", "always", "collisions", "off"]
Dialect = Literal["auto", "passthrough", "kimi", "alnum9"]
TextToolCalls = Literal["auto", "off"]

IDS_POLICIES: tuple[str, ...] = ("auto", "always", "collisions", "off")
DIALECTS: tuple[str, ...] = ("auto", "passthrough", "kimi", "alnum9")
LOG_LEVELS: tuple[str, ...] = ("debug", "info", "warning", "error")

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8787
DEFAULT_CONNECT_TIMEOUT = 10.0
# The longest a model may think before its first byte, and the longest silence in a stream.
DEFAULT_READ_TIMEOUT = 300.0
# Larger than any real chat request (long histories with images stay well below it), small
# enough that one client cannot make the proxy buffer gigabytes.
DEFAULT_MAX_BODY_BYTES = 32 * 1024 * 1024
DEFAULT_MAX_FOLLOWUPS = 2
# Seconds open streams may go on after SIGTERM before they are ended with `shutting_down`.
DEFAULT_DRAIN_TIMEOUT = 30.0
# Where the built-in simulated provider is mounted when no upstream is configured.
SIMULATOR_MOUNT = "/_simulator"


class ConfigError(ValueError):
    """A configuration mistake, with the field (and YAML line when known) that causes it."""

    def __init__(self, field_name: str, message: str, line: int | None = None):
        where = f"{field_name} (line {line})" if line else field_name
        super().__init__(f"{where}: {message}")
        self.field_name = field_name
        self.detail = message
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
    drain_timeout: float = DEFAULT_DRAIN_TIMEOUT
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


def parse_choice(value: object, allowed: tuple[str, ...], field_name: str, line: int | None) -> str:
    text = str(value).strip().lower()
    if isinstance(value, bool):  # YAML 1.1 reads a bare `off` (or `on`) as a boolean
        text = "on" if value else "off"
    if text not in allowed:
        raise ConfigError(field_name, f"expected one of {', '.join(allowed)}, got {value!r}", line)
    return text


def parse_number(
    value: object,
    field_name: str,
    line: int | None,
    *,
    integer: bool = False,
    positive: bool = False,
) -> Any:
    kind = "a whole number" if integer else "a number"
    if isinstance(value, bool):  # YAML reads `yes`/`on` as booleans; int(True) would be 1
        raise ConfigError(field_name, f"expected {kind}, got {value!r}", line)
    try:
        number = int(str(value)) if integer else float(str(value))
    except ValueError:
        raise ConfigError(field_name, f"expected {kind}, got {value!r}", line) from None
    if not math.isfinite(number):
        raise ConfigError(field_name, f"expected a finite number, got {value!r}", line)
    if positive and number <= 0:
        raise ConfigError(field_name, f"must be greater than 0, got {value!r}", line)
    if number < 0:
        raise ConfigError(field_name, f"must not be negative, got {value!r}", line)
    return number


def upstream_base_url(value: object, field_name: str, line: int | None = None) -> str:
    """A validated upstream base URL (http or https, a host, no credentials, query or fragment)."""
    url = str(value).strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ConfigError(field_name, f"expected an http:// or https:// URL, got {value!r}", line)
    parts = urlsplit(url)
    try:
        parts.port  # noqa: B018 -- parsing the port is the check
    except ValueError:
        raise ConfigError(field_name, f"the port of {value!r} is not valid", line) from None
    if not parts.hostname or any(c.isspace() for c in url):
        raise ConfigError(field_name, f"expected a URL with a host name, got {value!r}", line)
    if parts.username is not None or parts.password is not None:
        # Credentials in the URL would be printed by check-config and could reach logs.
        raise ConfigError(
            field_name, "must not contain credentials; name a key with upstream_key_env", line
        )
    if parts.query or parts.fragment or "?" in url or "#" in url:
        raise ConfigError(field_name, f"must not have a query or fragment, got {value!r}", line)
    return url


def cors_origin(value: object, field_name: str, line: int | None = None) -> str:
    """One browser origin (`scheme://host[:port]`, lower-cased), or `*` for any origin."""
    if not isinstance(value, str):
        raise ConfigError(field_name, f"expected an origin string, got {value!r}", line)
    origin = value.strip().rstrip("/").lower()
    if origin == "*":
        return origin
    parts = urlsplit(origin)
    try:
        parts.port  # noqa: B018 -- parsing the port is the check
    except ValueError:
        raise ConfigError(field_name, f"the port of {value!r} is not valid", line) from None
    if (
        parts.scheme not in ("http", "https")
        or not parts.hostname
        or parts.path
        or parts.query
        or parts.fragment
        or parts.username is not None
        or any(c.isspace() for c in origin)
    ):
        raise ConfigError(
            field_name, f"expected an origin like https://app.example.com, got {value!r}", line
        )
    return origin


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PATH_PREFIX = re.compile(r"(/[A-Za-z0-9._~-]+)+")

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

    unknown = sorted(map(str, set(raw) - ROUTE_KEYS))
    if unknown:
        raise ConfigError(f"{prefix}.{unknown[0]}", "unknown field", line(unknown[0]))
    if "upstream" not in raw:
        raise ConfigError(f"{prefix}.upstream", "is required", line(""))
    match = raw.get("match") or {}
    if not isinstance(match, Mapping):
        raise ConfigError(
            f"{prefix}.match", "expected a mapping with model or path_prefix", line("match")
        )
    extra = sorted(map(str, set(match) - {"model", "path_prefix"}))
    if extra:
        raise ConfigError(
            f"{prefix}.match.{extra[0]}",
            "unknown field (expected model or path_prefix)",
            lines.get(f"match.{extra[0]}") or line("match"),
        )
    path_prefix = match.get("path_prefix")
    if path_prefix is not None:
        where = lines.get("match.path_prefix") or line("match")
        path_prefix = "/" + str(path_prefix).strip("/")
        if path_prefix == "/" or path_prefix.endswith("/v1") or "/v1/" in path_prefix:
            raise ConfigError(
                f"{prefix}.match.path_prefix", "must be like /kimi (without /v1)", where
            )
        if not _PATH_PREFIX.fullmatch(path_prefix):
            raise ConfigError(
                f"{prefix}.match.path_prefix",
                f"expected path segments of letters, digits, '.', '_', '~' or '-', "
                f"got {match['path_prefix']!r}",
                where,
            )
    key_env = raw.get("upstream_key_env")
    if key_env is not None and not _ENV_NAME.fullmatch(str(key_env)):
        # The value may be a pasted key: never echo it.
        raise ConfigError(
            f"{prefix}.upstream_key_env",
            "expected the name of an environment variable (letters, digits and _), "
            "not the key itself",
            line("upstream_key_env"),
        )
    return replace(
        defaults,
        name=str(raw.get("name") or f"route{index}"),
        upstream=upstream_base_url(raw["upstream"], f"{prefix}.upstream", line("upstream")),
        model_glob=str(match["model"]) if "model" in match else None,
        path_prefix=path_prefix,
        upstream_key_env=str(key_env) if key_env else None,
        ids=parse_choice(raw.get("ids", defaults.ids), IDS_POLICIES, f"{prefix}.ids", line("ids")),  # type: ignore[arg-type]
        dialect=parse_choice(
            raw.get("dialect", defaults.dialect), DIALECTS, f"{prefix}.dialect", line("dialect")
        ),  # type: ignore[arg-type]
        replay_guard=parse_bool(
            raw.get("replay_guard", defaults.replay_guard),
            f"{prefix}.replay_guard",
            line("replay_guard"),
        ),
        max_followups=parse_number(
            raw.get("max_followups", defaults.max_followups),
            f"{prefix}.max_followups",
            line("max_followups"),
            integer=True,
        ),
        text_tool_calls=parse_choice(
            raw.get("text_tool_calls", defaults.text_tool_calls),
            ("auto", "off"),
            f"{prefix}.text_tool_calls",
            line("text_tool_calls"),
        ),  # type: ignore[arg-type]
        connect_timeout=parse_number(
            raw.get("connect_timeout", defaults.connect_timeout),
            f"{prefix}.connect_timeout",
            line("connect_timeout"),
            positive=True,
        ),
        read_timeout=parse_number(
            raw.get("read_timeout", defaults.read_timeout),
            f"{prefix}.read_timeout",
            line("read_timeout"),
            positive=True,
        ),
    )


TOP_LEVEL_KEYS = frozenset(
    {"routes", "host", "port", "log_level", "max_body_bytes", "cors_origins", "drain_timeout"}
)


def _key_lines(node: yaml.MappingNode, where: str) -> dict[str, int]:
    """Each key's line in a YAML mapping; a key given twice is a mistake (YAML keeps the last)."""
    lines: dict[str, int] = {}
    for key_node, _ in node.value:
        key = str(key_node.value)
        line = key_node.start_mark.line + 1
        if key in lines:
            field_name = f"{where}.{key}" if where else key
            raise ConfigError(
                field_name, f"given twice (first on line {lines[key]}); YAML keeps only one", line
            )
        lines[key] = line
    return lines


def _top_level(data: Mapping[str, Any], lines: Mapping[str, int]) -> dict[str, Any]:
    """The top-level settings, checked and normalized (`routes` excluded)."""
    top: dict[str, Any] = {}
    for key, value in data.items():
        line = lines.get(str(key))
        if key == "routes":
            continue
        if key == "host":
            if not isinstance(value, str) or not value.strip() or any(c.isspace() for c in value):
                raise ConfigError("host", f"expected an address to listen on, got {value!r}", line)
            top[key] = value.strip()
        elif key == "port":
            port = parse_number(value, "port", line, integer=True)
            if port > 65535:
                raise ConfigError("port", f"expected 0 to 65535, got {value!r}", line)
            top[key] = port
        elif key == "log_level":
            top[key] = parse_choice(value, LOG_LEVELS, "log_level", line)
        elif key == "max_body_bytes":
            top[key] = parse_number(value, "max_body_bytes", line, integer=True, positive=True)
        elif key == "drain_timeout":
            top[key] = float(parse_number(value, "drain_timeout", line))
        elif key == "cors_origins":
            items = value.split(",") if isinstance(value, str) else value
            if not isinstance(items, list):
                raise ConfigError("cors_origins", "expected a list of origins", line)
            top[key] = [cors_origin(item, "cors_origins", line) for item in items]
    return top


def load_yaml_routes(text: str, defaults: Route) -> tuple[dict[str, Any], tuple[Route, ...]]:
    """Parse a YAML config: returns its top-level settings (checked) and its routes."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        context = getattr(exc, "context", None)
        message = f"{problem} ({context})" if context else str(problem)
        raise ConfigError("yaml", message, mark.line + 1 if mark else None) from None
    if root is None:
        return {}, ()
    data = yaml.safe_load(text)
    if not isinstance(data, dict) or not isinstance(root, yaml.MappingNode):
        raise ConfigError("(top level)", "expected a mapping with a routes list", 1)
    top_lines = _key_lines(root, "")
    for key, line in top_lines.items():
        if key not in TOP_LEVEL_KEYS:
            raise ConfigError(
                key, f"unknown field (expected one of {', '.join(sorted(TOP_LEVEL_KEYS))})", line
            )
    top = _top_level(data, top_lines)
    routes_node = next((v for k, v in root.value if k.value == "routes"), None)
    raw_routes = data.get("routes") or []
    if not isinstance(raw_routes, list) or (
        routes_node is not None
        and not isinstance(routes_node, yaml.SequenceNode)
        and data.get("routes") is not None
    ):
        routes_line = routes_node.start_mark.line + 1 if routes_node is not None else None
        raise ConfigError("routes", "expected a list of routes", routes_line)
    routes: list[Route] = []
    names: dict[str, int] = {}
    prefixes: dict[str, int] = {}
    for index, raw in enumerate(raw_routes):
        assert isinstance(routes_node, yaml.SequenceNode)
        node = routes_node.value[index]
        lines: dict[str, int] = {"": node.start_mark.line + 1}
        if not isinstance(raw, Mapping) or not isinstance(node, yaml.MappingNode):
            raise ConfigError(f"routes[{index}]", "expected a mapping", lines[""])
        lines.update(_key_lines(node, f"routes[{index}]"))
        match_node = next((v for k, v in node.value if k.value == "match"), None)
        if isinstance(match_node, yaml.MappingNode):
            match_lines = _key_lines(match_node, f"routes[{index}].match")
            lines.update({f"match.{key}": line for key, line in match_lines.items()})
        route = route_from_mapping(raw, index, lines, defaults)
        name_line = lines.get("name") or lines[""]
        if route.name in names:
            raise ConfigError(
                f"routes[{index}].name",
                f"{route.name!r} is already the name of the route on line {names[route.name]}",
                name_line,
            )
        names[route.name] = name_line
        if route.path_prefix is not None:
            where = lines.get("match.path_prefix") or lines[""]
            if route.path_prefix in prefixes:
                raise ConfigError(
                    f"routes[{index}].match.path_prefix",
                    f"{route.path_prefix} is already matched by the route on line "
                    f"{prefixes[route.path_prefix]}",
                    where,
                )
            prefixes[route.path_prefix] = where
        routes.append(route)
    return top, tuple(routes)
