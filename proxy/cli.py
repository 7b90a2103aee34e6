"""Command line: `toolcall-proxy serve | simulate | sanitize | check-config | doctor`.

Every `serve` flag can also be given as `TOOLCALL_PROXY_<FLAG>` (dashes as underscores); a flag
on the command line wins over the environment, which wins over the YAML file.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from proxy import __version__
from proxy.config import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_DRAIN_TIMEOUT,
    DEFAULT_HOST,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_FOLLOWUPS,
    DEFAULT_PORT,
    DEFAULT_READ_TIMEOUT,
    DIALECTS,
    IDS_POLICIES,
    LOG_LEVELS,
    SIMULATOR_MOUNT,
    ConfigError,
    Route,
    Settings,
    cors_origin,
    load_yaml_routes,
    parse_bool,
    parse_choice,
    parse_number,
    upstream_base_url,
)
from proxy.doctor.cli import add_doctor_parser, run_doctor

ENV_PREFIX = "TOOLCALL_PROXY_"
# uvicorn's exit status when the server could not start (port in use, app failed to load).
STARTUP_FAILURE = 3
# Carries the resolved `serve` arguments to worker processes when --workers > 1.
ARGV_ENV = "TOOLCALL_PROXY__SERVE_ARGV"

EXAMPLES = """\
examples:
  toolcall-proxy serve                                   # built-in simulated provider
  toolcall-proxy serve --upstream http://127.0.0.1:8000/v1 --port 8787
  TOOLCALL_PROXY_UPSTREAM=https://api.moonshot.ai/v1 toolcall-proxy serve --upstream-key-env MOONSHOT_API_KEY
  toolcall-proxy serve --config routes.yaml --workers 2
  toolcall-proxy simulate --port 9000
  toolcall-proxy sanitize capture.sse --request request.json --explain
  toolcall-proxy check-config routes.yaml
  toolcall-proxy doctor --upstream https://api.moonshot.ai/v1 --model kimi-k2 --upstream-key-env MOONSHOT_API_KEY
"""


def _env(name: str) -> str | None:
    return os.environ.get(ENV_PREFIX + name.upper().replace("-", "_"))


def _add_serve_flags(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--upstream", help="upstream base URL, e.g. http://127.0.0.1:8000/v1 (default: simulator)")
    add("--upstream-key-env", help="name of the environment variable holding the upstream key")
    add("--host", help=f"address to listen on (default {DEFAULT_HOST})")
    add("--port", type=int, help=f"port to listen on (default {DEFAULT_PORT})")
    add("--config", help="YAML file with routes")
    add("--connect-timeout", type=float, help=f"seconds (default {DEFAULT_CONNECT_TIMEOUT:g})")
    add(
        "--read-timeout",
        type=float,
        help=f"seconds of upstream silence (default {DEFAULT_READ_TIMEOUT:g})",
    )
    add("--ids", choices=IDS_POLICIES, help="client id policy (default auto)")
    add("--dialect", choices=DIALECTS, help="upstream id dialect (default auto)")
    add("--replay-guard", choices=("on", "off"), help="answer replays (default on)")
    add(
        "--max-followups",
        type=int,
        help=f"follow-up rounds per request (default {DEFAULT_MAX_FOLLOWUPS})",
    )
    add(
        "--text-tool-calls",
        choices=("auto", "off"),
        help="recover calls leaked into text (default auto)",
    )
    add("--max-body-bytes", type=int, help=f"request body limit (default {DEFAULT_MAX_BODY_BYTES})")
    add("--workers", type=int, help="uvicorn worker processes (default 1; no shared state needed)")
    add(
        "--drain-timeout",
        type=float,
        help="seconds open streams may finish on shutdown (default 30)",
    )
    add("--log-level", choices=("debug", "info", "warning", "error"), help="default info")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="toolcall-proxy",
        description="OpenAI-compatible streaming proxy that makes tool calls safe with any model.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"toolcall-proxy {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser(
        "serve",
        help="run the proxy",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_serve_flags(serve)
    simulate = sub.add_parser("simulate", help="run the simulated provider on its own")
    simulate.add_argument("--host", default=DEFAULT_HOST)
    simulate.add_argument("--port", type=int, default=9000)
    sanitize = sub.add_parser("sanitize", help="sanitize a captured SSE stream offline")
    sanitize.add_argument(
        "stream", nargs="?", default="-", help="captured SSE file (default stdin)"
    )
    sanitize.add_argument("--request", help="the request JSON the stream answered")
    sanitize.add_argument("--explain", action="store_true", help="one line per decision on stderr")
    sanitize.add_argument("--ids", choices=IDS_POLICIES, default="auto")
    sanitize.add_argument("--dialect", choices=DIALECTS, default="auto")
    sanitize.add_argument("--text-tool-calls", choices=("auto", "off"), default="auto")
    check = sub.add_parser("check-config", help="validate a YAML routes file")
    check.add_argument("file")
    add_doctor_parser(sub)
    return parser


def _pick(args: argparse.Namespace, name: str, yaml_value: object = None) -> object:
    value = getattr(args, name.replace("-", "_"), None)
    if value is not None:
        return value
    env = _env(name)
    if env is not None and env != "":
        return env
    return yaml_value


def build_settings(args: argparse.Namespace) -> Settings:
    """Resolve flags, environment and YAML into one frozen Settings object."""
    try:
        return _build_settings(args)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError("arguments", str(exc)) from None


def _label(flag: str) -> str:
    """How a flag is named in an error: both its spellings, so either source can be fixed."""
    return f"--{flag} ({ENV_PREFIX}{flag.upper().replace('-', '_')})"


def _flag_number(args: argparse.Namespace, flag: str, **checks: bool) -> Any:
    value = _pick(args, flag)
    return None if value is None else parse_number(value, _label(flag), None, **checks)


def _build_settings(args: argparse.Namespace) -> Settings:
    defaults = Route(name="default", upstream="")
    overrides: dict[str, object] = {}
    for flag, key in (("connect-timeout", "connect_timeout"), ("read-timeout", "read_timeout")):
        seconds = _flag_number(args, flag, positive=True)
        if seconds is not None:
            overrides[key] = float(seconds)
    for flag, key, allowed in (
        ("ids", "ids", IDS_POLICIES),
        ("dialect", "dialect", DIALECTS),
        ("text-tool-calls", "text_tool_calls", ("auto", "off")),
    ):
        value = _pick(args, flag)
        if value is not None:
            overrides[key] = parse_choice(value, allowed, _label(flag), None)
    guard = _pick(args, "replay-guard")
    if guard is not None:
        overrides["replay_guard"] = parse_bool(guard, _label("replay-guard"))
    followups = _flag_number(args, "max-followups", integer=True)
    if followups is not None:
        overrides["max_followups"] = followups
    key_env = _pick(args, "upstream-key-env")
    if key_env:
        overrides["upstream_key_env"] = str(key_env)
    defaults = replace(defaults, **overrides)  # type: ignore[arg-type]

    top: dict[str, Any] = {}
    routes: tuple[Route, ...] = ()
    config = _pick(args, "config")
    if config:
        try:
            text = Path(str(config)).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(_label("config"), f"cannot read {config}: {exc.strerror}") from None
        top, routes = load_yaml_routes(text, defaults)

    def setting(flag: str, key: str, default: Any, **checks: bool) -> Any:
        """Flag, then environment (both checked here), then the YAML value (checked on load)."""
        value = _flag_number(args, flag, **checks)
        if value is not None:
            return value
        return top[key] if top.get(key) is not None else default

    host = str(_pick(args, "host") or top.get("host") or DEFAULT_HOST)
    port = setting("port", "port", DEFAULT_PORT, integer=True)
    if port > 65535:
        raise ConfigError(_label("port"), f"expected 0 to 65535, got {port}")
    upstream = _pick(args, "upstream")
    simulated = False
    if upstream:
        url = upstream_base_url(upstream, _label("upstream"))
        routes = (*routes, replace(defaults, name="default", upstream=url))
    elif not routes:
        simulated = True
        if port == 0:
            # The simulator is served by this process and its route needs the real port.
            raise ConfigError(_label("port"), "0 (any free port) needs an upstream")
        loop_host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
        routes = (
            replace(
                defaults,
                name="simulator",
                upstream=f"http://{loop_host}:{port}{SIMULATOR_MOUNT}/v1",
            ),
        )
    keys = tuple(
        k.strip() for k in (os.environ.get(ENV_PREFIX + "KEYS") or "").split(",") if k.strip()
    )
    # The environment wins over the YAML file, as for every other setting.
    cors_env = os.environ.get(ENV_PREFIX + "CORS_ORIGINS")
    if cors_env:
        cors_origins = tuple(
            cors_origin(o, ENV_PREFIX + "CORS_ORIGINS") for o in cors_env.split(",") if o.strip()
        )
    else:
        cors_origins = tuple(top.get("cors_origins") or ())
    log_level = _pick(args, "log-level")
    log_level = (
        parse_choice(log_level, LOG_LEVELS, _label("log-level"), None)
        if log_level is not None
        else top.get("log_level", "info")
    )
    workers = _flag_number(args, "workers", integer=True, positive=True) or 1
    return Settings(
        routes=routes,
        host=host,
        port=port,
        log_level=str(log_level),
        workers=workers,
        max_body_bytes=setting(
            "max-body-bytes",
            "max_body_bytes",
            DEFAULT_MAX_BODY_BYTES,
            integer=True,
            positive=True,
        ),
        proxy_keys=keys,
        cors_origins=cors_origins,
        drain_timeout=float(setting("drain-timeout", "drain_timeout", DEFAULT_DRAIN_TIMEOUT)),
        simulated=simulated,
    )


def settings_from_argv(argv: Sequence[str]) -> Settings:
    args = build_parser().parse_args(["serve", *argv])
    return build_settings(args)


def _serve(args: argparse.Namespace, argv: Sequence[str]) -> int:
    import uvicorn

    settings = build_settings(args)
    from proxy.app import create_app
    from proxy.observability import configure_logging, uvicorn_log_config
    from proxy.server import DrainingServer, OpenAIErrorHttpProtocol, graceful_timeout
    from proxy.startup import startup_lines

    configure_logging(settings.log_level)
    for line in startup_lines(settings):
        print(line, file=sys.stderr)
    common: dict[str, Any] = {
        "host": settings.host,
        "port": settings.port,
        "loop": "uvloop",
        "http": OpenAIErrorHttpProtocol,  # httptools, with malformed heads in the SPEC §6 shape
        "log_level": settings.log_level if settings.log_level != "debug" else "info",
        "access_log": False,
        "log_config": uvicorn_log_config(),
    }
    if settings.workers > 1:
        # Each worker runs uvicorn's stock server: it cancels what is open at the drain timeout,
        # and the app ends those requests with the shutting_down error (proxy.server).
        os.environ[ARGV_ENV] = json.dumps(list(argv))
        uvicorn.run(
            "proxy.app:app_from_environment",
            factory=True,
            workers=settings.workers,
            timeout_graceful_shutdown=math.ceil(settings.drain_timeout),
            **common,
        )
        return 0
    config = uvicorn.Config(
        create_app(settings),
        timeout_graceful_shutdown=graceful_timeout(settings.drain_timeout),
        **common,
    )
    server = DrainingServer(config)
    server.run()
    return 0 if server.started else STARTUP_FAILURE


def _simulate(args: argparse.Namespace) -> int:
    import uvicorn

    from proxy.simulator import create_simulator_app

    print(
        f"toolcall-proxy: simulated provider on http://{args.host}:{args.port}/v1", file=sys.stderr
    )
    uvicorn.run(
        create_simulator_app(),
        host=args.host,
        port=args.port,
        loop="uvloop",
        http="httptools",
        log_level="warning",
    )
    return 0


def _check_config(args: argparse.Namespace) -> int:
    """Exit 0 and list the routes, or name the file, line and field of the first mistake."""
    try:
        text = Path(args.file).read_text(encoding="utf-8")
    except OSError as exc:
        print(f"{args.file}: cannot read: {exc.strerror}", file=sys.stderr)
        return 2
    except UnicodeDecodeError:
        print(f"{args.file}: cannot read: not UTF-8 text", file=sys.stderr)
        return 2
    try:
        _, routes = load_yaml_routes(text, Route(name="default", upstream=""))
    except ConfigError as exc:
        where = f"{args.file}:{exc.line}" if exc.line else args.file
        print(f"{where}: {exc.field_name}: {exc.detail}", file=sys.stderr)
        return 1
    if not routes:
        print(f"{args.file}: routes: no routes defined", file=sys.stderr)
        return 1
    for route in routes:
        match = route.path_prefix or route.model_glob or "*"
        print(
            f"{route.name}: {match} -> {route.upstream} (ids={route.ids}, dialect={route.dialect})"
        )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    try:
        if args.command == "serve":
            return _serve(args, argv[argv.index("serve") + 1 :])
        if args.command == "simulate":
            return _simulate(args)
        if args.command == "sanitize":
            from proxy.sanitize_cli import run_sanitize

            return run_sanitize(args)
        if args.command == "doctor":
            return run_doctor(args)
        return _check_config(args)
    except ConfigError as exc:
        print(f"toolcall-proxy: configuration error: {exc}", file=sys.stderr)
        return 2
