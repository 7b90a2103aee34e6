"""The `http` setting is gone (the server runs uvicorn's own httptools protocol): a user who
still gives it learns so. The flag and the YAML key are refused by name, as anything `serve`
does not know; the environment variable, which the settings never read now, is named at
start-up and changes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.cli.main import main, settings_from_argv
from proxy.config.load import ConfigError

UPSTREAM = ["--upstream", "http://127.0.0.1:9/v1"]


@pytest.fixture
def no_http_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.delenv("TOOLCALL_PROXY_HTTP", raising=False)
    return monkeypatch


@pytest.mark.parametrize("value", ["lean", "httptools"])
def test_the_http_flag_is_refused_by_name(
    value: str,
    tmp_path: Path,
    no_http_env: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # A config file that cannot be read: were the flag taken, `serve` would stop there, before
    # it starts a server.
    missing = str(tmp_path / "missing.yaml")
    with pytest.raises(SystemExit) as exited:
        main(["serve", "--config", missing, "--http", value])
    assert exited.value.code == 2
    assert f"unrecognized arguments: --http {value}" in capsys.readouterr().err


def test_the_http_yaml_key_is_refused_by_name(
    tmp_path: Path, no_http_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "routes.yaml"
    config.write_text("http: lean\nroutes:\n  - upstream: http://h/v1\n", encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        settings_from_argv(["--config", str(config)])
    assert (caught.value.field_name, caught.value.line) == ("http", 1)
    assert caught.value.detail.startswith("unknown field (expected one of")
    assert main(["check-config", str(config)]) == 1
    assert capsys.readouterr().err.startswith(f"{config}:1: http: unknown field")


@pytest.mark.parametrize("value", ["lean", "httptools", "nonsense"])
def test_the_http_variable_changes_no_setting(value: str, no_http_env: pytest.MonkeyPatch) -> None:
    without = settings_from_argv(UPSTREAM)
    no_http_env.setenv("TOOLCALL_PROXY_HTTP", value)
    assert settings_from_argv(UPSTREAM) == without


def test_serve_names_the_http_variable_as_not_read(
    tmp_path: Path, no_http_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A config file that cannot be read: `serve` stops before it starts a server.
    missing = str(tmp_path / "missing.yaml")
    assert main(["serve", "--config", missing]) == 2
    assert "TOOLCALL_PROXY_HTTP" not in capsys.readouterr().err
    no_http_env.setenv("TOOLCALL_PROXY_HTTP", "lean")
    assert main(["serve", "--config", missing]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == (
        "toolcall-proxy: TOOLCALL_PROXY_HTTP is not read "
        "(--http was removed: the server runs uvicorn's own httptools protocol)"
    )
    assert lines[1].startswith("toolcall-proxy: configuration error: ")
