"""`toolcall-proxy sanitize --explain` on Anthropic Messages captures (streams and bodies)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson

LS = {"command": "ls"}


def ev(data: dict[str, object]) -> bytes:
    return b"event: " + str(data["type"]).encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


STREAM = b"".join(
    ev(e)
    for e in [
        {
            "type": "message_start",
            "message": {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": "kimi-k2",
                "content": [],
                "usage": {"input_tokens": 3, "output_tokens": 1},
            },
        },
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {
                "type": "tool_use",
                "id": "functions.Bash:0",
                "name": "Bash",
                "input": LS,
            },
        },
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn"},
            "usage": {"output_tokens": 4},
        },
        {"type": "message_stop"},
    ]
)
HISTORY_ID = "toolu_1_0_abcd" + "bf4b"  # minted from functions.Bash:0 (its digest is bf4b)
REQUEST = {
    "model": "kimi-k2",
    "max_tokens": 64,
    "tools": [{"name": "Bash", "input_schema": {"type": "object"}}],
    "messages": [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": HISTORY_ID, "name": "Bash", "input": LS}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": HISTORY_ID, "content": "a"}],
        },
    ],
}


def run(args: list[str]) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "proxy", "sanitize", *args],
        capture_output=True,
        timeout=60,
        check=False,
    )


def test_an_anthropic_stream_is_told_apart_and_explained(tmp_path: Path) -> None:
    capture = tmp_path / "capture.sse"
    capture.write_bytes(STREAM)
    done = run([str(capture), "--explain"])
    assert done.returncode == 0, done.stderr
    assert b'"type":"tool_use","id":"toolu_1_0_' in done.stdout
    assert b'"stop_reason":"tool_use"' in done.stdout
    err = done.stderr.decode()
    assert "id 'functions.Bash:0' -> 'toolu_1_0_" in err
    assert "whole_input" in err and "end_turn -> tool_use" in err


def test_a_replay_in_an_anthropic_capture_is_explained(tmp_path: Path) -> None:
    capture = tmp_path / "capture.sse"
    capture.write_bytes(STREAM)
    request = tmp_path / "request.json"
    request.write_bytes(orjson.dumps(REQUEST))
    done = run([str(capture), "--request", str(request), "--explain"])
    assert done.returncode == 0, done.stderr
    err = done.stderr.decode()
    assert f"history: id '{HISTORY_ID}' (Bash) -> upstream 'functions.Bash:0'" in err
    assert "replay: Bash id 'functions.Bash:0'" in err and "is_error tool_result" in err
    assert b"tool_use" not in done.stdout  # the client never sees the replay


def test_an_anthropic_message_body_is_read_whole(tmp_path: Path) -> None:
    body = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "kimi-k2",
        "content": [{"type": "tool_use", "id": "grep_3", "name": "grep", "input": {}}],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }
    capture = tmp_path / "body.json"
    capture.write_bytes(orjson.dumps(body))
    done = run([str(capture), "--explain"])
    assert done.returncode == 0, done.stderr
    out = orjson.loads(done.stdout)
    assert out["content"][0]["id"].startswith("toolu_1_0_")
    assert "(counter_shaped)" in done.stderr.decode()
