# The README's two promises: `make run` and `make test`, each setting up its own virtualenv.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: run test lint typecheck unit agents browser bench soak fuzz clean wheel wheel-test

$(BIN)/python:
	@echo "Creating $(VENV) and installing toolcall-proxy into it (the first time only)" >&2
	@$(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install -q --upgrade pip

# The C parts every install builds (seconds). The modules mypyc compiles (setup.py's COMPILED
# list, one quoted path a line) are compiled only when asked for: `make wheel` and the Docker
# image build with TOOLCALL_PROXY_COMPILE=1; `make run` and `make test` run them as Python.
COMPILED := $(shell sed -n 's/^    "\(proxy\/.*\.py\)",$$/\1/p' setup.py)
NATIVE := proxy/chat/_sse_scan.c proxy/upstream/_chunked.c
COMPILE := TOOLCALL_PROXY_COMPILE=1
# Each install builds its parts again; a compiled file left by an earlier compiled install
# must not stay behind (Python would import it before the edited source).
CLEAN_COMPILED := find proxy -name '*.so' -delete

# A first install says nothing unless it fails. setuptools reports how an editable install is
# wired as a warning ("Editable installation ..."), which pip prints on every install; it is
# information only, so it is filtered for the install commands alone.
QUIET_BUILD := PYTHONWARNINGS="ignore:Editable installation"

# Runtime dependencies only (what `make run` needs). A compiled install (`make bench`) is
# replaced by a plain one.
$(VENV)/.runtime: pyproject.toml setup.py $(NATIVE) | $(BIN)/python
	@$(CLEAN_COMPILED)
	@$(QUIET_BUILD) $(BIN)/python -m pip install -q -e .
	@rm -f $(VENV)/.bench
	@touch $@

# Runtime plus the dev extra (linters, test runners, client SDKs).
$(VENV)/.dev: pyproject.toml setup.py $(NATIVE) | $(BIN)/python
	@$(CLEAN_COMPILED)
	@$(QUIET_BUILD) $(BIN)/python -m pip install -q -e '.[dev]'
	@rm -f $(VENV)/.bench
	@touch $(VENV)/.runtime $@

# The server replaces the recipe's shell (exec), so Ctrl-C reaches it directly; it drains and
# exits 0, and make has nothing to report.
run: $(VENV)/.runtime
	@echo "toolcall-proxy: the command line is $(BIN)/toolcall-proxy (or 'source $(BIN)/activate'" \
		"to put it on PATH); Ctrl-C stops the server" >&2
	@exec $(BIN)/toolcall-proxy serve

# Style, then the layout's contract (pyproject's [tool.importlinter]: no surface imports another,
# the core and the surfaces import no shell and do no I/O) and the complexity limit (radon cc
# <= 15 per function), so neither is kept by habit alone.
lint: $(VENV)/.dev
	$(BIN)/ruff check proxy tests bench soak fuzz tools
	$(BIN)/ruff format --check proxy tests bench soak fuzz tools
	$(BIN)/lint-imports --no-cache
	$(BIN)/python tools/complexity.py proxy

typecheck: $(VENV)/.dev
	$(BIN)/mypy

# Node clients for tests/clients (pinned by the committed package-lock.json).
NODE_CLIENTS := tests/clients/node
$(NODE_CLIENTS)/node_modules/.installed: $(NODE_CLIENTS)/package.json $(NODE_CLIENTS)/package-lock.json
	cd $(NODE_CLIENTS) && npm ci --no-audit --no-fund
	touch $@

unit: $(VENV)/.dev $(NODE_CLIENTS)/node_modules/.installed
	$(BIN)/pytest --ignore=tests/agents --ignore=tests/wheel --ignore=tests/browser $(PYTEST_ARGS)

test: lint typecheck unit

# The inspector's page (SPEC §12) in a real browser (tests/browser): Playwright for Python (the
# browser extra, pinned) driving the system's Chromium, installed with apt when missing
# (Playwright's own browser downloads are not used). TOOLCALL_PROXY_SCREENSHOTS=docs refreshes
# the page's screenshots in docs/.
$(VENV)/.browser: pyproject.toml setup.py $(NATIVE) | $(BIN)/python
	@$(CLEAN_COMPILED)
	@$(QUIET_BUILD) $(BIN)/python -m pip install -q -e '.[dev,browser]'
	@rm -f $(VENV)/.bench
	@touch $(VENV)/.runtime $(VENV)/.dev $@

browser: $(VENV)/.browser
	@command -v chromium >/dev/null 2>&1 || (apt-get update && apt-get install -y chromium)
	$(BIN)/pytest tests/browser $(PYTEST_ARGS)

# Coding-agent CLIs for tests/agents (opencode, pi, qwen-code, Claude Code, Codex and the Node 22
# that qwen-code needs), pinned by the committed package-lock.json; about 1.7 GB.
AGENT_CLIS := tests/agents/node
$(AGENT_CLIS)/node_modules/.installed: $(AGENT_CLIS)/package.json $(AGENT_CLIS)/package-lock.json
	cd $(AGENT_CLIS) && npm ci --no-audit --no-fund
	touch $@

# Each agent through the proxy and straight to the simulator, every replay mode; prints the
# agent x mode x replay id table and writes it to tests/agents/results/latest.md.
agents: $(VENV)/.dev $(AGENT_CLIS)/node_modules/.installed
	$(BIN)/pytest tests/agents $(PYTEST_ARGS)

# The release build: the wheel with mypyc's compiled modules (what the Docker image installs).
wheel: dist/.built
dist/.built: pyproject.toml setup.py $(NATIVE) $(COMPILED) tools/backend/toolcall_build.py | $(BIN)/python
	@rm -rf dist
	$(COMPILE) $(BIN)/python -m pip wheel -q --no-deps --wheel-dir dist .
	@touch $@

# The compiled wheel installed in a virtualenv of its own (with the dev extra), and the
# end-to-end, core, surface and bridge tests run against it (tests/wheel checks every listed
# module arrived compiled; compiled code checks types at run time, so the build that ships is
# the build these suites hold to the contract): `--import-mode=append` and PYTHONSAFEPATH make
# `proxy` the installed wheel's, not the tree's.
WHEEL_VENV := .venv-wheel
# What `make run` does from a source tree is `make test`'s to prove, not the wheel's.
TREE_ONLY := tests/e2e/test_cli_serve.py::test_make_run_serves_the_builtin_provider \
	tests/e2e/test_first_hour.py::test_fresh_clone_make_run_is_quiet_serves_and_stops_cleanly_on_ctrl_c
wheel-test: dist/.built
	@rm -rf $(WHEEL_VENV)
	@$(PYTHON) -m venv $(WHEEL_VENV)
	@$(WHEEL_VENV)/bin/python -m pip install -q --upgrade pip
	$(WHEEL_VENV)/bin/python -m pip install -q "$$(ls dist/toolcall_proxy-*.whl)[dev]"
	PYTHONSAFEPATH=1 $(WHEEL_VENV)/bin/pytest --import-mode=append -p no:cacheprovider \
		$(foreach test,$(TREE_ONLY),--deselect $(test)) tests/wheel tests/e2e \
		tests/core tests/chat tests/anthropic tests/responses tests/bridge $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) $(WHEEL_VENV) dist .pytest_cache .mypy_cache .ruff_cache .hypothesis

# The benchmark: direct vs proxied, interleaved; a table on stdout, bench/results/latest.json.
# wrk drives the throughput phase and nginx is the reference proxy (both installed with apt
# when missing; without wrk an asyncio load generator stands in, without nginx its row says
# so); granian, the other ASGI server measured, comes with the bench extra.
# BENCH_ARGS: e.g. `--runs 3` (the median of three runs of the latency phase), `--quick`.
BENCH_ARGS ?= --runs 3
# Then instructions per 200-delta stream under callgrind (valgrind, installed with apt when
# missing): Chat Completions, Anthropic Messages and Responses through their own cores, and the
# two bridges beside Chat's exchange on the same upstream stream (text, then ending in a call).
# Then the capacity: concurrent streams paced like a model (30 deltas/s, a Kimi-id call at the
# end) on each API, stepped up on one proxy process, on two workers and on nginx (bench/capacity.py).
CAPACITY_ARGS ?=
# The bench measures what users run, the compiled build: it compiles in place (about three
# minutes on two cores), and the next `make run` or `make test` installs the plain tree again.
$(VENV)/.bench: pyproject.toml setup.py $(NATIVE) $(COMPILED) | $(BIN)/python
	@$(CLEAN_COMPILED)
	@$(QUIET_BUILD) $(COMPILE) $(BIN)/python -m pip install -q -e '.[dev,bench]'
	@rm -f $(VENV)/.runtime $(VENV)/.dev
	@touch $@

bench: $(VENV)/.bench
	@command -v wrk >/dev/null 2>&1 && command -v nginx >/dev/null 2>&1 \
		&& command -v valgrind >/dev/null 2>&1 \
		|| (apt-get update && apt-get install -y wrk nginx valgrind) \
		|| echo "wrk, nginx or valgrind could not be installed: see the table's notes"
	$(BIN)/python -m bench $(BENCH_ARGS)
	$(BIN)/python -m bench.anthropic_core
	$(BIN)/python -m bench.anthropic_core --call
	$(BIN)/python -m bench.responses_core
	$(BIN)/python -m bench.responses_core --call
	$(BIN)/python -m bench.bridge_core
	$(BIN)/python -m bench.bridge_core --call
	$(BIN)/python -m bench.capacity $(CAPACITY_ARGS)

# The soak: simulator and proxy as separate processes on loopback, a bounded mixed load of
# quirky and faulty streams (SOAK_SECONDS, default 120; SOAK_CONCURRENCY, default 200), every
# client result checked, proxy RSS and open fds compared before and after. Fails on a mismatch
# or on 10% growth.
SOAK_SECONDS ?= 120
SOAK_CONCURRENCY ?= 200
soak: $(VENV)/.dev
	SOAK_SECONDS=$(SOAK_SECONDS) SOAK_CONCURRENCY=$(SOAK_CONCURRENCY) $(BIN)/python -m soak

# Long coverage-guided fuzzing of the core (not part of `make test`): FUZZ_SECONDS, default 600.
FUZZ_SECONDS ?= 600
fuzz: $(VENV)/.dev
	$(BIN)/python -m pip install -q -r fuzz/requirements.txt
	mkdir -p fuzz/corpus
	$(BIN)/python fuzz/fuzz_stream.py fuzz/corpus -max_total_time=$(FUZZ_SECONDS) -timeout=30 -max_len=8192 -len_control=0
