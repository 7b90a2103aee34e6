"""The proxy's compiled parts.

- The stream hot path's C parts: the byte scan (proxy/chat/sse_scan.py says why) and the
  chunked body decoder (proxy/upstream/_chunked.c says why). Optional: where they cannot be compiled
  the install still succeeds, the pure-Python scan serves and httptools decodes the bodies.
- The sans-IO cores, compiled from their own Python source by mypyc (`COMPILED` below): the
  same code, type-checked, as C. On the stream agents get from a Kimi-like upstream this takes
  about a fifth of the proxy's instructions away (docs/performance.md, "Instructions per request"), with no
  second implementation to keep in step. Opt-in, as black and mypy ship theirs:
  `TOOLCALL_PROXY_COMPILE=1` at build time (`make wheel`, the Docker image); every other
  install, editable ones included, runs them as Python and builds in seconds.

Everything else about the package is in pyproject.toml. The extensions are declared here
because setuptools' pyproject table for extensions is still experimental and warns on every
build.
"""

from __future__ import annotations

import os

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

# The modules mypyc compiles: the per-request and per-event work of Chat Completions' core
# and the surface-neutral core under it. A class that an interpreted class subclasses cannot be
# compiled (mypyc refuses the subclass at import), and a test cannot replace a compiled
# function or method (compiled callers call it directly): tests/conftest.py checks that what is
# imported was compiled from the source that is there. No package's __init__: mypyc places
# a module by the shared library's place, which is inside the package (group_name below), so
# a compiled package would look for its modules in the wrong folder. Compiled code checks
# its arguments' types: a test's stand-in must be of the class it stands for.
#
# The shell (from `proxy/server/app.py` on: the app, the exchange handler, the upstream client and
# transport, the request's log line and metrics) is compiled too.
# Alone, its round loop's coroutines cost more compiled than interpreted (307,850 instructions
# for the small request against 303,800), but compiled with all it calls the small request
# went from 295,886 to 220,909 (docs/performance.md, "Instructions per request"). What that asks of it:
# - mypyc compiles no async generator: a compiled module iterates with a class
#   (`__aiter__`/`__anext__`).
# - A class whose base is not compiled (httpx's, uvicorn's, logging's, or ours in a module not
#   listed) is marked `@mypyc_attr(native_class=False)`; mypyc does not look at the base to
#   decide. The hot work of such a class lives in a native one beside it (ConnectionPool,
#   _RawCalls), whose methods compiled code calls directly.
# - mypyc must see those bases, and it writes different C for what it sees: pyproject.toml's
#   build requirements bring every package the compiled modules import. Seen as Any (pip's
#   isolated build environment of a fresh install had none of them), a marked class's
#   `super().__init__` became object's and an unmarked one with a Protocol base failed at run
#   time, while a build in a developer's environment (where they were installed) worked.
#   Seen, a value is checked against its declared type: where a package's stubs say less than
#   the truth (httptools' URL parts may be None), the value is typed Any.
# - A subclass cannot replace a base's declared attribute with a property: compiled methods of
#   the base read the attribute's slot directly (the core's `RoundExchange` asks its grammar
#   through methods instead). The three surfaces' exchanges are compiled with
#   `proxy/core/exchange.py`, since each subclasses `RoundExchange`.
COMPILED = [
    "proxy/chat/calls.py",
    "proxy/chat/codec.py",
    "proxy/chat/choice_state.py",
    "proxy/chat/choices.py",
    "proxy/chat/continuation.py",
    "proxy/chat/exchange.py",
    "proxy/chat/followup.py",
    "proxy/chat/head.py",
    "proxy/chat/history.py",
    "proxy/chat/lane.py",
    "proxy/chat/message.py",
    "proxy/chat/round_events.py",
    "proxy/chat/routing.py",
    "proxy/chat/slot.py",
    "proxy/chat/stream.py",
    "proxy/anthropic/exchange.py",
    "proxy/responses/exchange.py",
    "proxy/core/decide.py",
    "proxy/core/events.py",
    "proxy/core/guard.py",
    "proxy/core/ids.py",
    "proxy/core/jsoncomplete.py",
    "proxy/core/ledger.py",
    "proxy/core/notes.py",
    "proxy/core/body.py",
    "proxy/core/rounds.py",
    "proxy/core/exchange.py",
    "proxy/core/usage.py",
    "proxy/core/textcalls/checks.py",
    "proxy/core/textcalls/extent.py",
    "proxy/core/textcalls/formats.py",
    "proxy/core/textcalls/jsonish.py",
    "proxy/core/textcalls/markers.py",
    "proxy/core/textcalls/model.py",
    "proxy/core/textcalls/scanner.py",
    "proxy/core/textcalls/tagged.py",
    "proxy/core/textcalls/whole.py",
    "proxy/server/client_writer.py",
    "proxy/server/exchange_report.py",
    "proxy/core/sse.py",
    "proxy/core/nonjson.py",
    "proxy/server/app.py",
    "proxy/server/asgi.py",
    "proxy/server/exchange_handler.py",
    "proxy/server/upstream_answer.py",
    "proxy/server/forwarding.py",
    "proxy/ops/observability.py",
    "proxy/server/progress.py",
    "proxy/config/settings.py",
    "proxy/upstream/transport.py",
    "proxy/upstream/read_wait.py",
    "proxy/upstream/client.py",
    "proxy/upstream/call.py",
]

# mypyc type-checks what it compiles. In an isolated build environment the runtime
# dependencies (orjson, httpx, ...) are not installed: their names are Any to it, which
# changes nothing in the generated code but would fail the project's strict mypy settings
# (`make typecheck` holds the source to those, with the dependencies installed).
_MYPYC_FLAGS = [
    "--ignore-missing-imports",
    "--follow-imports=silent",
    "--no-warn-return-any",
    "--allow-subclassing-any",
    "--allow-untyped-decorators",
    "--no-warn-unused-ignores",
]


def _compiled_modules() -> list[Extension]:
    # Opt-in (tools/backend/toolcall_build.py, which brings mypyc's build requirements then): a
    # plain or editable install runs these modules as Python, and a source edit is live.
    if os.environ.get("TOOLCALL_PROXY_COMPILE", "") != "1":
        return []
    from mypyc.build import mypycify  # a compiled build that cannot compile fails, loudly
    # One shared library inside the package (not a top-level module of a hashed name).
    return list(mypycify([*_MYPYC_FLAGS, *COMPILED], group_name="proxy._compiled"))


# The commands that only describe the package; they ask build_ext for its sources (the manifest
# lists them) but build nothing.
_DESCRIBE_ONLY = {"egg_info", "dist_info", "sdist"}


class BuildExt(build_ext):
    """Generates the mypyc modules' C only when a command that builds is asked for.

    A PEP 517 build runs this file three times (the build requirements, the metadata, the
    wheel) and each run lists the extensions' sources; generating the C at the top level
    spent about half a minute in each of the first two, which build nothing.
    """

    def finalize_options(self) -> None:
        # A command may be set up again (an editable install does): add what is not there yet.
        planned = list(self.distribution.ext_modules or [])
        builds = not set(self.distribution.commands) <= _DESCRIBE_ONLY
        if builds and not any(ext.name.startswith("proxy._compiled") for ext in planned):
            planned.extend(_compiled_modules())
        self.distribution.ext_modules = planned
        super().finalize_options()


setup(
    cmdclass={"build_ext": BuildExt},
    ext_modules=[
        Extension("proxy.chat._sse_scan", sources=["proxy/chat/_sse_scan.c"], optional=True),
        Extension("proxy.upstream._chunked", sources=["proxy/upstream/_chunked.c"], optional=True),
    ],
)
