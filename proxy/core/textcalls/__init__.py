"""Tool calls leaked into the text: recover them as real tool calls (sans-IO).

When a server's tool parser is off or fails, the model's call arrives inside `content` as
raw markup. `TextCallScanner` is fed one choice's content fragments and hands back text and
recovered calls:
- text flows as it arrives, except from the first character that could start a marker until
  it is resolved: released as text if it is not a call, kept until the block is complete if
  it may be;
- a block becomes calls only if it is complete, parses, and names only offered tools;
  otherwise it is released exactly as it came. Nothing is ever dropped.

Two stages: whole.py decides the one form without a marker (the entire content is a JSON
call), markers.py every format that starts with a marker, listed in formats.py: Kimi,
Hermes/Qwen, Qwen3-coder, GLM-4.5+, DeepSeek V3/V3.1 and V3.2 (DSML), MiniMax-M2, Llama 3
and 4, Mistral, LM Studio, gpt-oss (harmony). Both are linear in the content, however it is
split (markers.py says how).
"""

from __future__ import annotations

from proxy.core.textcalls.markers import MAX_BLOCK_CHARS, MarkerScanner, may_open
from proxy.core.textcalls.model import RecoveredCall, Segment
from proxy.core.textcalls.whole import WholeMessage


class TextCallScanner:
    """Sans-IO: `feed(text) -> list[Segment]`, `end() -> list[Segment]`."""

    __slots__ = ("_markers", "_whole", "holding")

    def __init__(self, offered_tools: frozenset[str]):
        self._whole = WholeMessage(offered_tools)
        self._markers = MarkerScanner(offered_tools)
        # True while the next content must reach the scanner: it holds text back, or has seen
        # no content but whitespace yet (the whole message may still be a JSON call). A plain
        # attribute: the stream's hot path reads it for every chunk.
        self.holding = True

    @property
    def recovered(self) -> int:
        return self._markers.recovered + self._whole.recovered

    @property
    def examined(self) -> int:
        """Characters looked at so far (the linear-time tests count them)."""
        return self._markers.examined + self._whole.examined

    def passes(self, text: str) -> bool:
        """Feed `text` if it goes out whole and unchanged without the stages, which then have
        nothing to do: nothing is held that it could complete, and no marker starts in it.
        True if it did (it is then released, as `feed` would release it); False: feed it."""
        if self.holding or may_open(text):
            return False
        self._markers.examined += len(text)
        return True

    def feed(self, text: str) -> list[Segment]:
        if self.passes(text):  # without the stages' look at its tail character by character
            return [text] if text else []
        passed = self._whole.feed(text)
        out: list[Segment] = []
        if passed:
            self._markers.feed(passed, out)
        self.holding = self._whole.holding or self._markers.holding
        return _merge_text(out)

    def end(self) -> list[Segment]:
        out: list[Segment] = []
        whole = self._whole.end()
        if isinstance(whole, str):
            self._markers.feed(whole, out)
            self._markers.end(out)
        else:
            out.extend(whole)
        self.holding = False
        return _merge_text(out)


def _merge_text(segments: list[Segment]) -> list[Segment]:
    """Adjacent text pieces as one string (joined once: `+=` per piece would be quadratic)."""
    merged: list[Segment] = []
    run: list[str] = []
    for segment in segments:
        if isinstance(segment, str):
            run.append(segment)
            continue
        if run:
            merged.append("".join(run))
            run = []
        merged.append(segment)
    if run:
        merged.append("".join(run))
    return [s for s in merged if s != ""]


__all__ = ["MAX_BLOCK_CHARS", "RecoveredCall", "Segment", "TextCallScanner"]
