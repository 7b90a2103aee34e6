"""UpstreamClient.build_request builds the request httpx would, and fails loudly when httpx moves.

`proxy.upstream.client.request_headers` does in one pass what httpx does in two private helpers,
`BaseClient._merge_headers` and `Request._prepare` (with `Headers.update` under the first).
pyproject.toml pins the httpx releases whose helpers it was checked against; these tests
fail on any other release whose helpers differ in code, and on any request whose headers,
URL, body or timeout differ from httpx's own.
"""

from __future__ import annotations

import ast
import hashlib
import inspect

import httpx
import httpx._client
import httpx._models
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from proxy.upstream.client import UpstreamClient, request_headers
from proxy.upstream.transport import HttptoolsTransport, request_head

# sha256 (first 16 hex digits) of each helper's code as ast.unparse prints it, so formatting
# and comments do not count; the same in httpx 0.27.0, 0.27.2 and 0.28.1.
COPIED = {
    ("_models", "Request", "_prepare"): "e20a3f110bf95f24",
    ("_models", "Headers", "update"): "dda76904cc803a35",
    ("_client", "BaseClient", "_merge_headers"): "39ba45e823afc696",
}
MODULES = {"_models": httpx._models, "_client": httpx._client}


def fingerprint(module: str, cls: str, function: str) -> str:
    tree = ast.parse(inspect.getsource(MODULES[module]))
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == function:
                    return hashlib.sha256(ast.unparse(item).encode()).hexdigest()[:16]
    return "missing"


@pytest.mark.parametrize("helper", list(COPIED), ids=lambda h: ".".join(h[1:]))
def test_the_httpx_helpers_request_headers_follows_are_unchanged(
    helper: tuple[str, str, str],
) -> None:
    assert fingerprint(*helper) == COPIED[helper], (
        f"httpx {httpx.__version__} changed {'.'.join(helper[1:])}: check "
        "proxy.upstream.client.request_headers against it, then update COPIED and the httpx range "
        "in pyproject.toml"
    )


NAMES = st.sampled_from(
    [
        "Host",
        "host",
        "Content-Length",
        "content-length",
        "Transfer-Encoding",
        "User-Agent",
        "user-agent",
        "Accept",
        "accept-encoding",
        "Connection",
        "authorization",
        "x-request-id",
    ]
)
VALUES = st.text(alphabet="abc019 /;=*", min_size=0, max_size=8)
HEADER = st.tuples(NAMES, VALUES).map(
    lambda h: h if len(h[1]) % 2 else (h[0].encode(), h[1].encode())  # str and bytes pairs
)
URLS = st.sampled_from(
    [
        "http://127.0.0.1:9/v1/chat/completions",
        "https://api.example.com:8443/v1/models?limit=2",
        "http://h/v1/x",
        "http://[::1]:8000/v1/embeddings",
    ]
)
TIMEOUTS = st.sampled_from(
    [httpx.USE_CLIENT_DEFAULT, None, 5.0, httpx.Timeout(connect=1.0, read=2.0, write=3, pool=4)]
)


FIXED = httpx.Timeout(connect=1.0, read=2.0, write=3.0, pool=4.0)


@settings(max_examples=300, deadline=None)
@example("POST", "http://127.0.0.1:9/v1/chat/completions", [("x-request-id", "r1")], b"{}", FIXED)
@example("POST", "http://h/v1/x", [("User-Agent", "sdk/1"), ("host", "other")], b"", FIXED)
@example("GET", "https://api.example.com:8443/v1/models?limit=2", [("accept", "*/*")], None, FIXED)
@example("POST", "http://h/v1/x", [("Content-Length", "3")], b"abc", FIXED)
@example("PUT", "http://h/v1/x", None, None, FIXED)
@given(
    method=st.sampled_from(["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "post"]),
    url=URLS,
    headers=st.none() | st.lists(HEADER, max_size=6),
    content=st.sampled_from([None, b"", b"{}", b"x" * 300]),
    timeout=TIMEOUTS,
)
def test_build_request_is_httpx_build_request(
    method: str,
    url: str,
    headers: list[tuple[str, str]] | None,
    content: bytes | None,
    timeout: object,
) -> None:
    ours = UpstreamClient(transport=HttptoolsTransport(), timeout=7.0)
    theirs = httpx.AsyncClient(timeout=7.0)
    for _ in range(2):  # the second time from the parsed-URL cache
        a = ours.build_request(method, url, headers=headers, content=content, timeout=timeout)
        b = theirs.build_request(method, url, headers=headers, content=content, timeout=timeout)
        assert (a.method, a.url, a.headers.raw, a.content, a.extensions) == (
            b.method,
            b.url,
            b.headers.raw,
            b.content,
            b.extensions,
        )


BYTES_HEADER = st.tuples(
    NAMES.map(str.encode), st.binary(max_size=8).filter(lambda v: b"\r" not in v and b"\n" not in v)
)


@settings(max_examples=200, deadline=None)
@example("POST", [(b"x-%s", b"a%sb")], [b"%d%%"], b"{}")
@example("GET", [(b"accept", b"*/*"), (b"Host", b"other")], [b"x/y", b"h"], b"")
@given(
    method=st.sampled_from(["GET", "POST", "PUT", "post"]),
    headers=st.lists(BYTES_HEADER, max_size=5),
    later=st.lists(st.binary(max_size=8).filter(lambda v: b"\r" not in v and b"\n" not in v)),
    content=st.sampled_from([b"", b"{}", b"x" * 300]),
)
def test_a_planned_request_head_is_the_head_of_the_merged_headers(
    method: str, headers: list[tuple[bytes, bytes]], later: list[bytes], content: bytes
) -> None:
    """open_raw's head comes from a plan per shape of call after the first: the same bytes
    as `request_head` of `request_headers`, with the same header names and other values."""
    client = UpstreamClient(transport=HttptoolsTransport())
    path, netloc = b"/v1/chat/completions", b"127.0.0.1:9"
    second = [
        (name, later[i] if i < len(later) else value) for i, (name, value) in enumerate(headers)
    ]
    for sent in (headers, second, second):
        merged = request_headers(client.headers._list, sent, method, netloc, content)
        assert client._head(method, path, netloc, sent, content) == request_head(
            method, path, merged
        )


@pytest.mark.parametrize("value", [b"a\r\nx-smuggled: 1", b"a\n", b"\rb"])
def test_a_planned_request_head_refuses_a_line_break_in_a_value(value: bytes) -> None:
    client = UpstreamClient(transport=HttptoolsTransport())
    path, netloc = b"/v1/chat/completions", b"127.0.0.1:9"
    client._head("POST", path, netloc, [(b"x-a", b"ok")], b"{}")  # the shape now has a plan
    with pytest.raises(httpx.LocalProtocolError):
        client._head("POST", path, netloc, [(b"x-a", value)], b"{}")
