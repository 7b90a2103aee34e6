"""Node clients through the proxy: the official `openai` package (hand-written loops on
`create`, streaming and not, the `.stream()` helper, and the SDK's own `runTools` loop) and the
Vercel AI SDK (`ai` with `@ai-sdk/openai-compatible`, and with `@ai-sdk/anthropic` on the
Anthropic Messages surface: `generateText` and `streamText` with tools that have `execute`
functions, multi-step by `stopWhen: stepCountIs(n)`).

The scripts in tests/clients/node run every profile's loop in one process per mode (Node
starts slowly) and print one JSON result per profile; each profile is still its own test.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.clients.common import (
    LOOP_ERROR,
    MAX_STEPS,
    PROFILES,
    REPLAY_LOOP,
    Loop,
    assert_loop_completes,
    assert_replay_loop_reported,
    assert_usage_reported,
    run_node,
)
from tests.servers import ServerThread

OPENAI = "openai_loop.mjs"
AI_SDK = "ai_sdk_loop.mjs"
OPENAI_MODES = [
    "create",
    "create-stream",
    "stream-helper",
    "stream-usage",
    "run-tools",
    "run-tools-stream",
]
AI_SDK_ANTHROPIC_MODES = ["anthropic-generate", "anthropic-stream"]  # @ai-sdk/anthropic
AI_SDK_MODES = ["generate", "stream", "stream-usage", *AI_SDK_ANTHROPIC_MODES]
# Non-streaming, or asked for; Anthropic Messages always reports usage.
REPORTS_USAGE = {"create", "stream-usage", "run-tools", "generate", *AI_SDK_ANTHROPIC_MODES}
CONTROL_MODELS = ["kimi", "index0-parallel", "missing-id", "replay-once", REPLAY_LOOP]
CONTROL_OPENAI_MODES = [mode for mode in OPENAI_MODES if mode != "stream-usage"]
CONTROL_AI_SDK_MODES = ["generate", "stream", *AI_SDK_ANTHROPIC_MODES]

Runs = Callable[[str, str, str], dict[str, Loop]]


@pytest.fixture(scope="module")
def runs(proxy: ServerThread, simulator: ServerThread) -> Runs:
    """`runs(script, mode, target)`: every model's loop for that key, from one Node process.

    All the processes run up front, a few at a time (each is mostly waiting on loopback), and
    each is bounded by its own timeout."""
    targets = {
        "proxy": (proxy.url + "/v1", [*PROFILES, REPLAY_LOOP]),
        "simulator": (simulator.url + "/v1", CONTROL_MODELS),
    }
    keys = [
        *((OPENAI, mode, "proxy") for mode in OPENAI_MODES),
        *((AI_SDK, mode, "proxy") for mode in AI_SDK_MODES),
        *((OPENAI, mode, "simulator") for mode in CONTROL_OPENAI_MODES),
        *((AI_SDK, mode, "simulator") for mode in CONTROL_AI_SDK_MODES),
    ]
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = {key: pool.submit(run_node, key[0], *targets[key[2]], key[1]) for key in keys}
    results = {key: future.result() for key, future in futures.items()}

    def get(script: str, mode: str, target: str) -> dict[str, Loop]:
        return results[(script, mode, target)]

    return get


@pytest.mark.parametrize("profile", list(PROFILES))
@pytest.mark.parametrize("mode", OPENAI_MODES)
def test_openai_node_through_proxy(runs: Runs, mode: str, profile: str) -> None:
    loop = runs(OPENAI, mode, "proxy")[profile]
    assert_loop_completes(loop, profile)
    if mode in REPORTS_USAGE:
        assert_usage_reported(loop)


@pytest.mark.parametrize("mode", OPENAI_MODES)
def test_openai_node_replay_loop_is_reported(runs: Runs, mode: str) -> None:
    loop = runs(OPENAI, mode, "proxy")[REPLAY_LOOP]
    assert_replay_loop_reported(loop)
    # Streaming too: the loop trips before the stream's first byte (SPEC §5).
    assert loop.error is not None, loop
    assert loop.error.startswith("UnprocessableEntityError:"), loop.error


@pytest.mark.parametrize("profile", list(PROFILES))
@pytest.mark.parametrize("mode", AI_SDK_MODES)
def test_ai_sdk_through_proxy(runs: Runs, mode: str, profile: str) -> None:
    loop = runs(AI_SDK, mode, "proxy")[profile]
    assert_loop_completes(loop, profile)
    assert loop.steps == 4, "3 tool steps and the answer"
    if mode in REPORTS_USAGE:
        assert_usage_reported(loop)


@pytest.mark.parametrize("mode", [*AI_SDK_MODES[:3], "anthropic-generate"])
def test_ai_sdk_replay_loop_is_reported(runs: Runs, mode: str) -> None:
    # generateText throws an APICallError on the HTTP 422, and streamText emits it as an error
    # part (the loop tripped before the stream's first byte), which the script rethrows.
    loop = runs(AI_SDK, mode, "proxy")[REPLAY_LOOP]
    assert_replay_loop_reported(loop)
    assert loop.error is not None and loop.error.startswith("AI_APICallError:"), loop.error


def test_ai_sdk_anthropic_stream_replay_loop_is_reported(runs: Runs) -> None:
    """A stream on Anthropic Messages always ends a loop with an in-stream `error` event
    (SPEC §8), which streamText emits as an error part carrying Anthropic's error object."""
    loop = runs(AI_SDK, "anthropic-stream", "proxy")[REPLAY_LOOP]
    context = str(loop)
    assert loop.error is not None and loop.error.startswith("loop_detected error part:"), context
    assert LOOP_ERROR in loop.error and "run_shell_command" in loop.error, context
    first_call = ("run_shell_command", json.dumps({"command": "echo round-1-0"}))
    assert [call.key for call in loop.executed] == [first_call], context
    assert loop.final_text is None, context


# --- controls: the same loops straight to the simulator fail -------------------------------


def test_control_openai_node_merges_parallel_calls_at_one_index(runs: Runs) -> None:
    first = runs(OPENAI, "create-stream", "simulator")["index0-parallel"].executed[0]
    assert (first.id, first.name) == ("0000011111", "run_shell_commandread_file")
    assert first.arguments == '{"command":"echo round-1-0"}{"path":"echo round-1-1"}'


def test_control_openai_node_stream_helper_keeps_the_last_call_only(runs: Runs) -> None:
    first = runs(OPENAI, "stream-helper", "simulator")["index0-parallel"].executed[0]
    assert (first.id, first.name) == ("1", "read_file")
    assert first.arguments == '{"command":"echo round-1-0"}{"path":"echo round-1-1"}'


def test_control_openai_node_run_tools_loses_every_parallel_call(runs: Runs) -> None:
    """runTools answers the merged call with an error message and the loop goes on: the
    model reports success and no tool ever ran."""
    loop = runs(OPENAI, "run-tools-stream", "simulator")["index0-parallel"]
    assert loop.error is None and loop.final_text == "All 3 rounds done."
    assert loop.executed == []


@pytest.mark.parametrize("mode", ["create", "run-tools"])
def test_control_openai_node_kimi_ids_collide(runs: Runs, mode: str) -> None:
    loop = runs(OPENAI, mode, "simulator")["kimi"]
    assert loop.ids == ["functions.run_shell_command:0"] * 3


@pytest.mark.parametrize("mode", CONTROL_OPENAI_MODES)
def test_control_openai_node_replay_loop_runs_the_command_repeatedly(runs: Runs, mode: str) -> None:
    loop = runs(OPENAI, mode, "simulator")[REPLAY_LOOP]
    assert loop.error is None
    assert Counter(call.key for call in loop.executed).most_common(1)[0][1] == MAX_STEPS


@pytest.mark.parametrize("mode", CONTROL_AI_SDK_MODES)
def test_control_ai_sdk_ids_collide(runs: Runs, mode: str) -> None:
    """The AI SDK keeps the ids it receives: every turn reuses the same ones. (Its stream
    parser does tell apart parallel calls at one index, by their new id and name.)"""
    loop = runs(AI_SDK, mode, "simulator")["kimi"]
    assert loop.ids == ["functions.run_shell_command:0"] * 3
    parallel = runs(AI_SDK, mode, "simulator")["index0-parallel"]
    assert parallel.ids == ["0", "1"] * 3


@pytest.mark.parametrize(
    ("mode", "error"),
    [
        ("generate", "AI_APICallError: Invalid JSON response"),
        ("stream", "AI_TypeValidationError: Type validation failed"),
        # @ai-sdk/anthropic: a tool_use block without an id
        ("anthropic-generate", "AI_APICallError: Invalid JSON response"),
        ("anthropic-stream", "AI_TypeValidationError: Type validation failed"),
    ],
)
def test_control_ai_sdk_rejects_the_missing_id_profile(runs: Runs, mode: str, error: str) -> None:
    """`@ai-sdk/openai-compatible` rejects its object arguments, `@ai-sdk/anthropic` its
    `tool_use` blocks without an id."""
    loop = runs(AI_SDK, mode, "simulator")["missing-id"]
    assert loop.error is not None and loop.error.startswith(error), loop
    assert loop.executed == []


@pytest.mark.parametrize("mode", CONTROL_AI_SDK_MODES)
def test_control_ai_sdk_executes_replays(runs: Runs, mode: str) -> None:
    once = runs(AI_SDK, mode, "simulator")["replay-once"]
    assert Counter(call.key for call in once.executed).most_common(1)[0][1] == 2
    forever = runs(AI_SDK, mode, "simulator")[REPLAY_LOOP]
    # A looping model sends only the call: the last step's answer has no text.
    assert forever.error is None and not forever.final_text
    assert [call.key for call in forever.executed] == [forever.executed[0].key] * MAX_STEPS
