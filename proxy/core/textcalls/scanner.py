"""`TextCallScanner`: one choice's content through the two stages (the package's doc says
what they recover). Its own module, compiled with the stages (setup.py: a package's
`__init__` is not compiled)."""

from __future__ import annotations

from proxy.core.textcalls.markers import MarkerScanner, may_open
from proxy.core.textcalls.model import Segment
from proxy.core.textcalls.whole import WholeMessage

# The shortcut (`passes`) on or off: the tests turn it off to hold it to the stages. A module
# attribute, read at each use: compiled callers would not see a replaced `may_open`.
SHORTCUT = True


class TextCallScanner:
    """Sans-IO: `feed(text) -> list[Segment]`, `end() -> list[Segment]`."""

    __slots__ = ("_markers", "_whole", "holding", "staged")

    def __init__(self, offered_tools: frozenset[str]):
        self._whole = WholeMessage(offered_tools)
        self._markers = MarkerScanner(offered_tools)
        # True while the next content must reach the scanner: it holds text back, or has seen
        # no content but whitespace yet (the whole message may still be a JSON call). A plain
        # attribute: the stream's hot path reads it for every chunk.
        self.holding = True
        self.staged = 0  # feeds that went through the stages (the shortcut's tests count them)

    @property
    def in_call(self) -> bool:
        """Text is held that is already part of a possible call (an open marker block, or
        the JSON value a whole message opened), not merely a tail that may grow into a
        marker: a fragment of it lost now would change the call (SPEC §4)."""
        return self._markers.in_block or self._whole.in_value

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
        if not SHORTCUT or self.holding or may_open(text):
            return False
        self._markers.examined += len(text)
        return True

    def takes_plain_start(self, text: str) -> bool:
        """Take `text` as the first content this scanner sees when both stages would pass it
        on whole at once: its first character is neither whitespace nor `{`/`[` (the whole
        message cannot be one JSON call) and no marker can start in it. Then the scanner is
        where `feed(text)` would leave it, returning `[text]`, without the stages' calls.
        False: nothing was done (feed it)."""
        if (
            not SHORTCUT
            or self.staged
            or not self.holding
            or may_open(text)
            or not self._whole.passes_at_once(text)
        ):
            return False
        self._markers.examined += len(text)
        self.holding = self._markers.holding
        return True

    def feed(self, text: str) -> list[Segment]:
        if self.passes(text):  # without the stages' look at its tail character by character
            return [text] if text else []
        self.staged += 1
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


__all__ = ["SHORTCUT", "TextCallScanner"]
