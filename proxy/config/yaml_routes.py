"""A YAML config file: its top-level settings and its routes, every mistake named by its field
and line (`check-config` prints them as `FILE:LINE: FIELD: message`).

The file is parsed once: composed into nodes (which carry the lines), then constructed into
Python values from those nodes. Which keys are allowed, and how each value is checked, comes
from the declaration of the settings (proxy.config.options).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeAlias

from proxy.config.options import OPTIONS, Option
from proxy.config.settings import Route
from proxy.config.values import ConfigError

if TYPE_CHECKING:
    # Imported where a file is parsed (`_parse`): PyYAML takes about 20 ms to import, and
    # `--help`, `doctor` and a `serve` without a file never need it.
    import yaml

TOP_LEVEL: Mapping[str, Option] = {
    o.name: o for o in OPTIONS if "yaml" in o.sources and o.scope == "global"
}
PER_ROUTE: Mapping[str, Option] = {
    o.name: o for o in OPTIONS if "yaml" in o.sources and o.scope == "route"
}
TOP_LEVEL_KEYS = frozenset({"routes", *TOP_LEVEL})
# `name` and `match` say which route this is; every other key is a setting.
ROUTE_KEYS = frozenset({"name", "match", *PER_ROUTE})
MATCH_KEYS = ("model", "path_prefix")

_PATH_PREFIX = re.compile(r"(/[A-Za-z0-9._~-]+)+")

# A mapping's keys as written: name, line and value node. Taken before construction, which
# folds merge keys (`<<: *base`) into the nodes themselves.
Written: TypeAlias = "list[tuple[str, int, yaml.Node]]"


def _is(node: object, kind: str) -> bool:
    """Whether a YAML node is a "mapping", "sequence" or "scalar" (PyYAML's `Node.id`)."""
    return getattr(node, "id", None) == kind


def _written(root: yaml.Node) -> dict[int, Written]:
    """Every mapping node's keys as written, by node id (each shared node visited once)."""
    seen: dict[int, Written] = {}
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        if _is(node, "mapping"):
            seen[id(node)] = [(str(k.value), k.start_mark.line + 1, v) for k, v in node.value]
            stack.extend(v for _, v in node.value)
        elif _is(node, "sequence"):
            seen[id(node)] = []
            stack.extend(node.value)
    return seen


def _parse(text: str) -> tuple[yaml.Node | None, Any, dict[int, Written]]:
    import yaml

    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return None, None, {}
        written = _written(root)
        return root, loader.construct_document(root), written
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        context = getattr(exc, "context", None)
        message = f"{problem} ({context})" if context else str(problem)
        raise ConfigError("yaml", message, mark.line + 1 if mark else None) from None
    finally:
        loader.dispose()


def _key_lines(keys: Written, where: str) -> dict[str, int]:
    """Each key's line; a key given twice is a mistake (YAML would keep only the last)."""
    lines: dict[str, int] = {}
    for key, line, _ in keys:
        if key in lines:
            field_name = f"{where}.{key}" if where else key
            raise ConfigError(
                field_name, f"given twice (first on line {lines[key]}); YAML keeps only one", line
            )
        lines[key] = line
    return lines


def _value_node(keys: Written, key: str) -> yaml.Node | None:
    return next((node for name, _, node in keys if name == key), None)


def _match(match: object, prefix: str, lines: Mapping[str, int]) -> tuple[str | None, str | None]:
    """A route's `match`: its model glob and path prefix."""
    line = lines.get("match") or lines.get("")
    if not isinstance(match, Mapping):
        raise ConfigError(f"{prefix}.match", "expected a mapping with model or path_prefix", line)
    extra = sorted(map(str, set(match) - set(MATCH_KEYS)))
    if extra:
        raise ConfigError(
            f"{prefix}.match.{extra[0]}",
            "unknown field (expected model or path_prefix)",
            lines.get(f"match.{extra[0]}") or line,
        )
    path_prefix = match.get("path_prefix")
    if path_prefix is not None:
        where = lines.get("match.path_prefix") or line
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
    return (str(match["model"]) if "model" in match else None), path_prefix


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
    model_glob, path_prefix = _match(raw.get("match") or {}, prefix, lines)
    settings = {
        name: option.kind.parse(raw[name], f"{prefix}.{name}", line(name))
        for name, option in PER_ROUTE.items()
        if name in raw
    }
    return replace(
        defaults,
        name=str(raw.get("name") or f"route{index}"),
        model_glob=model_glob,
        path_prefix=path_prefix,
        **settings,
    )


def _route_lines(written: dict[int, Written], node: yaml.Node, index: int) -> dict[str, int]:
    """A route's key lines, its match's as `match.KEY`, and its own first line as ``."""
    keys = written[id(node)]
    lines = {"": node.start_mark.line + 1, **_key_lines(keys, f"routes[{index}]")}
    match_node = _value_node(keys, "match")
    if _is(match_node, "mapping"):
        match_lines = _key_lines(written[id(match_node)], f"routes[{index}].match")
        lines.update({f"match.{key}": line for key, line in match_lines.items()})
    return lines


def _routes(
    raw_routes: list[Any],
    routes_node: yaml.Node | None,
    written: dict[int, Written],
    defaults: Route,
) -> tuple[Route, ...]:
    assert routes_node is not None and _is(routes_node, "sequence")
    routes: list[Route] = []
    names: dict[str, int] = {}
    prefixes: dict[str, int] = {}
    for index, raw in enumerate(raw_routes):
        node = routes_node.value[index]
        start = node.start_mark.line + 1
        if not isinstance(raw, Mapping) or not _is(node, "mapping"):
            raise ConfigError(f"routes[{index}]", "expected a mapping", start)
        lines = _route_lines(written, node, index)
        route = route_from_mapping(raw, index, lines, defaults)
        name_line = lines.get("name") or start
        if route.name in names:
            raise ConfigError(
                f"routes[{index}].name",
                f"{route.name!r} is already the name of the route on line {names[route.name]}",
                name_line,
            )
        names[route.name] = name_line
        if route.path_prefix is not None:
            where = lines.get("match.path_prefix") or start
            if route.path_prefix in prefixes:
                raise ConfigError(
                    f"routes[{index}].match.path_prefix",
                    f"{route.path_prefix} is already matched by the route on line "
                    f"{prefixes[route.path_prefix]}",
                    where,
                )
            prefixes[route.path_prefix] = where
        routes.append(route)
    return tuple(routes)


def load_yaml_routes(text: str, defaults: Route) -> tuple[dict[str, Any], tuple[Route, ...]]:
    """Parse a YAML config: returns its top-level settings (checked) and its routes."""
    root, data, written = _parse(text)
    if root is None:
        return {}, ()
    if not isinstance(data, dict) or not _is(root, "mapping"):
        raise ConfigError("(top level)", "expected a mapping with a routes list", 1)
    root_keys = written[id(root)]
    top_lines = _key_lines(root_keys, "")
    for key, line in top_lines.items():
        if key not in TOP_LEVEL_KEYS:
            raise ConfigError(
                key, f"unknown field (expected one of {', '.join(sorted(TOP_LEVEL_KEYS))})", line
            )
    top = {
        key: TOP_LEVEL[key].kind.parse(value, key, top_lines.get(key))
        for key, value in data.items()
        if key in TOP_LEVEL
    }
    raw_routes, routes_node = _routes_list(data, root_keys)
    if not raw_routes:
        return top, ()
    return top, _routes(raw_routes, routes_node, written, defaults)


def _routes_list(data: dict[Any, Any], root_keys: Written) -> tuple[list[Any], yaml.Node | None]:
    """The `routes` value and its node; anything but a list (or nothing) is a mistake."""
    routes_node = _value_node(root_keys, "routes")
    raw_routes = data.get("routes") or []
    if not isinstance(raw_routes, list) or (
        routes_node is not None
        and not _is(routes_node, "sequence")
        and data.get("routes") is not None
    ):
        routes_line = routes_node.start_mark.line + 1 if routes_node is not None else None
        raise ConfigError("routes", "expected a list of routes", routes_line)
    return raw_routes, routes_node
