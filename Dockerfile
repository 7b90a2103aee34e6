# syntax=docker/dockerfile:1
# toolcall-proxy: build a wheel, install it into a clean virtualenv, run it as a non-root user.
#   docker build -t toolcall-proxy .
#   docker run --rm -p 8787:8787 -e TOOLCALL_PROXY_UPSTREAM=http://host:8000/v1 toolcall-proxy
# Configuration is by environment (every flag is TOOLCALL_PROXY_<FLAG>), or mount a routes
# file and pass `serve --config /etc/toolcall-proxy/routes.yaml`.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm
# The build stage compiles the hot path's C scan (proxy/chat/_sse_scan.c): the full image of the
# same Python and Debian release has the compiler the slim one lacks.
ARG BUILD_IMAGE=python:3.11-bookworm

# -- build: the project's wheel only (its dependencies come from the index in the final stage)
FROM ${BUILD_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY tools/backend ./tools/backend
COPY proxy ./proxy
# The release build: mypyc compiles setup.py's COMPILED modules (opt-in, as `make wheel` does).
# The scan is optional for a plain install (pure Python serves without it); the image insists
# on it and on the compiled cores.
RUN TOOLCALL_PROXY_COMPILE=1 python -m pip wheel --no-deps --wheel-dir /wheels . \
    && python -c "import glob, zipfile; \
names = zipfile.ZipFile(glob.glob('/wheels/toolcall_proxy-*.whl')[0]).namelist(); \
assert any('_sse_scan' in n for n in names), 'the C scan did not compile'; \
assert any('stream.cpython' in n for n in names), 'mypyc did not compile the cores'"

# -- runtime: a clean virtualenv with the wheel and its runtime dependencies, nothing else.
# The wheel is installed by its path, so a package of the same name on the index never wins;
# the base image's pip installs into the virtualenv, which gets no pip of its own.
FROM ${PYTHON_IMAGE} AS runtime
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    VIRTUAL_ENV=/opt/toolcall-proxy \
    PATH=/opt/toolcall-proxy/bin:$PATH
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    python -m venv --without-pip "$VIRTUAL_ENV" \
    && python -m pip --python "$VIRTUAL_ENV/bin/python" install /wheels/toolcall_proxy-*.whl \
    && groupadd --system --gid 10001 toolcall \
    && useradd --system --uid 10001 --gid toolcall --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin toolcall

# Listen on every interface inside the container; the rest is configured at run time.
# MALLOC_MMAP_THRESHOLD_: large transient buffers (long histories, huge chunks) go to mmap and
# back to the OS, so RSS stays flat under load (soak: +0.7% with it, +3.5-6% without).
ENV TOOLCALL_PROXY_HOST=0.0.0.0 \
    TOOLCALL_PROXY_PORT=8787 \
    TOOLCALL_PROXY_DRAIN_TIMEOUT=30 \
    MALLOC_MMAP_THRESHOLD_=131072
USER 10001:10001
EXPOSE 8787
HEALTHCHECK --interval=15s --timeout=3s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('TOOLCALL_PROXY_PORT', '8787') + '/healthz', timeout=2)"]
# SIGTERM starts the drain: readiness goes false, open streams get TOOLCALL_PROXY_DRAIN_TIMEOUT.
STOPSIGNAL SIGTERM
ENTRYPOINT ["toolcall-proxy"]
CMD ["serve"]
