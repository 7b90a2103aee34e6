"""SPEC §6: configuration that would silently weaken security, or fail every request, is
refused at start-up with a message that says why (exit status 2, like every configuration
error): a proxy-keys variable that is set but holds no key, and an upstream key a header
cannot carry. And the start-up route line says whether clients need a proxy key.

The refusals run the installed `toolcall-proxy serve`, where a user meets them; the message
never carries a key.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx
import pytest

from proxy.cli.main import settings_from_argv
from proxy.config.load import ConfigError
from proxy.ops.startup import startup_lines
from tests.ops.helpers import PROXY_BIN, clean_env, serve_process
from tests.servers import free_port

UPSTREAM = "http://127.0.0.1:9/v1"  # never reached: the refusals come before any request


def serve(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """`toolcall-proxy serve` that is expected to exit at once (a configuration error)."""
    return subprocess.run(
        [str(PROXY_BIN), "serve", "--upstream", UPSTREAM, "--port", str(free_port()), *args],
        capture_output=True,
        text=True,
        timeout=30,  # it exits at once; without the refusal it would serve on
        env=env,
    )


@pytest.mark.parametrize("value", ["", " ", ",", " , ", ",,"], ids=repr)
def test_a_proxy_keys_variable_that_holds_no_key_is_refused(value: str) -> None:
    result = serve(clean_env(TOOLCALL_PROXY_KEYS=value))
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(
        "toolcall-proxy: configuration error: TOOLCALL_PROXY_KEYS: is set but holds no key"
    )
    assert "unset it to run without keys" in result.stderr
    assert "Traceback" not in result.stderr


def test_the_refusal_is_the_same_in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLCALL_PROXY_KEYS", " , ")
    with pytest.raises(ConfigError, match="holds no key"):
        settings_from_argv(["--upstream", UPSTREAM])
    monkeypatch.setenv("TOOLCALL_PROXY_KEYS", "pk-one, pk-two,")  # a trailing comma is fine
    assert settings_from_argv(["--upstream", UPSTREAM]).proxy_keys == ("pk-one", "pk-two")
    monkeypatch.delenv("TOOLCALL_PROXY_KEYS")
    assert settings_from_argv(["--upstream", UPSTREAM]).proxy_keys == ()


SECRET = "sk-upstream-3f9c1e"
UNSAFE_KEYS = {
    "trailing newline": (SECRET + "\n", "ends with a line break"),
    "trailing CRLF": (SECRET + "\r\n", "ends with a line break"),
    "inner line break": (SECRET[:5] + "\n" + SECRET[5:], "holds a line break (character 6"),
    "control character": (SECRET[:3] + "\x01" + SECRET[3:], "holds a control character"),
    "tab": (SECRET + "\t", "holds a control character"),
    "DEL": ("\x7f" + SECRET, "holds a control character (character 1)"),
    "outside Latin-1": (SECRET[:4] + "\u2019" + SECRET[4:], "outside Latin-1 (character 5)"),
}


@pytest.mark.parametrize(("key", "why"), list(UNSAFE_KEYS.values()), ids=list(UNSAFE_KEYS))
def test_an_upstream_key_a_header_cannot_carry_is_refused(key: str, why: str) -> None:
    result = serve(clean_env(UNSAFE_TEST_KEY=key), "--upstream-key-env", "UNSAFE_TEST_KEY")
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(
        "toolcall-proxy: configuration error: UNSAFE_TEST_KEY (the upstream key of route default): "
    ), result.stderr
    assert why in result.stderr and "which a header cannot carry" in result.stderr
    assert SECRET not in result.stderr and SECRET[4:] not in result.stderr
    assert "Traceback" not in result.stderr


def test_an_upstream_key_of_a_yaml_route_is_checked_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "routes.yaml"
    config.write_text(
        "routes:\n"
        "  - name: fine\n    match: {path_prefix: /a}\n    upstream: http://h/v1\n"
        "    upstream_key_env: FINE_TEST_KEY\n"
        "  - name: pasted\n    upstream: http://h/v1\n    upstream_key_env: PASTED_TEST_KEY\n",
        encoding="utf-8",
    )
    monkeypatch.delenv("TOOLCALL_PROXY_KEYS", raising=False)
    monkeypatch.setenv("FINE_TEST_KEY", "sk-fine")
    monkeypatch.setenv("PASTED_TEST_KEY", "sk-pasted\n")
    with pytest.raises(ConfigError) as caught:
        settings_from_argv(["--config", str(config)])
    assert caught.value.field_name == "PASTED_TEST_KEY (the upstream key of route pasted)"
    monkeypatch.setenv("PASTED_TEST_KEY", "sk-pasted")
    assert len(settings_from_argv(["--config", str(config)]).routes) == 2
    monkeypatch.setenv("PASTED_TEST_KEY", "sk-pas\u00e9ted")  # Latin-1: é is one byte
    assert len(settings_from_argv(["--config", str(config)]).routes) == 2


def test_a_proxy_key_a_header_cannot_carry_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLCALL_PROXY_KEYS", "pk-one,pk-\x01two")
    with pytest.raises(ConfigError) as caught:
        settings_from_argv(["--upstream", UPSTREAM])
    assert "a key holds a control character" in str(caught.value)
    assert "pk-" not in str(caught.value)
    monkeypatch.setenv("TOOLCALL_PROXY_KEYS", "pk-one\n")  # trimmed, as every list item is
    assert settings_from_argv(["--upstream", UPSTREAM]).proxy_keys == ("pk-one",)


def test_the_route_line_says_whether_clients_need_a_proxy_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TOOLCALL_PROXY_KEYS", raising=False)
    (line,) = startup_lines(settings_from_argv(["--upstream", UPSTREAM]))
    assert "; no proxy key required (TOOLCALL_PROXY_KEYS not set); " in line
    monkeypatch.setenv("TOOLCALL_PROXY_KEYS", "pk-start-line")
    (line,) = startup_lines(settings_from_argv(["--upstream", UPSTREAM]))
    assert "; proxy key required; " in line
    assert "pk-start-line" not in line


def test_serve_says_a_proxy_key_is_required_and_then_requires_it() -> None:
    """The line a user reads, from the real `serve`, and what it promises."""
    env = clean_env(TOOLCALL_PROXY_KEYS="pk-served-line")
    with serve_process(["--upstream", UPSTREAM, "--port", "0"], env=env) as proxy:
        base = proxy.wait_started()
        route = proxy.wait_for_line(
            lambda text: text.startswith("toolcall-proxy: route "), 5, "the route line"
        )
        assert "; proxy key required; " in route
        assert httpx.get(base + "/v1/models", timeout=10).status_code == 401
    assert "pk-served-line" not in proxy.stderr
