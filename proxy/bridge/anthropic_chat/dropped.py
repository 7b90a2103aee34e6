"""What a request mapping leaves out, said once each and in order (SPEC §9: nothing is
dropped silently; the shell names these in its log line and a response header)."""

from __future__ import annotations


class Dropped:
    __slots__ = ("_names",)

    def __init__(self) -> None:
        self._names: dict[str, None] = {}  # an ordered set

    def add(self, name: str) -> None:
        self._names.setdefault(name, None)

    def names(self) -> tuple[str, ...]:
        return tuple(self._names)
