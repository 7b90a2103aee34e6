"""Coverage-guided fuzzing of the sans-IO core with atheris (libFuzzer), for long runs.

It drives the same properties as tests/reliability/test_fuzz_core.py: the first input byte
picks a target, the rest is either handed to a hypothesis test through `fuzz_one_input`
(structured: random histories, chunk shapes, framings and read splits, checked against
SPEC §4's invariants) or fed as raw upstream bytes to a StreamSanitizer. Any exception that
escapes the core, or any broken invariant, is a crash: libFuzzer saves the input as
`crash-<sha1>`; run this script with that file as its argument to replay it.

    .venv/bin/pip install -r fuzz/requirements.txt
    .venv/bin/python fuzz/fuzz_stream.py -max_total_time=600 -timeout=30 fuzz/corpus
"""

from __future__ import annotations

import sys
from pathlib import Path

import atheris

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

with atheris.instrument_imports(include=["proxy"]):
    pass

from proxy.chat.history import translate_request
from proxy.chat.sse_scan import CONTENT, MARKUP, USAGE, native_scan, scan_py
from proxy.chat.stream import StreamSanitizer
from proxy.core.decide import ResponseIds
from proxy.core.guard import GuardState
from proxy.upstream._chunked import Dechunker
from tests.reliability import test_fuzz_core as properties
from tests.reliability.invariants import check_stream
from tests.upstream.test_chunked import by_httptools

POLICIES = ("auto", "always", "collisions", "off")
HISTORY = {
    "model": "kimi-k2",
    "messages": [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "tool_calls": [
                {
                    "id": "functions.run_shell_command:0",
                    "type": "function",
                    "function": {"name": "run_shell_command", "arguments": '{"command":"ls"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "functions.run_shell_command:0", "content": "ok"},
    ],
}


def raw_stream(data: bytes) -> None:
    """Raw upstream bytes, cut where the input says, against a history with a replayable call."""
    provider = atheris.FuzzedDataProvider(data)
    policy = POLICIES[provider.ConsumeIntInRange(0, len(POLICIES) - 1)]
    cuts = sorted(provider.ConsumeIntListInRange(provider.ConsumeIntInRange(0, 8), 0, 4096))
    body = provider.ConsumeBytes(provider.remaining_bytes())
    pieces, start = [], 0
    for cut in cuts:
        pieces.append(body[start:cut])
        start = max(start, cut)
    pieces.append(body[start:])
    translated = translate_request(dict(HISTORY), "auto")
    core = StreamSanitizer(ResponseIds(translated.facts, policy, GuardState()))
    out = [part for piece in pieces for part in core.feed(piece)] + core.end()
    check_stream(pieces, b"".join(out), core, policy=policy)


STRUCTURED = [
    properties.test_stream_core_survives_any_upstream_and_keeps_spec4,
    properties.test_completion_core_survives_any_upstream_and_keeps_spec4,
    properties.test_history_translation_survives_any_history,
]


def scan_agreement(data: bytes) -> None:
    """The compiled hot-path scan answers as its pure-Python reference does, and never
    crashes (the C is not coverage-instrumented; its Python twin is)."""
    if native_scan is None:
        raise RuntimeError("proxy.chat._sse_scan is not compiled: reinstall the project")
    for want in (0, USAGE | MARKUP, USAGE | CONTENT):
        native, reference = native_scan(data, want), scan_py(data, want)
        if native != reference:
            raise AssertionError(f"scan({data!r}, {want}): native {native}, python {reference}")


def dechunk_agreement(data: bytes) -> None:
    """The compiled chunked decoder (proxy/upstream/_chunked.c) reads a response body, cut
    where the input says, as httptools reads it whole: a body httptools reads to the end is
    read alike, and a body the decoder reads to the end (bytes past it are `excess`: the
    connection is then not reused) is what httptools reads from the same bytes without the
    excess. Neither ever raises anything but a refusal."""
    provider = atheris.FuzzedDataProvider(data)
    cuts = sorted(provider.ConsumeIntListInRange(provider.ConsumeIntInRange(0, 8), 0, 4096))
    body = provider.ConsumeBytes(provider.remaining_bytes())
    pieces = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True) if b >= a]
    decoder, read = Dechunker(1 << 20), bytearray()
    try:
        for piece in pieces:
            read += b"".join(decoder.feed(piece))
    except ValueError:
        ours: tuple[bytes, bool] | str = "refused"
    else:
        ours = (bytes(read), decoder.done)
    theirs = by_httptools(body)
    if theirs != "refused" and theirs[1] and ours != theirs:
        raise AssertionError(f"dechunk({pieces!r}): ours {ours!r}, httptools {theirs!r}")
    if ours != "refused" and ours[1]:
        whole = by_httptools(body[: len(body) - decoder.excess])
        if whole != ours:
            raise AssertionError(f"dechunk({pieces!r}): ours {ours!r}, httptools {whole!r}")


RAW = [raw_stream, scan_agreement, dechunk_agreement]


def test_one_input(data: bytes) -> None:
    if not data:
        return
    choice, rest = data[0] % (len(STRUCTURED) + len(RAW)), data[1:]
    if choice >= len(STRUCTURED):
        RAW[choice - len(STRUCTURED)](rest)
    else:
        STRUCTURED[choice].hypothesis.fuzz_one_input(rest)  # type: ignore[attr-defined]


def main() -> None:
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
