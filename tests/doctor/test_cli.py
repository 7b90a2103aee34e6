"""`toolcall-proxy doctor` as a user runs it: a real process against the simulated provider.

What it sends (bounded, canned tool results only, the key only in headers), what it prints
(text and JSON, never the key), the routes file it recommends (valid for `serve`), and how
it ends when the provider fails or hangs.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from proxy.config.load import Route, load_yaml_routes
from proxy.doctor.script import CANNED, MAX_REQUESTS, TOOLS
from proxy.simulator import SimulatorLog
from tests.ops.helpers import clean_env
from tests.servers import ServerThread

BIN = Path(sys.executable).with_name("toolcall-proxy")
SECRET = "sk-doctor-secret-0123456789abcdef"


def doctor(upstream: str, model: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN), "doctor", "--upstream", upstream, "--model", model, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=clean_env(**env),
        check=False,
    )


def test_json_report_names_kimi_quirks_and_recommends_a_route_serve_accepts(
    provider: ServerThread, sim_log: SimulatorLog, tmp_path: Path
) -> None:
    done = doctor(provider.url + "/v1", "kimi", "--json")
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    assert [q["code"] for q in report["quirks"]] == ["kimi_ids", "recurring_ids"]
    kimi = report["quirks"][0]
    assert kimi["title"] == "Kimi's `functions.{name}:{n}` ids"
    assert kimi["examples"] == ['"functions.get_weather:0"']
    assert kimi["where"][0] == "streaming turn 1"
    assert report["recommended"]["dialect"]["value"] == "kimi"
    assert report["proxy_account"] == {"ids rewritten": {"invalid": 6}}
    surfaces = {s["path"]: (s["answers"], s["proxy"]) for s in report["surfaces"]}
    assert surfaces == {
        "/chat/completions": (True, "repairs"),
        "/messages": (True, "repairs"),
        "/responses": (True, "repairs"),
    }
    routes_file = tmp_path / "routes.yaml"
    routes_file.write_text(report["routes_file"], encoding="utf-8")
    _, [route] = load_yaml_routes(routes_file.read_text(), Route(name="default", upstream=""))
    assert (route.upstream, route.dialect, route.ids) == (provider.url + "/v1", "kimi", "auto")
    assert report["requests"] == len(sim_log.paths) == MAX_REQUESTS  # the 404s included
    # It answers every API itself: no bridge.
    assert report["recommended"]["upstream_api"]["value"] == "same"
    assert route.upstream_api == "same"


def test_a_chat_only_provider_gets_the_bridge_recommended(
    provider: ServerThread, tmp_path: Path
) -> None:
    """SPEC §9: Chat Completions answers, Messages and Responses do not (404): the route the
    doctor recommends bridges them, in the routes file and in the serve command."""
    done = doctor(provider.url + "/v1", "kimi-chat-only", "--json")
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    answers = {s["path"]: s["answers"] for s in report["surfaces"]}
    assert answers == {"/chat/completions": True, "/messages": False, "/responses": False}
    bridge = report["recommended"]["upstream_api"]
    assert bridge["value"] == "chat_completions"
    assert "not Anthropic Messages and Responses" in bridge["why"]
    routes_file = tmp_path / "routes.yaml"
    routes_file.write_text(report["routes_file"], encoding="utf-8")
    _, [route] = load_yaml_routes(routes_file.read_text(), Route(name="default", upstream=""))
    assert route.upstream_api == "chat_completions"
    text = doctor(provider.url + "/v1", "kimi-chat-only")
    assert text.returncode == 0, text.stderr
    assert "--upstream-api chat_completions" in text.stdout


def test_it_sends_only_canned_tool_results_and_its_two_harmless_tools(
    provider: ServerThread, sim_log: SimulatorLog
) -> None:
    done = doctor(provider.url + "/v1", "name-index")
    assert done.returncode == 0, done.stderr
    # The chat probes offer the tools; the surface probes (a one-line prompt) offer none.
    chat = [body for body in sim_log.requests if "tools" in body]
    assert len(chat) == 6
    tool_messages = [
        message for body in chat for message in body["messages"] if message["role"] == "tool"
    ]
    # Turn 2 answers turn 1's two calls; turn 3 answers both rounds' (4 + 2, twice).
    assert len(tool_messages) == 2 * (2 + 4)
    prefix = CANNED.split("{")[0]
    assert all(message["content"].startswith(prefix) for message in tool_messages)
    assert all(body["tools"] == TOOLS for body in chat)
    # The history carries the provider's own ids back, as a client would.
    assert {m["tool_call_id"] for m in tool_messages} == {"get_weather_0", "get_time_1"}
    assert "ids that only count calls within one response" in done.stdout
    assert "dialect: passthrough" in done.stdout


def test_the_key_goes_only_into_headers_and_never_into_the_report(
    provider: ServerThread, sim_log: SimulatorLog
) -> None:
    done = doctor(
        provider.url + "/v1",
        "reference",
        "--upstream-key-env",
        "DOCTOR_TEST_KEY",
        DOCTOR_TEST_KEY=SECRET,
    )
    assert done.returncode == 0, done.stderr
    assert "Nothing: every response had the shape OpenAI sends." in done.stdout
    assert "upstream_key_env: DOCTOR_TEST_KEY" in done.stdout
    assert SECRET not in done.stdout + done.stderr
    chat, messages, responses = (
        [h for p, h in zip(sim_log.paths, sim_log.headers, strict=True) if p == path]
        for path in ("/v1/chat/completions", "/v1/messages", "/v1/responses")
    )
    assert len(chat) == 6
    assert all(h["authorization"] == f"Bearer {SECRET}" for h in chat + messages + responses)
    assert messages[0]["x-api-key"] == SECRET and "x-api-key" not in chat[0]


def test_a_provider_that_refuses_ends_with_status_1_and_its_own_words(
    provider: ServerThread,
) -> None:
    done = doctor(provider.url + "/v1", "fault-429")
    assert done.returncode == 1
    assert "HTTP 429: Rate limit reached for requests (simulated)" in done.stdout
    assert "No Chat Completions response to judge" in done.stdout


def test_a_hanging_provider_is_left_at_the_time_limit(
    provider: ServerThread, sim_log: SimulatorLog
) -> None:
    # The simulated provider holds the response head for 60 s; the doctor stops at 1 s.
    done = doctor(
        provider.url + "/v1",
        "fault-hang+stall_s=60",
        "--timeout",
        "1",
        "--json",
    )
    assert done.returncode == 1
    report = json.loads(done.stdout)
    assert report["requests"] == 1 == len(sim_log.requests)
    assert report["incomplete"][0]["error"] == "no answer within the time limit"
    assert all(e["error"].startswith("not sent: the time limit") for e in report["incomplete"][1:])


def test_usage_mistakes_exit_2_before_anything_is_sent(sim_log: SimulatorLog) -> None:
    unset = doctor("http://127.0.0.1:9/v1", "m", "--upstream-key-env", "NOPE_UNSET")
    assert unset.returncode == 2 and "$NOPE_UNSET is not set" in unset.stderr
    bad = doctor("ftp://example/v1", "m")
    assert bad.returncode == 2 and "--upstream" in bad.stderr
    assert sim_log.requests == []
