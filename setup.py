"""The stream hot path's byte scan, in C (proxy/chat/sse_scan.py says why).

Everything else about the package is in pyproject.toml. The extension is declared here
because setuptools' pyproject table for extensions is still experimental and warns on
every build. Optional: where it cannot be compiled the install still succeeds and the
pure-Python scan serves.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("proxy.chat._sse_scan", sources=["proxy/chat/_sse_scan.c"], optional=True)
    ]
)
