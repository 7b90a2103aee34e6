"""Settings: one frozen object built once at start-up from flags, environment and YAML.

Precedence (highest first): command-line flag, `TOOLCALL_PROXY_<NAME>` environment variable,
YAML file, built-in default. A per-route setting given as a flag or variable is the default
of every route, and a route's own YAML key wins over it. Every setting is declared once, in
proxy.config.options; nothing here is mutated after start-up, and handlers only read the result.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from proxy.config.options import OPTION, OPTIONS, add_flag
from proxy.config.settings import Route, Settings
from proxy.config.values import ConfigError, header_value_problem, upstream_base_url
from proxy.config.yaml_routes import load_yaml_routes

# Where the built-in simulated provider is mounted when no upstream is configured.
SIMULATOR_MOUNT = "/_simulator"
DEFAULT_HOST: str = OPTION["host"].default
DEFAULT_PORT: int = OPTION["port"].default
# Carries the `serve` flags to worker processes when --workers > 1 (they resolve the same
# settings from them and the environment they inherit).
FLAGS_ENV = "TOOLCALL_PROXY__SERVE_FLAGS"

_SETTINGS_FIELDS = frozenset(f.name for f in fields(Settings))


def read_config_file(path: str) -> str:
    """A config file's text; a file that cannot be read is a ConfigError naming the path."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        reason = str(exc.strerror)
    except UnicodeDecodeError:
        reason = "not UTF-8 text"
    raise ConfigError(path, f"cannot read: {reason}")


def add_serve_flags(parser: argparse.ArgumentParser) -> None:
    for option in OPTIONS:
        if option.flag:
            add_flag(parser, option)


def given_values(
    flags: Mapping[str, object], environ: Mapping[str, str] = os.environ
) -> dict[str, Any]:
    """Every setting given as a flag or else as a (non-empty) variable, checked. An empty
    variable counts as unset, but for a kind that refuses it (proxy keys: SPEC §6)."""
    given: dict[str, Any] = {}
    for option in OPTIONS:
        raw = flags.get(option.name) if option.flag else None
        if raw is None and "env" in option.sources:
            raw = environ.get(option.env)
            if raw == "" and option.kind.empty_is_unset:
                raw = None
        if raw is not None:
            given[option.name] = option.kind.parse(raw, option.label, None)
    return given


def settings_from_flags(flags: Mapping[str, object]) -> Settings:
    """Resolve `serve` flags, the environment and the YAML file into one Settings object."""
    try:
        return _resolve(given_values(flags))
    except (TypeError, ValueError) as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError("arguments", str(exc)) from None


def settings_from_argv(argv: Sequence[str]) -> Settings:
    """The settings `toolcall-proxy serve ARGV` would run with."""
    parser = argparse.ArgumentParser(prog="toolcall-proxy serve")
    add_serve_flags(parser)
    return settings_from_flags(vars(parser.parse_args(list(argv))))


def _resolve(given: Mapping[str, Any]) -> Settings:
    route_defaults = {
        o.name: given[o.name]
        for o in OPTIONS
        if o.scope == "route" and o.name != "upstream" and o.name in given
    }
    defaults = replace(Route(name="default", upstream=""), **route_defaults)
    top: dict[str, Any] = {}
    routes: tuple[Route, ...] = ()
    if "config" in given:
        try:
            text = read_config_file(given["config"])
        except ConfigError as exc:
            raise ConfigError(OPTION["config"].label, f"{exc.field_name}: {exc.detail}") from None
        top, routes = load_yaml_routes(text, defaults)

    def value(name: str) -> Any:
        return given[name] if name in given else top.get(name, OPTION[name].default)

    routes, simulated = _routes(
        routes, given.get("upstream"), defaults, value("host"), value("port")
    )
    top_level = {o.field: value(o.name) for o in OPTIONS if o.field in _SETTINGS_FIELDS}
    check_upstream_keys(routes)
    return Settings(routes=routes, simulated=simulated, **top_level)


def check_upstream_keys(routes: Sequence[Route], environ: Mapping[str, str] = os.environ) -> None:
    """SPEC §6: a route's upstream key goes into a header of every request it sends; one a
    header cannot carry (a line break, a trailing newline from a file included, another
    control character, a character outside Latin-1) failed every request, as a 500 or a
    misleading 502. It is refused here, at start-up, naming the variable, never the key."""
    for route in routes:
        name = route.upstream_key_env
        problem = header_value_problem(environ.get(name) or "") if name else None
        if problem is not None:
            raise ConfigError(f"{name} (the upstream key of route {route.name})", problem)


def _routes(
    routes: tuple[Route, ...], upstream: str | None, defaults: Route, host: str, port: int
) -> tuple[tuple[Route, ...], bool]:
    """The routes with the `--upstream` one last, or the simulator's when there is none."""
    if upstream is not None:
        return (*routes, replace(defaults, name="default", upstream=upstream)), False
    if routes:
        return routes, False
    if port == 0:
        # The simulator is served by this process and its route needs the real port.
        raise ConfigError(OPTION["port"].label, "0 (any free port) needs an upstream")
    loop_host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    upstream = f"http://{loop_host}:{port}{SIMULATOR_MOUNT}/v1"
    return (replace(defaults, name="simulator", upstream=upstream),), True


__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "FLAGS_ENV",
    "SIMULATOR_MOUNT",
    "ConfigError",
    "Route",
    "Settings",
    "load_yaml_routes",
    "read_config_file",
    "settings_from_argv",
    "settings_from_flags",
    "upstream_base_url",
]
