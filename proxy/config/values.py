"""How one setting's value is read and checked, whichever source it comes from.

A flag, an environment variable and a YAML value all go through the same `Kind.parse`, so a
setting accepts the same values and names the same mistake everywhere; only the field name
differs (`--read-timeout (TOOLCALL_PROXY_READ_TIMEOUT)` or `routes[0].read_timeout`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit


class ConfigError(ValueError):
    """A configuration mistake, with the field (and YAML line when known) that causes it."""

    def __init__(self, field_name: str, message: str, line: int | None = None):
        where = f"{field_name} (line {line})" if line else field_name
        super().__init__(f"{where}: {message}")
        self.field_name = field_name
        self.detail = message
        self.line = line


Check = Callable[[object, str, int | None], Any]


class Kind:
    """What values a setting takes: checked by `parse`, shown by argparse and in the README.

    Plain classes, not dataclasses: the command line imports them on every start, and each
    dataclass costs about a millisecond to create.
    """

    # An empty environment variable counts as not set, but for a kind that says otherwise:
    # then the empty value is parsed (and may be refused).
    empty_is_unset = True

    def __init__(
        self,
        metavar: str,
        arg_type: Callable[[str], Any] = str,
        choices: tuple[str, ...] | None = None,
    ) -> None:
        self.metavar = metavar  # how a value is shown in a synopsis
        self.arg_type = arg_type  # what argparse converts a flag with
        self.choices = choices  # what argparse allows, when it is a fixed set

    def parse(self, value: object, field_name: str, line: int | None) -> Any:
        raise NotImplementedError


class Choice(Kind):
    def __init__(self, values: tuple[str, ...]) -> None:
        super().__init__("|".join(values), choices=values)
        self.values = values

    def parse(self, value: object, field_name: str, line: int | None) -> str:
        text = str(value).strip().lower()
        if isinstance(value, bool):  # YAML 1.1 reads a bare `off` (or `on`) as a boolean
            text = "on" if value else "off"
        if text not in self.values:
            raise ConfigError(
                field_name, f"expected one of {', '.join(self.values)}, got {value!r}", line
            )
        return text


class Switch(Kind):
    """on or off (YAML's true/false and yes/no too)."""

    def __init__(self) -> None:
        super().__init__("on|off", choices=("on", "off"))

    def parse(self, value: object, field_name: str, line: int | None) -> bool:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("on", "true", "yes", "1"):
            return True
        if text in ("off", "false", "no", "0"):
            return False
        raise ConfigError(field_name, f"expected on or off, got {value!r}", line)


class Number(Kind):
    def __init__(
        self,
        metavar: str,
        *,
        integer: bool = False,
        positive: bool = False,  # greater than 0 (otherwise: not negative)
        maximum: int | None = None,
    ) -> None:
        super().__init__(metavar, int if integer else float)
        self.integer = integer
        self.positive = positive
        self.maximum = maximum

    def parse(self, value: object, field_name: str, line: int | None) -> Any:
        kind = "a whole number" if self.integer else "a number"
        if isinstance(value, bool):  # YAML reads `yes`/`on` as booleans; int(True) would be 1
            raise ConfigError(field_name, f"expected {kind}, got {value!r}", line)
        try:
            number = int(str(value)) if self.integer else float(str(value))
        except ValueError:
            raise ConfigError(field_name, f"expected {kind}, got {value!r}", line) from None
        if not math.isfinite(number):
            raise ConfigError(field_name, f"expected a finite number, got {value!r}", line)
        if self.positive and number <= 0:
            raise ConfigError(field_name, f"must be greater than 0, got {value!r}", line)
        if number < 0:
            raise ConfigError(field_name, f"must not be negative, got {value!r}", line)
        if self.maximum is not None and number > self.maximum:
            raise ConfigError(field_name, f"expected 0 to {self.maximum}, got {number}", line)
        return number


class Text(Kind):
    """One string, checked (and normalized) by `check`."""

    def __init__(self, check: Check, metavar: str, *, nullable: bool = False) -> None:
        super().__init__(metavar)
        self.check = check
        self.nullable = nullable  # YAML's null is a value: none (a route clearing a default)

    def parse(self, value: object, field_name: str, line: int | None) -> Any:
        if value is None and self.nullable:
            return None
        return self.check(value, field_name, line)


class Items(Kind):
    """A list: comma-separated in a flag or the environment, a list or that string in YAML."""

    def __init__(self, check: Check, metavar: str, noun: str) -> None:
        super().__init__(metavar)
        self.check = check
        self.noun = noun  # what the items are, for the message on a value that is no list

    def parse(self, value: object, field_name: str, line: int | None) -> tuple[Any, ...]:
        items = value.split(",") if isinstance(value, str) else value
        if not isinstance(items, list):
            raise ConfigError(field_name, f"expected a list of {self.noun}", line)
        return tuple(
            self.check(item, field_name, line)
            for item in items
            if not (isinstance(item, str) and not item.strip())
        )


class Keys(Items):
    """Proxy keys: a list that, once given, must hold a key. An empty (or all blank) value
    would turn authentication off without a word, so it is refused (SPEC §6)."""

    empty_is_unset = False

    def parse(self, value: object, field_name: str, line: int | None) -> tuple[Any, ...]:
        keys = super().parse(value, field_name, line)
        if not keys:
            raise ConfigError(
                field_name,
                "is set but holds no key, which would leave the proxy open to any client: "
                "give one or more keys (comma-separated), or unset it to run without keys",
                line,
            )
        return keys


# -- checks of one string ---------------------------------------------------------------------


def any_text(value: object, field_name: str, line: int | None = None) -> str:
    return str(value)


def tool_glob(value: object, field_name: str, line: int | None = None) -> str:
    """A tool-name pattern (`*wait*`): matched case-insensitively, as fnmatch reads it."""
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(field_name, f"expected a tool-name pattern, got {value!r}", line)
    return value.strip()


def secret(value: object, field_name: str, line: int | None = None) -> str:
    """A key: kept as given (trimmed), one a header can carry, and never echoed."""
    key = str(value).strip()
    problem = header_value_problem(key)
    if problem is not None:
        raise ConfigError(field_name, f"a key {problem}", line)
    return key


def header_value_problem(value: str) -> str | None:
    """Why `value` cannot be sent in an HTTP header as it is, or None: a line break (it would
    end the header), another control character, or one outside Latin-1 (a header's bytes).
    Names the character's position and kind, never the character: the value is a secret."""
    for position, char in enumerate(value, 1):
        code = ord(char)
        if char in "\r\n":
            where = "ends with" if value[position - 1 :].strip("\r\n") == "" else "holds"
            return (
                f"{where} a line break (character {position} of {len(value)}), which a "
                "header cannot carry: remove it (a key read from a file often ends with one)"
            )
        if code < 0x20 or code == 0x7F:
            return f"holds a control character (character {position}), which a header cannot carry"
        if code > 0xFF:
            return (
                f"holds a character outside Latin-1 (character {position}), which a header "
                "cannot carry"
            )
    return None


def listen_address(value: object, field_name: str, line: int | None = None) -> str:
    if not isinstance(value, str) or not value.strip() or any(c.isspace() for c in value.strip()):
        raise ConfigError(field_name, f"expected an address to listen on, got {value!r}", line)
    return value.strip()


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def env_var_name(value: object, field_name: str, line: int | None = None) -> str:
    if not _ENV_NAME.fullmatch(str(value)):
        # The value may be a pasted key: never echo it.
        raise ConfigError(
            field_name,
            "expected the name of an environment variable (letters, digits and _), "
            "not the key itself",
            line,
        )
    return str(value)


def _port_is_valid(parts: Any) -> bool:
    try:
        parts.port  # noqa: B018 -- parsing the port is the check
    except ValueError:
        return False
    return True


def upstream_base_url(value: object, field_name: str, line: int | None = None) -> str:
    """A validated upstream base URL (http or https, a host, no credentials, query or fragment)."""
    url = str(value).strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ConfigError(field_name, f"expected an http:// or https:// URL, got {value!r}", line)
    parts = urlsplit(url)
    if not _port_is_valid(parts):
        raise ConfigError(field_name, f"the port of {value!r} is not valid", line)
    if not parts.hostname or any(c.isspace() for c in url):
        raise ConfigError(field_name, f"expected a URL with a host name, got {value!r}", line)
    if parts.username is not None or parts.password is not None:
        # Credentials in the URL would be printed by check-config and could reach logs.
        raise ConfigError(
            field_name, "must not contain credentials; name a key with upstream_key_env", line
        )
    if parts.query or parts.fragment or "?" in url or "#" in url:
        raise ConfigError(field_name, f"must not have a query or fragment, got {value!r}", line)
    return url


def cors_origin(value: object, field_name: str, line: int | None = None) -> str:
    """One browser origin (`scheme://host[:port]`, lower-cased), or `*` for any origin."""
    if not isinstance(value, str):
        raise ConfigError(field_name, f"expected an origin string, got {value!r}", line)
    origin = value.strip().rstrip("/").lower()
    if origin == "*":
        return origin
    parts = urlsplit(origin)
    if not _port_is_valid(parts):
        raise ConfigError(field_name, f"the port of {value!r} is not valid", line)
    if (
        parts.scheme not in ("http", "https")
        or not parts.hostname
        or parts.path
        or parts.query
        or parts.fragment
        or parts.username is not None
        or any(c.isspace() for c in origin)
    ):
        raise ConfigError(
            field_name, f"expected an origin like https://app.example.com, got {value!r}", line
        )
    return origin
