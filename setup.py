"""The stream hot path's C parts: the byte scan (proxy/chat/sse_scan.py says why) and the
chunked body decoder (proxy/_chunked.c says why).

Everything else about the package is in pyproject.toml. The extension is declared here
because setuptools' pyproject table for extensions is still experimental and warns on
every build. Optional: where they cannot be compiled the install still succeeds, the
pure-Python scan serves and httptools decodes the bodies too.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("proxy.chat._sse_scan", sources=["proxy/chat/_sse_scan.c"], optional=True),
        Extension("proxy._chunked", sources=["proxy/_chunked.c"], optional=True),
    ]
)
