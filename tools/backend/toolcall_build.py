"""The project's build backend: setuptools', with mypyc's requirements only when asked for.

The compiled build is opt-in, as black and mypy ship theirs: `TOOLCALL_PROXY_COMPILE=1` at
build time compiles setup.py's COMPILED modules with mypyc (the wheel `make wheel` builds and
the Docker image install); any other build (an editable install, `make run`, `make test`)
builds only the two small C extensions, in seconds. mypyc must see the packages the compiled
modules import (setup.py says why), so those are build requirements of a compiled build only:
a plain build does not download mypy and the runtime dependencies twice.
"""

from __future__ import annotations

import os
from typing import Any

from setuptools import build_meta
from setuptools.build_meta import (  # noqa: F401 -- the hooks this backend passes through
    build_editable,
    build_sdist,
    build_wheel,
    get_requires_for_build_sdist,
    prepare_metadata_for_build_editable,
    prepare_metadata_for_build_wheel,
)

COMPILE_VARIABLE = "TOOLCALL_PROXY_COMPILE"
# What a compiled build imports, pinned as the runtime dependencies are (pyproject.toml).
COMPILE_REQUIRES = [
    "mypy>=2.4,<3",
    "httptools>=0.6",
    "httpx>=0.27,<0.29",
    "orjson>=3.10",
    "prometheus-client>=0.20",
    "uvicorn>=0.54,<0.55",
]


def compiling() -> bool:
    return os.environ.get(COMPILE_VARIABLE, "") == "1"


def get_requires_for_build_wheel(config_settings: dict[str, Any] | None = None) -> list[str]:
    extra = COMPILE_REQUIRES if compiling() else []
    return [*build_meta.get_requires_for_build_wheel(config_settings), *extra]


def get_requires_for_build_editable(config_settings: dict[str, Any] | None = None) -> list[str]:
    extra = COMPILE_REQUIRES if compiling() else []
    return [*build_meta.get_requires_for_build_editable(config_settings), *extra]
