"""Settings resolution (flags > environment > YAML > defaults) and header hygiene."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from proxy.cli.main import build_parser, main, settings_from_argv
from proxy.config.load import SIMULATOR_MOUNT, ConfigError, Route, Settings
from proxy.config.options import OPTIONS, Option, markdown_table
from proxy.config.values import Number
from proxy.config.yaml_routes import ROUTE_KEYS, TOP_LEVEL_KEYS
from proxy.upstream.client import client_response_headers, upstream_request_headers, upstream_url


def test_defaults_without_upstream_serve_the_simulator(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TOOLCALL_PROXY_UPSTREAM", raising=False)
    settings = settings_from_argv([])
    assert (settings.host, settings.port) == ("127.0.0.1", 8787)
    assert settings.simulated
    [route] = settings.routes
    assert route.upstream == f"http://127.0.0.1:8787{SIMULATOR_MOUNT}/v1"
    assert (route.connect_timeout, route.read_timeout) == (10.0, 300.0)
    assert (route.ids, route.dialect, route.replay_guard, route.max_followups) == (
        "auto",
        "auto",
        True,
        2,
    )


def test_flags_win_over_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLCALL_PROXY_UPSTREAM", "http://env:1/v1")
    monkeypatch.setenv("TOOLCALL_PROXY_READ_TIMEOUT", "7")
    monkeypatch.setenv("TOOLCALL_PROXY_IDS", "always")
    settings = settings_from_argv(
        [
            "--upstream",
            "http://flag:2/v1/",
            "--port",
            "9999",
            "--replay-guard",
            "off",
            "--max-followups",
            "5",
        ]
    )
    [route] = settings.routes
    assert route.upstream == "http://flag:2/v1"
    assert route.read_timeout == 7.0 and route.ids == "always"
    assert route.replay_guard is False and route.max_followups == 5
    assert settings.port == 9999 and not settings.simulated


def test_yaml_routes_and_selection(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TOOLCALL_PROXY_UPSTREAM", raising=False)
    config = tmp_path / "routes.yaml"
    config.write_text(
        "routes:\n"
        "  - name: kimi\n"
        "    match: {path_prefix: /kimi}\n"
        "    upstream: http://k:1/v1\n"
        "    dialect: kimi\n"
        "  - name: qwen\n"
        "    match: {model: 'qwen*'}\n"
        "    upstream: http://q:1/v1\n"
        "    replay_guard: off\n"
        "  - name: rest\n"
        "    upstream: http://r:1/v1\n"
    )
    settings = settings_from_argv(["--config", str(config), "--read-timeout", "9"])
    assert settings.route_for("/kimi", None).name == "kimi"  # type: ignore[union-attr]
    assert settings.route_for("", "Qwen3-Coder").name == "qwen"  # type: ignore[union-attr]
    assert settings.route_for("", "gpt-4o").name == "rest"  # type: ignore[union-attr]
    assert settings.route_for("/nope", None) is None
    assert all(r.read_timeout == 9.0 for r in settings.routes), "flags set route defaults"


def test_bad_upstream_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="upstream"):
        settings_from_argv(["--upstream", "ftp://x"])


ROUTE = Route(name="r", upstream="http://up:1/v1")


def test_request_headers_drop_hop_by_hop_and_host() -> None:
    headers = upstream_request_headers(
        [
            (b"host", b"proxy"),
            (b"connection", b"keep-alive, x-secret-hop"),
            (b"x-secret-hop", b"1"),
            (b"te", b"trailers"),
            (b"authorization", b"Bearer user"),
            (b"x-keep", b"yes"),
            (b"content-length", b"10"),
            (b"x-request-id", b"client-id"),
        ],
        ROUTE,
        "req_1",
        strip_authorization=False,
        identity_encoding=True,
    )
    names = [n for n, _ in headers]
    assert b"host" not in names and b"connection" not in names and b"te" not in names
    assert b"x-secret-hop" not in names and b"content-length" not in names
    assert (b"authorization", b"Bearer user") in headers and (b"x-keep", b"yes") in headers
    assert (b"x-request-id", b"req_1") in headers
    assert (b"accept-encoding", b"identity") in headers


def test_route_key_replaces_client_authorization(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UPSTREAM_SECRET", "sk-upstream")
    route = Route(name="r", upstream="http://up:1/v1", upstream_key_env="UPSTREAM_SECRET")
    headers = upstream_request_headers(
        [(b"authorization", b"Bearer client")],
        route,
        "r",
        strip_authorization=False,
        identity_encoding=False,
    )
    assert [v for n, v in headers if n == b"authorization"] == [b"Bearer sk-upstream"]
    assert "sk-upstream" not in repr(route), "the secret never sits in the settings"


def test_response_headers_keep_rate_limits_drop_hop_by_hop() -> None:
    upstream = httpx.Headers(
        [
            ("retry-after", "7"),
            ("x-ratelimit-remaining", "0"),
            ("transfer-encoding", "chunked"),
            ("connection", "close"),
            ("content-length", "5"),
        ]
    )
    kept = dict(client_response_headers(upstream.raw, keep_length=False))
    assert kept == {b"retry-after": b"7", b"x-ratelimit-remaining": b"0"}
    assert b"content-length" in dict(client_response_headers(upstream.raw, keep_length=True))


def test_upstream_url_appends_path_and_query() -> None:
    assert upstream_url(ROUTE, "/chat/completions", b"") == "http://up:1/v1/chat/completions"
    assert upstream_url(ROUTE, "/models", b"a=1") == "http://up:1/v1/models?a=1"


# -- every setting is declared once, and each source derives from that declaration ------------

# Two valid values per setting, written as a user would (they must resolve differently).
# Choices, switches and numbers get theirs from their kind; strings and lists need examples.
EXAMPLES = {
    "host": ("0.0.0.0", "::1"),
    "upstream_key_env": ("KEY_A", "KEY_B"),
    "cors_origins": ("https://a.example.com", "https://b.example.com,http://c.test:3000"),
    "keys": ("k1", "k2,k3"),
    "repeat_exempt": ("*wait*", "poll_*,Check*"),
}
# Structural: `upstream` adds a route (a YAML route must have one) and `config` names the file.
STRUCTURAL = ("upstream", "config")


def two_values(option: Option) -> tuple[str, str]:
    kind = option.kind
    if option.name in EXAMPLES:
        return EXAMPLES[option.name]
    if kind.choices is not None:
        return kind.choices[0], kind.choices[1]
    assert isinstance(kind, Number), f"add two example values of {option.name} to EXAMPLES"
    return ("1", "2") if kind.integer else ("1.5", "2.5")


def resolved(settings: Settings, option: Option) -> object:
    if option.scope == "route":
        return getattr(settings.route_for("", "first"), option.name)
    return getattr(settings, option.field)


def config_file(tmp_path: Path, option: Option, value: str | None) -> Path:
    """Two routes (the first set by `value` when the setting is per route), or a top-level key."""
    setting = "" if value is None else f"{option.name}: {json.dumps(value)}\n"
    top = setting if option.scope == "global" else ""
    first = f"    {setting}" if option.scope == "route" else ""
    path = tmp_path / "config.yaml"
    path.write_text(
        f"{top}routes:\n"
        f"  - name: first\n    match: {{model: first}}\n    upstream: http://h/v1\n{first}"
        f"  - name: second\n    upstream: http://h/v1\n",
        encoding="utf-8",
    )
    return path


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for option in OPTIONS:
        monkeypatch.delenv(option.env, raising=False)
    return monkeypatch


SETTINGS = [o for o in OPTIONS if o.name not in STRUCTURAL]


@pytest.mark.parametrize("option", SETTINGS, ids=lambda o: o.name)
def test_each_setting_comes_from_its_flag_variable_and_yaml_key_in_order(
    option: Option, tmp_path: Path, clean_env: pytest.MonkeyPatch
) -> None:
    a, b = two_values(option)
    parsed_a, parsed_b = (option.kind.parse(v, option.name, None) for v in (a, b))
    assert parsed_a != parsed_b
    in_yaml = "yaml" in option.sources
    per_route = option.scope == "route"

    def resolve(yaml_value: str | None, *flags: str) -> tuple[object, object]:
        """The setting as resolved for the first route (or globally) and the second route."""
        path = config_file(tmp_path, option, yaml_value if in_yaml else None)
        settings = settings_from_argv(["--config", str(path), *flags])
        other = settings.route_for("", "other")
        return resolved(settings, option), getattr(other, option.name, None)

    if in_yaml:
        assert resolve(a)[0] == parsed_a, "the YAML key"
    clean_env.setenv(option.env, b)
    first, second = resolve(a)
    if per_route:
        assert (first, second) == (parsed_a, parsed_b), "a route's key, else the variable"
    else:
        assert first == parsed_b, "the variable wins over the YAML file"
    if option.flag:
        first, second = resolve(b, option.flag, a)
        if per_route:
            assert (first, second) == (parsed_b, parsed_a), "a route's key, else the flag"
        else:
            assert first == parsed_a, "the flag wins over the variable and the YAML file"


# A value each setting refuses (choices and numbers refuse this word), written as a user would.
BAD = {"host": "my host", "upstream_key_env": "sk-live-1", "cors_origins": "app.example.com"}
CHECKED = [o for o in SETTINGS if o.kind.choices or isinstance(o.kind, Number) or o.name in BAD]


def test_every_checked_kind_of_setting_is_tried() -> None:
    # Any text: keys, and tool-name patterns (an empty item is skipped, as in every list)
    assert {o.name for o in SETTINGS} - {o.name for o in CHECKED} == {"keys", "repeat_exempt"}


@pytest.mark.parametrize("option", CHECKED, ids=lambda o: o.name)
def test_each_setting_checks_its_value_the_same_in_every_source(
    option: Option,
    tmp_path: Path,
    clean_env: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bad = BAD.get(option.name, "sometimes")
    clean_env.setenv(option.env, bad)
    with pytest.raises(ConfigError) as from_env:
        settings_from_argv(["--upstream", "http://h/v1"])
    assert str(from_env.value).startswith(f"{option.label}: ")
    clean_env.delenv(option.env)
    if "yaml" in option.sources:
        path = config_file(tmp_path, option, bad)
        assert main(["check-config", str(path)]) == 1
        where = option.name if option.scope == "global" else f"routes[0].{option.name}"
        line = 1 if option.scope == "global" else 5
        err = capsys.readouterr().err
        assert err == f"{path}:{line}: {where}: {from_env.value.detail}\n"


def test_the_sources_hold_the_declared_settings_and_nothing_else() -> None:
    parser = build_parser()
    serve = parser._subparsers._group_actions[0].choices["serve"]  # type: ignore[union-attr]
    flags = {s for action in serve._actions for s in action.option_strings} - {"-h", "--help"}
    assert flags == {o.flag for o in OPTIONS if o.flag}
    assert all(o.env == "TOOLCALL_PROXY_" + o.name.upper() for o in OPTIONS)
    assert all("env" in o.sources for o in OPTIONS), "every setting has its variable"
    global_keys = {o.name for o in OPTIONS if "yaml" in o.sources and o.scope == "global"}
    route_keys = {o.name for o in OPTIONS if "yaml" in o.sources and o.scope == "route"}
    assert {"routes", *global_keys} == TOP_LEVEL_KEYS
    assert {"name", "match", *route_keys} == ROUTE_KEYS


def test_route_and_settings_defaults_are_the_declared_ones() -> None:
    route = Route(name="r", upstream="http://h/v1")
    settings = Settings(routes=())
    for option in OPTIONS:
        if option.scope == "route" and option.name != "upstream":
            assert getattr(route, option.name) == option.default, option.name
        elif option.scope == "global" and option.name != "config":
            assert getattr(settings, option.field) == option.default, option.name


README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_readme_lists_every_setting_as_declared() -> None:
    text = README.read_text(encoding="utf-8")
    section = text.split("## Command line and environment", 1)[1].split("\n## ", 1)[0]
    synopsis = " ".join(section.split("```")[1].split("toolcall-proxy simulate")[0].split())
    for option in OPTIONS:
        if option.flag:
            assert f"[{option.flag} {option.kind.metavar}]" in synopsis, option.name
    assert markdown_table() in section, "python -m proxy.config.options prints the table to paste"


def test_start_up_imports_only_what_the_command_needs() -> None:
    """The command line imports no YAML parser, server or framework before it needs one, and a
    proxy with an upstream never imports the simulator's framework (README, Architecture)."""
    script = (
        "import sys, proxy.cli.main\n"
        "heavy = ('yaml', 'fastapi', 'pydantic', 'starlette', 'uvicorn', 'httpx', 'proxy.server.app')\n"
        "print(*[m for m in heavy if m in sys.modules])\n"
        "from proxy.server.app import create_app\n"
        "create_app(proxy.cli.main.settings_from_argv(['--upstream', 'http://127.0.0.1:9/v1']))\n"
        "print(*[m for m in ('yaml', 'fastapi', 'pydantic', 'starlette') if m in sys.modules])\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLCALL_PROXY_")}
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=env
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["", ""]
