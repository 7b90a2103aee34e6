"""Command line: `toolcall-proxy serve | simulate | sanitize | check-config | doctor`.

Every `serve` flag can also be given as `TOOLCALL_PROXY_<FLAG>` (dashes as underscores); a flag
on the command line wins over the environment, which wins over the YAML file. The flags come
from the declaration of the settings (proxy.config.options); the subcommands from `COMMANDS` below.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, TypeAlias

from proxy import __version__
from proxy.config.load import (
    DEFAULT_HOST,
    FLAGS_ENV,
    ConfigError,
    Route,
    add_serve_flags,
    load_yaml_routes,
    read_config_file,
    settings_from_argv,
    settings_from_flags,
)
from proxy.config.options import OPTION, OPTIONS, add_flag
from proxy.doctor.cli import add_doctor_parser, run_doctor

# uvicorn's exit status when the server could not start (port in use, app failed to load).
STARTUP_FAILURE = 3

# Settings that were removed, by their environment variable, and why. A flag or YAML key that
# is gone fails (argparse and the YAML checks refuse what they do not know), but an unknown
# variable is not read at all: one of these still set in a deployment is named at start-up
# rather than ignored in silence.
RETIRED_VARIABLES = {
    "TOOLCALL_PROXY_HTTP": "--http was removed: the server runs uvicorn's own httptools protocol",
}

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


def run_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from proxy.ops.observability import configure_logging, uvicorn_log_config
    from proxy.ops.startup import startup_lines
    from proxy.server.app import create_app
    from proxy.server.draining import DrainingServer, OpenAIErrorHttpProtocol, graceful_timeout

    for name, why in RETIRED_VARIABLES.items():
        if os.environ.get(name):
            print(f"toolcall-proxy: {name} is not read ({why})", file=sys.stderr)
    flags = {o.name: getattr(args, o.name) for o in OPTIONS if o.flag}
    settings = settings_from_flags(flags)
    configure_logging(settings.log_level)
    for line in startup_lines(settings):
        print(line, file=sys.stderr)
    common: dict[str, Any] = {
        "host": settings.host,
        "port": settings.port,
        "loop": "uvloop",
        # uvicorn's httptools protocol, malformed heads answered in the SPEC §6 shape
        "http": OpenAIErrorHttpProtocol,
        "log_level": settings.log_level if settings.log_level != "debug" else "info",
        "access_log": False,
        "log_config": uvicorn_log_config(),
        # The app never reads the client's address or scheme, so uvicorn's X-Forwarded-*
        # middleware (on by default) would only add a coroutine and a header walk to every
        # request; nor does a gateway name its server in every response.
        "proxy_headers": False,
        "server_header": False,
        # SPEC §6 bounds on what a client holds: an idle connection (the protocol also closes
        # one that never sends a request), and open connections or requests per process
        # (past it uvicorn answers 503). The head and body timeouts are the protocol's.
        "timeout_keep_alive": settings.keep_alive_timeout,
        "limit_concurrency": settings.max_connections,
    }
    if settings.workers > 1:
        # Each worker runs uvicorn's stock server: it cancels what is open at the drain timeout,
        # and the app ends those requests with the shutting_down error (proxy.server.draining).
        os.environ[FLAGS_ENV] = json.dumps(flags)
        uvicorn.run(
            "proxy.server.app:app_from_environment",
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


def simulate_arguments(parser: argparse.ArgumentParser) -> None:
    add_flag(parser, OPTION["host"], default=DEFAULT_HOST)
    add_flag(parser, OPTION["port"], default=9000)


def run_simulate(args: argparse.Namespace) -> int:
    import uvicorn

    from proxy.simulator import create_simulator_app

    print(
        f"toolcall-proxy: simulated provider on http://{args.host}:{args.port}/v1 "
        f"(API docs at /docs)",
        file=sys.stderr,
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


def sanitize_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("stream", nargs="?", default="-", help="captured SSE file (default stdin)")
    parser.add_argument("--request", help="the request JSON the stream answered")
    parser.add_argument("--explain", action="store_true", help="one line per decision on stderr")
    parser.add_argument(
        "--surface",
        choices=("auto", "chat", "anthropic", "responses"),
        default="auto",
        help="the capture's API: chat completions, Anthropic Messages or OpenAI Responses"
        " (default: told by it)",
    )
    for name in ("ids", "dialect", "text_tool_calls"):
        add_flag(parser, OPTION[name], default=OPTION[name].default)


def run_sanitize(args: argparse.Namespace) -> int:
    from proxy.cli.sanitize import run_sanitize

    return run_sanitize(args)


def check_config_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file")


def run_check_config(args: argparse.Namespace) -> int:
    """Exit 0 and list the routes, or name the file, line and field of the first mistake."""
    try:
        text = read_config_file(args.file)
    except ConfigError as exc:
        print(f"{exc.field_name}: {exc.detail}", file=sys.stderr)
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


Subcommands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


class Command(NamedTuple):
    name: str
    run: Callable[[argparse.Namespace], int]
    arguments: Callable[[argparse.ArgumentParser], None] | None = None
    help: str = ""
    description: str | None = None  # under the usage line of this command's --help
    epilog: str | None = None  # after its options
    # For a command that builds its own parser (named `name`) on the subcommands, instead
    # of `arguments`, `help`, `description` and `epilog`.
    add_parser: Callable[[Subcommands], None] | None = None


SERVE = """\
Run the proxy. Every flag is also an environment variable TOOLCALL_PROXY_<FLAG>, dashes as
underscores (TOOLCALL_PROXY_READ_TIMEOUT). A flag wins over the environment, which wins over
the YAML file. Proxy keys are read only from TOOLCALL_PROXY_KEYS.
"""

# The subcommands, in the order --help lists them. A new one is one line here.
COMMANDS: tuple[Command, ...] = (
    Command("serve", run_serve, add_serve_flags, "run the proxy", SERVE, EXAMPLES),
    Command("simulate", run_simulate, simulate_arguments, "run the simulated provider on its own"),
    Command("sanitize", run_sanitize, sanitize_arguments, "sanitize a captured SSE stream offline"),
    Command(
        "check-config", run_check_config, check_config_arguments, "validate a YAML routes file"
    ),
    Command("doctor", run_doctor, add_parser=add_doctor_parser),
)


def _add(sub: Subcommands, command: Command) -> None:
    if command.add_parser is not None:
        command.add_parser(sub)
    else:
        assert command.arguments is not None, command.name
        raw = command.description is not None or command.epilog is not None
        parser = sub.add_parser(
            command.name,
            help=command.help,
            description=command.description,
            epilog=command.epilog,
            formatter_class=argparse.RawDescriptionHelpFormatter if raw else argparse.HelpFormatter,
        )
        command.arguments(parser)
    sub.choices[command.name].set_defaults(run=command.run)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="toolcall-proxy",
        description="OpenAI-compatible streaming proxy that makes tool calls safe with any model.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"toolcall-proxy {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        _add(sub, command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        return int(args.run(args))
    except ConfigError as exc:
        print(f"toolcall-proxy: configuration error: {exc}", file=sys.stderr)
        return 2


# settings_from_argv: what `serve ARGV` would run with (for tests and the benchmark's variants).
__all__ = ["COMMANDS", "Command", "build_parser", "main", "settings_from_argv"]
