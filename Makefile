# Two entry points (see README): `make run` starts a local cluster, `make test` runs every test.
# Each creates the virtualenv and installs what it needs on a fresh machine.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The browser tests drive Debian's Chromium with Playwright (no browser download).
CHROMIUM := /usr/lib/chromium/chromium
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: run test bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

# Options for the launcher: make run ARGS='--nsqd 3 --data-dir /tmp/nsq' (see python -m deploy.run_local --help)
ARGS :=

run: $(STAMP)
	$(BIN)/python -m deploy.run_local $(ARGS)

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

test: $(STAMP) $(CHROMIUM) $(NSQJS)
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python bench/side_by_side.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache artifacts
