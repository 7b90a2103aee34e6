"""`toolcall-proxy sanitize`: the core offline, as a user runs it on a captured stream."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson


def chunk(delta: dict[str, object], finish: str | None = None) -> bytes:
    body = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "kimi-k2",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + orjson.dumps(body) + b"\n\n"


def run(args: list[str], stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "proxy", "sanitize", *args],
        input=stdin,
        capture_output=True,
        timeout=60,
        check=False,
    )


def test_sanitize_rewrites_and_explains(tmp_path: Path) -> None:
    capture = tmp_path / "capture.sse"
    capture.write_bytes(
        chunk({"role": "assistant", "content": ""})
        + chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "functions.bash:0",
                        "type": "function",
                        "function": {"name": "bash", "arguments": '{"cmd": "ls"}'},
                    }
                ]
            }
        )
        + chunk({}, "stop")
        + b"data: [DONE]\n\n"
    )
    request = tmp_path / "request.json"
    request.write_bytes(
        orjson.dumps(
            {
                "model": "kimi-k2",
                "messages": [
                    {"role": "user", "content": "hi"},
                    {
                        "role": "assistant",
                        "tool_calls": [
                            {
                                "id": "call_abc",
                                "type": "function",
                                "function": {"name": "bash", "arguments": "{}"},
                            }
                        ],
                    },
                    {"role": "tool", "tool_call_id": "call_abc", "content": "ok"},
                ],
            }
        )
    )
    result = run([str(capture), "--request", str(request), "--explain"])
    assert result.returncode == 0, result.stderr
    events = [orjson.loads(e[6:]) for e in result.stdout.split(b"\n\n") if e.startswith(b"data: {")]
    header = events[1]["choices"][0]["delta"]["tool_calls"][0]
    assert header["id"].startswith("call_2_0_") and header["function"]["name"] == "bash"
    assert events[-1]["choices"][0]["finish_reason"] == "tool_calls"
    assert result.stdout.endswith(b"data: [DONE]\n\n")
    explain = result.stderr.decode()
    assert "history: id 'call_abc' (bash) -> upstream 'functions.bash:0'" in explain
    assert "id 'functions.bash:0' -> 'call_2_0_" in explain and "(invalid)" in explain
    assert "repaired finish_reason: stop -> tool_calls" in explain


def test_sanitize_reads_stdin_and_reports_recovered_text_calls(tmp_path: Path) -> None:
    request = tmp_path / "request.json"
    request.write_bytes(
        orjson.dumps(
            {
                "model": "qwen",
                "messages": [],
                "tools": [{"type": "function", "function": {"name": "bash"}}],
            }
        )
    )
    stream = chunk({"content": '<tool_call>{"name": "bash", "arguments": {}}</tool_call>'})
    result = run(["--request", str(request), "--explain"], stdin=stream)
    assert result.returncode == 0
    assert b'"name":"bash"' in result.stdout and b"<tool_call>" not in result.stdout
    assert b"recovered a tool call written as hermes markup" in result.stderr


def test_sanitize_missing_file_is_a_clear_error() -> None:
    result = run(["/nonexistent/capture.sse"])
    assert result.returncode == 2
    assert b"cannot read" in result.stderr and b"Traceback" not in result.stderr


def test_explain_says_which_form_of_the_raw_id_a_replay_matched(tmp_path: Path) -> None:
    # SPEC §5: B went upstream as `functions.bash:1`; its replay comes back as `:0`, the id a
    # restarted counter issued it under, which B's client id carries as a digest.
    from proxy.core.ids import mint_client_id

    a, b = (mint_client_id(t, 0, "abcd", "functions.bash:0") for t in (1, 2))
    call = {"type": "function", "function": {"name": "bash", "arguments": '{"cmd":"ls"}'}}
    replay = {"index": 0, "id": "functions.bash:0", **call}
    capture = tmp_path / "capture.sse"
    capture.write_bytes(
        chunk({"tool_calls": [replay]}) + chunk({}, "tool_calls") + b"data: [DONE]\n\n"
    )
    messages = [{"role": "user", "content": "hi"}]
    for client_id, arguments in ((a, '{"cmd":"pwd"}'), (b, '{"cmd":"ls"}')):
        fn = {"name": "bash", "arguments": arguments}
        messages += [
            {
                "role": "assistant",
                "tool_calls": [{"id": client_id, "type": "function", "function": fn}],
            },
            {"role": "tool", "tool_call_id": client_id, "content": "ok"},
        ]
    request = tmp_path / "request.json"
    request.write_bytes(orjson.dumps({"model": "kimi-k2", "messages": messages}))
    result = run([str(capture), "--request", str(request), "--explain"])
    assert result.returncode == 0, result.stderr
    err = result.stderr.decode()
    assert "dropped call bash id 'functions.bash:0' (replay, matched the issued id)" in err
    assert f"matched the issued id of '{b}'" in err


def _responses_event(kind: str, **fields: object) -> bytes:
    return (
        b"event: " + kind.encode() + b"\ndata: " + orjson.dumps({"type": kind, **fields}) + b"\n\n"
    )


def _responses_capture(call_id: str, arguments: str) -> bytes:
    item = {"type": "function_call", "call_id": call_id, "name": "bash", "arguments": ""}
    response = {"id": "resp_1", "object": "response", "status": "in_progress", "output": []}
    return (
        _responses_event("response.created", response=response, sequence_number=0)
        + _responses_event("response.output_item.added", output_index=0, item=item)
        + _responses_event(
            "response.function_call_arguments.delta", output_index=0, delta=arguments
        )
    )  # no .done events, no response.completed


def test_sanitize_reads_a_responses_stream_and_explains(tmp_path: Path) -> None:
    capture = tmp_path / "capture.sse"
    capture.write_bytes(_responses_capture("functions.bash:0", '{"cmd":"ls"}'))
    result = run([str(capture), "--explain"])
    assert result.returncode == 0, result.stderr
    events = [orjson.loads(e.split(b"data: ", 1)[1]) for e in result.stdout.split(b"\n\n") if e]
    types = [e["type"] for e in events]
    assert types[-3:] == [
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    call = events[-1]["response"]["output"][0]
    assert call["call_id"].startswith("call_") and call["call_id"].endswith("_functions.bash:0")
    assert call["id"].startswith("fc_")
    assert "id 'functions.bash:0' -> 'call_" in result.stderr.decode()


def test_sanitize_reads_a_responses_body_and_a_replay(tmp_path: Path) -> None:
    client_id = "call_0123abcd_functions.bash:0"
    request = tmp_path / "request.json"
    history = [
        {"role": "user", "content": "hi"},
        {"type": "function_call", "call_id": client_id, "name": "bash", "arguments": "{}"},
        {"type": "function_call_output", "call_id": client_id, "output": "ok"},
    ]
    request.write_bytes(orjson.dumps({"model": "kimi-k2", "input": history}))
    body = {
        "id": "resp_1",
        "object": "response",
        "output": [
            {
                "type": "function_call",
                "call_id": "functions.bash:0",
                "name": "bash",
                "arguments": "{}",
            }
        ],
    }
    capture = tmp_path / "body.json"
    capture.write_bytes(orjson.dumps(body))
    result = run([str(capture), "--request", str(request), "--explain"])
    assert result.returncode == 0, result.stderr
    err = result.stderr.decode()
    assert f"history: call_id '{client_id}' (bash) -> upstream 'functions.bash:0'" in err
    assert "replay: bash call_id 'functions.bash:0'" in err and "function_call_output" in err
