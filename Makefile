# Two entry points (see README): `make run` starts a local cluster, `make test` runs every test.
# Each creates the virtualenv and installs what it needs on a fresh machine: the package with its
# `history` extra (nsqadmin's stats history: PySpark, pyarrow) and, for `make test`, its `test` extra.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The browser tests drive Debian's Chromium with Playwright (no browser download).
CHROMIUM := /usr/lib/chromium/chromium
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: run test test-pythons bench clean java-runtime

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,history]'
	touch $(STAMP)

# Options for the launcher: make run ARGS='--nsqd 3 --data-dir /tmp/nsq' (see python -m deploy.run_local --help)
ARGS :=

run: $(STAMP) java-runtime
	$(BIN)/python -m deploy.run_local $(ARGS)

# The stats history's rollup job runs PySpark, which needs a Java runtime: Debian's
# default-jre-headless is installed when there is none. Where that cannot be done, `make run`
# goes on and nsqadmin runs with the history off, saying why (nsqadmin/history/availability.py).
java-runtime:
	@if [ -z "$$JAVA_HOME" ] && ! command -v java >/dev/null; then \
	  if ! command -v apt-get >/dev/null; then \
	    echo "no Java runtime and no apt-get: nsqadmin will run with the stats history off (install Java or set JAVA_HOME)"; \
	  elif ! { $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq default-jre-headless >/dev/null || \
	           { $(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq default-jre-headless >/dev/null; }; }; then \
	    echo "could not install default-jre-headless: nsqadmin will run with the stats history off"; \
	  fi; \
	fi

$(CHROMIUM):
	@command -v apt-get >/dev/null || { echo "install Chromium at $(CHROMIUM) (Debian package chromium)"; exit 1; }
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null || \
	  { $(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

# nsqjs, NSQ's Node.js client, is one of the independent clients the tests use (tests/nsqjs/).
NSQJS := tests/nsqjs/node_modules/nsqjs/package.json

$(NSQJS): tests/nsqjs/package-lock.json
	@command -v npm >/dev/null || { command -v apt-get >/dev/null || { echo "install Node.js and npm (Debian packages nodejs npm)"; exit 1; }; \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null || \
	  { $(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null; }; }
	cd tests/nsqjs && npm ci --no-audit --no-fund --loglevel=error
	touch $(NSQJS)

# Two pytest workers, a test module each at a time (its module fixtures and its fixed names stay in
# one process), then the browser tests alone: Playwright's sync API keeps an asyncio loop running in
# its worker's main thread, which the asyncio-based clients (pynsq, Tornado) of other tests cannot share.
test: $(STAMP) $(CHROMIUM) $(NSQJS) java-runtime
	$(BIN)/python -m pytest -q -n 2 --dist loadfile -m "not browser" --durations=20
	$(BIN)/python -m pytest -q -m browser --durations=5

# The nsqd, common and client tests on every other supported Python found (pyenv's or on PATH),
# each in a virtualenv of its own (.venv-3.12, .venv-3.13); a version not found is skipped, saying so.
OTHER_PYTHONS := 3.12 3.13

test-pythons:
	@.ci/test_other_pythons $(OTHER_PYTHONS)

bench: $(STAMP)
	$(BIN)/python bench/side_by_side.py

clean:
	rm -rf $(VENV) .venv-* build *.egg-info .pytest_cache artifacts
