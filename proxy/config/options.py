"""Every setting, declared once: its name, values, default, help and where it may be given.

From this table come the `serve` flags (`--read-timeout`), their environment variables
(`TOOLCALL_PROXY_READ_TIMEOUT`), the YAML keys a config file may hold (top level or per
route) with their checks, the defaults of `Route` and `Settings`, and the README's table
(`python -m proxy.config.options` prints it). Nothing else lists a setting's allowed values.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Literal, NamedTuple, get_args

from proxy.config.values import (
    Choice,
    Items,
    Keys,
    Kind,
    Number,
    Switch,
    Text,
    any_text,
    cors_origin,
    env_var_name,
    listen_address,
    secret,
    tool_glob,
    upstream_base_url,
)
from proxy.core.repeat import DEFAULT_EXEMPT

# The allowed values of the choice settings, as types (the rest of the code is checked
# against them) and, through get_args, as the values the kinds accept.
IdsPolicy = Literal["auto", "always", "collisions", "off"]
Dialect = Literal["auto", "passthrough", "kimi", "alnum9"]
TextToolCalls = Literal["auto", "off"]
RepeatGuard = Literal["on", "note", "off"]
LogLevel = Literal["debug", "info", "warning", "error"]
UpstreamApi = Literal["same", "chat_completions", "anthropic_messages", "responses"]
InspectMode = Literal["auto", "on", "off"]
UpstreamProfile = Literal[
    "auto",
    "generic",
    "openai",
    "anthropic",
    "deepseek",
    "moonshot",
    "zhipu",
    "minimax",
    "qwen",
    "gemini",
    "mistral",
    "vllm",
    "ollama",
    "llamacpp",
]

ENV_PREFIX = "TOOLCALL_PROXY_"
Source = Literal["flag", "env", "yaml"]
EVERYWHERE: frozenset[Source] = frozenset({"flag", "env", "yaml"})
NOT_IN_YAML: frozenset[Source] = frozenset({"flag", "env"})


class Option(NamedTuple):  # not a dataclass: cheaper to create on every start
    name: str  # the YAML key and the attribute; the flag and variable are spelled from it
    kind: Kind
    default: Any
    help: str
    # "route": a flag or variable sets every route's default and a route's YAML key wins;
    # "global": a flag beats the environment, which beats the YAML file's top level.
    scope: Literal["global", "route"] = "global"
    sources: frozenset[Source] = EVERYWHERE
    attr: str = ""  # the Settings field, when it is not `name`
    default_text: str = ""  # how the default reads in help, when not just the value

    @property
    def flag(self) -> str | None:
        return "--" + self.name.replace("_", "-") if "flag" in self.sources else None

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.upper()

    @property
    def field(self) -> str:
        return self.attr or self.name

    @property
    def label(self) -> str:
        """How an error names a value from the command line or the environment: both spellings,
        so either source can be fixed."""
        return f"{self.flag} ({self.env})" if self.flag else self.env

    @property
    def shown_default(self) -> str:
        if self.default_text:
            return self.default_text
        if isinstance(self.default, bool):
            return "on" if self.default else "off"
        if isinstance(self.default, float):
            return f"{self.default:g} s"
        return "none" if self.default in (None, ()) else str(self.default)


OPTIONS: tuple[Option, ...] = (
    Option(
        "upstream",
        Text(upstream_base_url, "URL"),
        None,
        "upstream base URL including its path, e.g. http://host:8000/v1",
        scope="route",
        default_text="simulated provider",
    ),
    Option(
        "upstream_key_env",
        Text(env_var_name, "NAME", nullable=True),
        None,
        "environment variable holding a key that replaces the client's Authorization",
        scope="route",
    ),
    Option(
        "upstream_api",
        Choice(get_args(UpstreamApi)),
        "same",
        "the API the upstream speaks. same: each client's own; chat_completions: Responses "
        "and Anthropic Messages clients are served over the upstream's Chat Completions "
        "(SPEC §9 bridges; see docs/bridges.md)",
        scope="route",
    ),
    Option("host", Text(listen_address, "H"), "127.0.0.1", "address to listen on"),
    Option("port", Number("P", integer=True, maximum=65535), 8787, "port to listen on"),
    Option(
        "config",
        Text(any_text, "FILE"),
        None,
        "YAML file with routes and top-level settings (check it with check-config)",
        sources=NOT_IN_YAML,
    ),
    Option(
        "connect_timeout",
        Number("S", positive=True),
        10.0,
        "no connection in this time: 502 upstream_unreachable",
        scope="route",
    ),
    Option(
        "read_timeout",
        Number("S", positive=True),
        300.0,
        "longest wait for the response head (504 upstream_timeout) and longest silence "
        "inside a stream (upstream_stream_error event)",
        scope="route",
    ),
    Option(
        "ids",
        Choice(get_args(IdsPolicy)),
        "auto",
        "ids the client receives. auto: keep native ids, rewrite counter-shaped, invalid, "
        "absent and colliding ones; always: rewrite every id; collisions: rewrite only absent "
        "and colliding ids; off: keep raw ids (an absent id still gets one, since a tool call "
        "needs an id)",
        scope="route",
    ),
    Option(
        "dialect",
        Choice(get_args(Dialect)),
        "auto",
        "ids the upstream sees in the history: kimi (functions.{name}:{k}), alnum9 (Mistral's "
        "9 alphanumerics), passthrough; auto picks kimi for model names containing kimi or "
        "moonshot",
        scope="route",
    ),
    Option(
        "replay_guard",
        Switch(),
        True,
        "answer true replays with a synthetic tool message; stop loops",
        scope="route",
    ),
    Option(
        "max_followups",
        Number("N", integer=True),
        2,
        "follow-up rounds per client request before the breaker trips",
        scope="route",
    ),
    Option(
        "repeat_guard",
        Choice(get_args(RepeatGuard)),
        "on",
        "the same call re-issued under fresh ids with the same result: on notes the last "
        "result after 3 identical rounds and answers a 5th identical call itself (a 6th stops "
        "with tool_call_repeat_loop); note only notes; off does neither",
        scope="route",
    ),
    Option(
        "repeat_exempt",
        Items(tool_glob, "GLOBS", "tool-name patterns"),
        DEFAULT_EXEMPT,
        "tools the repeat guard never notes or stops (they wait or poll), comma-separated "
        "case-insensitive patterns",
        scope="route",
        default_text=", ".join(DEFAULT_EXEMPT),
    ),
    Option(
        "text_tool_calls",
        Choice(get_args(TextToolCalls)),
        "auto",
        "recover tool calls a model leaked into its text as markup",
        scope="route",
    ),
    Option(
        "request_repair",
        Switch(),
        True,
        "repair what the upstream would refuse before the request leaves (SPEC §11): a call "
        "without its result answered, a result moved up to its call or kept as marked text, "
        "arguments made parseable, empty tool schemas filled",
        scope="route",
    ),
    Option(
        "upstream_profile",
        Choice(get_args(UpstreamProfile)),
        "auto",
        "the upstream's provider family, whose own rules are repaired too (SPEC §11): roles, "
        "empty content, tool schemas in its JSON Schema flavor, thinking models' reasoning, "
        "client-only blocks; auto: from the upstream's host name (api.deepseek.com, "
        "api.moonshot.ai, open.bigmodel.cn, ...), else from the request's model name; "
        "generic: only the rules every upstream holds",
        scope="route",
    ),
    Option(
        "reasoning_passback",
        Switch(),
        False,
        "every tool-call turn of a request that offers tools carries reasoning_content (the "
        "client's own reasoning under another name, else an empty one), as thinking models "
        "require; always on for the deepseek and moonshot families",
        scope="route",
    ),
    Option(
        "max_body_bytes",
        Number("N", integer=True, positive=True),
        32 * 1024 * 1024,
        "larger request bodies get 413",
        default_text="32 MiB",
    ),
    Option(
        "workers",
        Number("N", integer=True, positive=True),
        1,
        "uvicorn worker processes; all state is per request, so workers need no coordination",
        sources=NOT_IN_YAML,
    ),
    Option(
        "drain_timeout",
        Number("S"),
        30.0,
        "on shutdown, how long open streams may go on before they end with shutting_down",
    ),
    Option(
        "head_timeout",
        Number("S", positive=True),
        30.0,
        "a request head still incomplete this long after its first bytes: 408, connection closed",
    ),
    Option(
        "body_timeout",
        Number("S", positive=True),
        60.0,
        "longest silence inside a request body: 408 (or the connection closed once the "
        "response started)",
    ),
    Option(
        "keep_alive_timeout",
        Number("S", positive=True),
        5.0,
        "a connection with no request under way (before its first or after a response) "
        "closes after this",
    ),
    Option(
        "max_connections",
        Number("N", integer=True, positive=True),
        1000,
        "open connections (or requests) per process past which a new request gets 503",
    ),
    Option("log_level", Choice(get_args(LogLevel)), "info", "the lowest level logged"),
    Option(
        "cors_origins",
        Items(cors_origin, "ORIGINS", "origins"),
        (),
        "browser origins allowed to call the proxy, comma-separated (* for any)",
    ),
    Option(
        "inspect",
        Choice(get_args(InspectMode)),
        "auto",
        "the inspector page at /_inspect (what the proxy changed, live); auto: on with the "
        "built-in simulated provider, off with an upstream",
    ),
    Option(
        "inspect_content",
        Switch(),
        False,
        "the inspector shows message text and arguments; off: structure only (roles, tool "
        "names, ids, sizes)",
    ),
    Option(
        "inspect_exchanges",
        Number("N", integer=True, positive=True),
        200,
        "exchanges the inspector keeps in memory per process (the newest)",
    ),
    Option(
        "inspect_exchange_bytes",
        Number("N", integer=True, positive=True),
        64 * 1024,
        "the most the inspector keeps of one exchange",
        default_text="64 KiB",
    ),
    Option(
        "keys",
        Keys(secret, "KEYS", "keys"),
        (),
        "comma-separated proxy keys; when set, clients must send one (Authorization: Bearer "
        "or x-toolcall-proxy-key); it is never forwarded. Only from the environment: a "
        "command line is visible to every user of the machine. Set but holding no key (empty, "
        "or only commas) is refused at start-up, as is a key a header cannot carry",
        sources=frozenset({"env"}),
        attr="proxy_keys",
    ),
)

OPTION: Mapping[str, Option] = MappingProxyType({option.name: option for option in OPTIONS})


def default(name: str) -> Any:
    """A setting's default, for the fields of Route and Settings."""
    return OPTION[name].default


def add_flag(parser: argparse.ArgumentParser, option: Option, **overrides: Any) -> argparse.Action:
    """The option's flag on `parser`; `overrides` (e.g. a default) for other subcommands."""
    assert option.flag is not None, option.name
    kind = option.kind
    shown = overrides.get("default", option.shown_default)
    spec: dict[str, Any] = {
        "dest": option.name,
        "type": kind.arg_type,
        "metavar": kind.metavar if kind.choices is None else None,
        "choices": kind.choices,
        # argparse formats help with %: a literal one must be doubled
        "help": f"{option.help} (default {shown})".replace("%", "%%"),
    }
    spec.update(overrides)
    return parser.add_argument(option.flag, **spec)


def synopsis() -> str:
    """The `serve` flags as the README's synopsis shows them."""
    return " ".join(f"[{o.flag} {o.kind.metavar}]" for o in OPTIONS if o.flag)


def markdown_table() -> str:
    """The README's table of settings."""
    rows = ["| flag | environment | YAML | default | meaning |", "|---|---|---|---|---|"]
    for o in OPTIONS:
        # A | in a table cell ends the cell, even inside backticks.
        flag = f"`{o.flag} {o.kind.metavar}`".replace("|", "\\|") if o.flag else ""
        where = f"`{o.name}`" if "yaml" in o.sources else ""
        if where and o.scope == "route":
            where += ", per route"
        rows.append(f"| {flag} | `{o.env}` | {where} | {o.shown_default} | {o.help} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(markdown_table())
