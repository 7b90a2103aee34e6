"""`toolcall-proxy doctor`: its flags and its exit status.

Exit 0 when the provider answered Chat Completions (whatever it got wrong), 1 when it did
not (nothing to judge: the report says why), 2 for a usage mistake.
"""

from __future__ import annotations

import argparse
import os
import sys

from proxy.doctor.script import MAX_REQUESTS, TURNS

DEFAULT_TIMEOUT = 180.0

EPILOG = f"""\
Sends at most {MAX_REQUESTS} requests (two {TURNS}-turn tool conversations, streaming and not,
and one small request per other API surface) and stops at --timeout. The tools it offers are
harmless lookups whose results are canned text: nothing a model asks for is run.

examples:
  toolcall-proxy doctor --upstream https://api.moonshot.ai/v1 --model kimi-k2-0905-preview --upstream-key-env MOONSHOT_API_KEY
  toolcall-proxy doctor --upstream http://127.0.0.1:8000/v1 --model Qwen/Qwen3-8B --json
"""


def add_doctor_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "doctor",
        help="report what a provider does wrong with tool calls, and the route settings that fit",
        description="Hold a short scripted tool-calling conversation with a provider and report "
        "the quirks it shows and the route settings the proxy should use for it.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--upstream", required=True, help="the provider's base URL, e.g. https://host/v1"
    )
    parser.add_argument("--model", required=True, help="the model to talk to")
    parser.add_argument(
        "--upstream-key-env", help="environment variable holding the provider's key"
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        help=f"seconds for the whole run (default {DEFAULT_TIMEOUT:g})",
    )


def run_doctor(args: argparse.Namespace) -> int:
    import orjson

    from proxy.config.load import ConfigError, upstream_base_url
    from proxy.doctor.diagnose import diagnose
    from proxy.doctor.report import as_json, render_text

    try:
        upstream = upstream_base_url(args.upstream, "--upstream")
    except ConfigError as exc:
        print(f"toolcall-proxy doctor: {exc}", file=sys.stderr)
        return 2
    key = None
    if args.upstream_key_env:
        key = os.environ.get(args.upstream_key_env)
        if not key:
            print(
                f"toolcall-proxy doctor: --upstream-key-env: ${args.upstream_key_env} is not set",
                file=sys.stderr,
            )
            return 2
    if not args.timeout > 0:
        print("toolcall-proxy doctor: --timeout must be greater than 0", file=sys.stderr)
        return 2
    diagnosis = diagnose(
        upstream, args.model, key, key_env=args.upstream_key_env, timeout=args.timeout
    )
    if args.json:
        sys.stdout.write(
            orjson.dumps(as_json(diagnosis), option=orjson.OPT_INDENT_2).decode() + "\n"
        )
    else:
        sys.stdout.write(render_text(diagnosis))
    return 0 if diagnosis.responses else 1
