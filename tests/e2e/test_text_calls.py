"""Issue "tool calls leaked into the text", end to end: a server whose tool parser is off
sends each model family's markup in `content`; through the proxy an openai-SDK agent runs
every round as if the parser were on."""

from __future__ import annotations

import re

import openai
import pytest

from proxy.simulator.profiles import LEAK_FORMATS, PlannedCall, leak_markup
from tests.agent import run_agent
from tests.e2e.conftest import ProxyFactory
from tests.servers import ServerThread

CLIENT_ID = re.compile(r"^call_\d+_\d+_[0-9a-f]{8}$")


def client(server: ServerThread) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="sk-test", max_retries=0)


@pytest.mark.parametrize("mode", ["create", "stream", "stream-helper"])
@pytest.mark.parametrize("fmt", LEAK_FORMATS)
def test_leaked_calls_are_recovered(proxy: ServerThread, fmt: str, mode: str) -> None:
    run = run_agent(
        client(proxy), f"leak-{fmt}", stream=mode != "create", helper=mode == "stream-helper"
    )
    assert run.final_text == "All 3 rounds done.", run.messages
    assert len(run.executed) == 3
    assert len(set(run.ids)) == 3 and all(CLIENT_ID.match(i) for i in run.ids), run.ids
    for message in run.messages:
        if message["role"] == "assistant":
            assert "<" not in (message["content"] or "") and "[TOOL" not in message["content"]


def test_text_tool_calls_off_leaves_the_text(make_proxy: ProxyFactory) -> None:
    with make_proxy(text_tool_calls="off") as server:
        run = run_agent(client(server), "leak-hermes", stream=True)
    assert run.executed == []
    assert run.final_text is not None and "<tool_call>" in run.final_text


@pytest.mark.parametrize("fmt", LEAK_FORMATS)
def test_control_without_proxy_the_agent_sees_markup(simulator: ServerThread, fmt: str) -> None:
    run = run_agent(client(simulator), f"leak-{fmt}", stream=True)
    markup = leak_markup(fmt, (PlannedCall("run_shell_command", "{}", None),))
    assert run.executed == [] and run.final_text is not None
    assert markup[:8] in run.final_text  # the call's opening, left in the text
