# Two commands on a fresh machine:  `make demo`  and  `make test`.
# Both create .venv, install activis with everything it needs (torch pinned to the CPU build by
# constraints.txt; the JS bundle is built by the install), then run the demo or the whole test suite.

VENV   ?= .venv
PYTHON ?= python3
BIN     = $(VENV)/bin
STAMP   = $(VENV)/.activis-installed

.PHONY: setup demo test test-fast browser-deps node-deps lint bench

# each step says what it does: the install is quiet and takes minutes the first time
$(STAMP): pyproject.toml constraints.txt package.json | node-deps
	@echo "activis setup: creating the virtual environment $(VENV)…"
	$(PYTHON) -m venv $(VENV)
	@echo "activis setup: upgrading pip…"
	$(BIN)/pip install --quiet --upgrade pip
	@echo "activis setup: installing activis and its dependencies (PyTorch for the CPU, JupyterLab, the test tools)"
	@echo "               and building the JavaScript bundle with npm: a few minutes the first time…"
	$(BIN)/pip install --quiet -c constraints.txt -e ".[test]"
	touch $(STAMP)
	@echo "activis setup: done ($(VENV))."

setup: $(STAMP)

# Node.js and npm build the JS bundle during the install; Debian's when the machine has none.
node-deps:
	@command -v npm >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm; \
	  else echo "install Node.js and npm (sudo apt-get install nodejs npm)"; exit 1; fi; }

# Debian's Chromium for the real-browser tests (Playwright cannot download browsers here).
browser-deps:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; \
	  else echo "install Debian's chromium (sudo apt-get install chromium)"; exit 1; fi; }

demo: setup
	@echo "activis demo: trains the digits CNN once (about a minute), then opens the quickstart in JupyterLab…"
	$(BIN)/activis demo $(DEMO_ARGS)

test: setup browser-deps
	$(BIN)/ruff check .
	ACTIVIS_PYTHON=$(abspath $(BIN))/python npm run lint
	$(BIN)/pytest -ra $(PYTEST_ARGS)

test-fast: setup
	$(BIN)/pytest -ra -m "not browser" $(PYTEST_ARGS)

# Python and JavaScript alike: ruff; ESLint (js/, 120 columns, trait names the widgets sync: js/lint/traits.mjs)
# and TypeScript's check of the JSDoc types
lint: setup
	$(BIN)/ruff check .
	ACTIVIS_PYTHON=$(abspath $(BIN))/python npm run lint

bench: setup
	for b in benchmarks/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done
