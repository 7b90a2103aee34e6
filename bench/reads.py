"""How the core benches cut an upstream body into the reads they feed.

Two shapes, both real: 16 KiB reads cut wherever they fall (a fast upstream's burst, or a
proxy reading behind a slow client), where the surfaces' runs take many deltas a read; and
one event a read (`--paced`), what a model streaming at its own pace gives the proxy: each
delta arrives alone, so what a delta costs on its own is what a real agent's stream costs.
"""

from __future__ import annotations

import argparse

READ_BYTES = 16 * 1024
_BLANK = b"\n\n"


def reads_of(body: bytes, paced: bool) -> list[bytes]:
    """`body` as 16 KiB reads, or (`paced`) one read per event (each up to its blank line)."""
    if not paced:
        return [body[i : i + READ_BYTES] for i in range(0, len(body), READ_BYTES)]
    *events, rest = body.split(_BLANK)  # `rest`: after the last blank line (nothing, mostly)
    return [event + _BLANK for event in events] + ([rest] if rest else [])


def add_paced_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--paced",
        action="store_true",
        help="one event a read (a model streaming at its own pace), not 16 KiB reads",
    )
