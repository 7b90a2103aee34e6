"""`toolcall-proxy check-config FILE`: a good file lists its routes; a mistake is reported as
`FILE:LINE: FIELD: message` with exit status 1 (2 when the file cannot be read).

Most cases call the CLI's `main` in process; one runs the installed console script to prove
the exit status and streams reach a shell. The serve-side settings (flags, environment and
YAML precedence) are checked at the end.
"""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

import pytest

from proxy.cli.main import main, settings_from_argv
from proxy.config.load import ConfigError
from tests.ops.helpers import PROXY_BIN, clean_env

GOOD = """\
# Two providers and a local server.
host: 0.0.0.0
port: 8787
log_level: info
drain_timeout: 25
cors_origins:
  - https://app.example.com
routes:
  - name: kimi
    match:
      path_prefix: /kimi
    upstream: https://api.moonshot.ai/v1
    upstream_key_env: MOONSHOT_API_KEY
    ids: auto
    dialect: kimi
  - name: local
    match:
      model: "qwen*"
    upstream: http://127.0.0.1:8000/v1
    replay_guard: off
    text_tool_calls: off
    max_followups: 3
    read_timeout: 600
  - name: fallback
    upstream: http://vllm.inference.svc.cluster.local:8000/v1/
    ids: off  # YAML reads a bare off as false; it still means the policy "off"
"""


def check(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    path = tmp_path / "routes.yaml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    code = main(["check-config", str(path)])
    out, err = capsys.readouterr()
    return code, out, err.replace(str(path), "FILE")


def test_good_file_lists_its_routes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = check(tmp_path, GOOD, capsys)
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        "kimi: /kimi -> https://api.moonshot.ai/v1 (ids=auto, dialect=kimi)",
        "local: qwen* -> http://127.0.0.1:8000/v1 (ids=auto, dialect=auto)",
        "fallback: * -> http://vllm.inference.svc.cluster.local:8000/v1 (ids=off, dialect=auto)",
    ]


def test_shared_settings_through_yaml_anchors_are_fine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = """\
    routes:
      - &base
        name: a
        upstream: http://127.0.0.1:8000/v1
        dialect: alnum9
      - <<: *base
        name: b
        match: {model: "b-*"}
    """
    code, out, _ = check(tmp_path, text, capsys)
    assert code == 0
    assert "b: b-* -> http://127.0.0.1:8000/v1 (ids=auto, dialect=alnum9)" in out


# Each case: the file, then the exact first line check-config must print on stderr.
MISTAKES = {
    "unknown top-level field": (
        "routes: []\nlisten: 0.0.0.0\n",
        "FILE:2: listen: unknown field (expected one of body_timeout, cors_origins, "
        "drain_timeout, head_timeout, host, inspect, inspect_content, inspect_exchange_bytes, inspect_exchanges, "
        "keep_alive_timeout, log_level, max_body_bytes, "
        "max_connections, port, routes)",
    ),
    "unknown route field (a typo)": (
        "routes:\n  - name: a\n    upstream: http://h/v1\n    dialekt: kimi\n",
        "FILE:4: routes[0].dialekt: unknown field",
    ),
    "unknown match field": (
        "routes:\n  - upstream: http://h/v1\n    match:\n      model: x\n      prefix: /x\n",
        "FILE:5: routes[0].match.prefix: unknown field (expected model or path_prefix)",
    ),
    "bad ids value": (
        "routes:\n  - upstream: http://h/v1\n\n    ids: sometimes\n",
        "FILE:4: routes[0].ids: expected one of auto, always, collisions, off, got 'sometimes'",
    ),
    "yes is no ids policy": (
        "routes:\n  - upstream: http://h/v1\n    ids: yes\n",
        "FILE:3: routes[0].ids: expected one of auto, always, collisions, off, got True",
    ),
    "bad dialect value": (
        "routes:\n  - upstream: http://h/v1\n  - upstream: http://g/v1\n    dialect: openai\n",
        "FILE:4: routes[1].dialect: expected one of auto, passthrough, kimi, alnum9, got 'openai'",
    ),
    "bad replay_guard value": (
        "routes:\n  - upstream: http://h/v1\n    replay_guard: sometimes\n",
        "FILE:3: routes[0].replay_guard: expected on or off, got 'sometimes'",
    ),
    "bad text_tool_calls value": (
        "routes:\n  - upstream: http://h/v1\n    text_tool_calls: always\n",
        "FILE:3: routes[0].text_tool_calls: expected one of auto, off, got 'always'",
    ),
    "bad log_level": (
        "log_level: verbose\nroutes:\n  - upstream: http://h/v1\n",
        "FILE:1: log_level: expected one of debug, info, warning, error, got 'verbose'",
    ),
    "missing upstream": (
        "routes:\n  - name: a\n    upstream: http://h/v1\n  - name: b\n    ids: always\n",
        "FILE:4: routes[1].upstream: is required",
    ),
    "URL without scheme": (
        "routes:\n  - upstream: api.example.com/v1\n",
        "FILE:2: routes[0].upstream: expected an http:// or https:// URL, got 'api.example.com/v1'",
    ),
    "URL with another scheme": (
        "routes:\n  - upstream: ftp://h/v1\n",
        "FILE:2: routes[0].upstream: expected an http:// or https:// URL, got 'ftp://h/v1'",
    ),
    "URL without host": (
        "routes:\n  - upstream: http:///v1\n",
        "FILE:2: routes[0].upstream: expected a URL with a host name, got 'http:///v1'",
    ),
    "URL with a bad port": (
        "routes:\n  - upstream: http://h:80a/v1\n",
        "FILE:2: routes[0].upstream: the port of 'http://h:80a/v1' is not valid",
    ),
    "URL with a query": (
        "routes:\n  - upstream: http://h/v1?key=1\n",
        "FILE:2: routes[0].upstream: must not have a query or fragment, got 'http://h/v1?key=1'",
    ),
    "URL with a space": (
        "routes:\n  - upstream: http://my host/v1\n",
        "FILE:2: routes[0].upstream: expected a URL with a host name, got 'http://my host/v1'",
    ),
    "negative timeout": (
        "routes:\n  - upstream: http://h/v1\n    read_timeout: -1\n",
        "FILE:3: routes[0].read_timeout: must be greater than 0, got -1",
    ),
    "zero timeout": (
        "routes:\n  - upstream: http://h/v1\n    connect_timeout: 0\n",
        "FILE:3: routes[0].connect_timeout: must be greater than 0, got 0",
    ),
    "fractional max_followups": (
        "routes:\n  - upstream: http://h/v1\n    max_followups: 1.5\n",
        "FILE:3: routes[0].max_followups: expected a whole number, got 1.5",
    ),
    "yes as a number": (
        "routes:\n  - upstream: http://h/v1\n    max_followups: yes\n",
        "FILE:3: routes[0].max_followups: expected a whole number, got True",
    ),
    "port out of range": (
        "port: 70000\nroutes:\n  - upstream: http://h/v1\n",
        "FILE:1: port: expected 0 to 65535, got 70000",
    ),
    "port not a number": (
        "port: http\nroutes:\n  - upstream: http://h/v1\n",
        "FILE:1: port: expected a whole number, got 'http'",
    ),
    "negative drain_timeout": (
        "drain_timeout: -5\nroutes:\n  - upstream: http://h/v1\n",
        "FILE:1: drain_timeout: must not be negative, got -5",
    ),
    "zero max_body_bytes": (
        "max_body_bytes: 0\nroutes:\n  - upstream: http://h/v1\n",
        "FILE:1: max_body_bytes: must be greater than 0, got 0",
    ),
    "CORS origin with a path": (
        "cors_origins:\n  - https://app.example.com/chat\nroutes:\n  - upstream: http://h/v1\n",
        "FILE:1: cors_origins: expected an origin like https://app.example.com, "
        "got 'https://app.example.com/chat'",
    ),
    "path prefix with /v1": (
        "routes:\n  - upstream: http://h/v1\n    match:\n      path_prefix: /kimi/v1\n",
        "FILE:4: routes[0].match.path_prefix: must be like /kimi (without /v1)",
    ),
    "path prefix with a space": (
        "routes:\n  - upstream: http://h/v1\n    match:\n      path_prefix: /my route\n",
        "FILE:4: routes[0].match.path_prefix: expected path segments of letters, digits, "
        "'.', '_', '~' or '-', got '/my route'",
    ),
    "key given twice": (
        "routes:\n  - upstream: http://h/v1\n    ids: off\n    ids: always\n",
        "FILE:4: routes[0].ids: given twice (first on line 3); YAML keeps only one",
    ),
    "route name given twice": (
        "routes:\n  - name: a\n    upstream: http://h/v1\n  - name: a\n    upstream: http://g/v1\n",
        "FILE:4: routes[1].name: 'a' is already the name of the route on line 2",
    ),
    "path prefix matched twice": (
        "routes:\n  - upstream: http://h/v1\n    match: {path_prefix: /k}\n"
        "  - name: b\n    upstream: http://g/v1\n    match: {path_prefix: k/}\n",
        "FILE:6: routes[1].match.path_prefix: /k is already matched by the route on line 3",
    ),
    "routes not a list": (
        "routes:\n  name: a\n  upstream: http://h/v1\n",
        "FILE:2: routes: expected a list of routes",
    ),
    "route not a mapping": (
        "routes:\n  - upstream: http://h/v1\n  - http://g/v1\n",
        "FILE:3: routes[1]: expected a mapping",
    ),
    "top level not a mapping": (
        "- upstream: http://h/v1\n",
        "FILE:1: (top level): expected a mapping with a routes list",
    ),
    "YAML syntax error": (
        "routes:\n  - upstream: http://h/v1\n    ids: [auto\n",
        "FILE:4: yaml: expected ',' or ']', but got '<stream end>' (while parsing a flow sequence)",
    ),
}


@pytest.mark.parametrize("case", list(MISTAKES))
def test_mistakes_name_the_line_and_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    text, expected = MISTAKES[case]
    code, out, err = check(tmp_path, text, capsys)
    assert code == 1
    assert out == ""
    assert err.splitlines()[0] == expected


def test_credentials_in_a_url_are_refused_and_never_echoed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = "routes:\n  - upstream: https://user:s3cret-pw@h/v1\n"
    code, _, err = check(tmp_path, text, capsys)
    assert code == 1
    assert err.startswith("FILE:2: routes[0].upstream: must not contain credentials")
    assert "s3cret-pw" not in err


def test_a_pasted_key_in_upstream_key_env_is_never_echoed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = "routes:\n  - upstream: https://h/v1\n    upstream_key_env: sk-live-abc123\n"
    code, _, err = check(tmp_path, text, capsys)
    assert code == 1
    assert err.startswith("FILE:3: routes[0].upstream_key_env: expected the name of an")
    assert "sk-live-abc123" not in err


def test_empty_file_has_no_routes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = check(tmp_path, "# nothing yet\n", capsys)
    assert code == 1
    assert err == "FILE: routes: no routes defined\n"


def test_unreadable_files_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-config", str(tmp_path / "missing.yaml")]) == 2
    assert "cannot read" in capsys.readouterr().err
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"routes: \xff\xfe\n")
    assert main(["check-config", str(binary)]) == 2
    assert "not UTF-8" in capsys.readouterr().err


def test_console_script_exit_status_and_streams(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("routes:\n  - upstream: http://h/v1\n    ids: sometimes\n", encoding="utf-8")
    result = subprocess.run(
        [str(PROXY_BIN), "check-config", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_env(),
    )
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.startswith(f"{bad}:3: routes[0].ids: expected one of")
    good = tmp_path / "good.yaml"
    good.write_text(GOOD, encoding="utf-8")
    result = subprocess.run(
        [str(PROXY_BIN), "check-config", str(good)],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_env(),
    )
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.count(" -> ") == 3


# -- serve: flags, environment and YAML ------------------------------------------------------


@pytest.fixture
def no_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in (
        "PORT",
        "DRAIN_TIMEOUT",
        "CORS_ORIGINS",
        "READ_TIMEOUT",
        "LOG_LEVEL",
        "WORKERS",
        "UPSTREAM",
        "TEXT_TOOL_CALLS",
        "KEYS",
    ):
        monkeypatch.delenv(f"TOOLCALL_PROXY_{name}", raising=False)
    return monkeypatch


def test_zero_values_are_kept_not_replaced_by_defaults(no_env: pytest.MonkeyPatch) -> None:
    settings = settings_from_argv(
        ["--upstream", "http://h/v1", "--port", "0", "--drain-timeout", "0"]
    )
    assert settings.port == 0
    assert settings.drain_timeout == 0.0


def test_flag_beats_environment_beats_yaml(tmp_path: Path, no_env: pytest.MonkeyPatch) -> None:
    config = tmp_path / "routes.yaml"
    config.write_text(
        "port: 7001\ndrain_timeout: 11\nroutes:\n  - upstream: http://h/v1\n", encoding="utf-8"
    )
    assert settings_from_argv(["--config", str(config)]).port == 7001
    assert settings_from_argv(["--config", str(config)]).drain_timeout == 11.0
    no_env.setenv("TOOLCALL_PROXY_PORT", "7002")
    no_env.setenv("TOOLCALL_PROXY_DRAIN_TIMEOUT", "12")
    assert settings_from_argv(["--config", str(config)]).port == 7002
    assert settings_from_argv(["--config", str(config)]).drain_timeout == 12.0
    assert settings_from_argv(["--config", str(config), "--port", "7003"]).port == 7003


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("READ_TIMEOUT", "soon", "--read-timeout (TOOLCALL_PROXY_READ_TIMEOUT): expected a number"),
        ("READ_TIMEOUT", "0", "must be greater than 0"),
        ("TEXT_TOOL_CALLS", "maybe", "--text-tool-calls (TOOLCALL_PROXY_TEXT_TOOL_CALLS)"),
        ("LOG_LEVEL", "verbose", "--log-level (TOOLCALL_PROXY_LOG_LEVEL)"),
        ("WORKERS", "0", "--workers (TOOLCALL_PROXY_WORKERS): must be greater than 0"),
        ("PORT", "99999", "--port (TOOLCALL_PROXY_PORT): expected 0 to 65535"),
        ("UPSTREAM", "localhost:8000", "--upstream (TOOLCALL_PROXY_UPSTREAM)"),
    ],
)
def test_bad_environment_values_name_their_variable(
    no_env: pytest.MonkeyPatch, name: str, value: str, message: str
) -> None:
    no_env.setenv(f"TOOLCALL_PROXY_{name}", value)
    args = [] if name == "UPSTREAM" else ["--upstream", "http://h/v1"]
    with pytest.raises(ConfigError) as caught:
        settings_from_argv(args)
    assert message in str(caught.value)


def test_serve_reports_a_config_mistake_with_its_line(tmp_path: Path) -> None:
    config = tmp_path / "routes.yaml"
    config.write_text("routes:\n  - upstream: http://h/v1\n    ids: sometimes\n")
    result = subprocess.run(
        [str(PROXY_BIN), "serve", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_env(),
    )
    assert result.returncode == 2
    assert "routes[0].ids (line 3): expected one of" in result.stderr
