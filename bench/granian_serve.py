"""The proxy's app served by granian instead of uvicorn: the benchmark's server comparison.

Not a supported way to run the proxy (`toolcall-proxy serve` runs uvicorn, whose drain, limits
and malformed-head answers SPEC §6 relies on; docs/performance.md, "ASGI servers"): this exists so
`python -m bench` can put the same app on another server, with the same flags, and measure
the difference. granian is installed by `make bench` only.

    python -m bench.granian_serve [--workers N] serve-flags...
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from proxy.config.load import FLAGS_ENV, add_serve_flags, settings_from_flags


def main(argv: list[str]) -> int:
    from granian import Granian
    from granian.constants import Interfaces, Loops

    parser = argparse.ArgumentParser(prog="python -m bench.granian_serve")
    add_serve_flags(parser)
    flags = vars(parser.parse_args(argv))
    settings = settings_from_flags(flags)
    # Each granian worker builds the app from the flags, as `serve --workers` has uvicorn's.
    os.environ[FLAGS_ENV] = json.dumps(flags)
    Granian(
        "proxy.server.app:app_from_environment",
        address=settings.host,
        port=settings.port,
        interface=Interfaces.ASGI,
        workers=settings.workers,
        loop=Loops.uvloop,
        factory=True,
        log_access=False,
    ).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
