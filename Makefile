# mongogate: `make run` serves on the embedded engine with demo data; `make test` runs the suite.
SHELL := /bin/bash
VENV  ?= .venv
PY    := $(VENV)/bin/python

# The embedded engine (mongoeco) needs Python >= 3.13: try python3.14, python3.13, then pyenv's.
FIND_PY = for c in python3.14 python3.13 "$$(pyenv prefix 3.13.0 2>/dev/null)/bin/python3" \
            "$$(ls -d $$HOME/.pyenv/versions/3.1[3-9]* 2>/dev/null | tail -1)/bin/python3"; do \
            if command -v "$$c" >/dev/null 2>&1 && "$$c" -c 'import sys; sys.exit(sys.version_info < (3, 13))' 2>/dev/null; then \
              echo "$$c"; exit 0; fi; done; exit 1

.PHONY: setup setup-run run test test-serial soak lint lock bench clean

# Installs come from the locks in requirements/ (exact versions with hashes; `make lock` writes them;
# docs/decisions/dependency-lock.md): `make run` needs only the server and the embedded engine
# (run.txt), everything else (tests, lint, the frameworks, benchmarks) installs test.txt. pip
# installs the locked uv (uv.txt), which installs the rest: 8x faster than pip on a cold cache.
RUN_LOCK  := requirements/run.txt
TEST_LOCK := requirements/test.txt
UV_LOCK   := requirements/uv.txt
UV        := UV_LINK_MODE=copy $(VENV)/bin/uv pip install --quiet --python $(PY)
INSTALL   = $(UV) --require-hashes --no-deps -r
# the package itself, from the clone, with the locked setuptools (no build isolation: nothing
# unlocked is fetched)
SELF      = $(UV) --no-deps --no-build-isolation -e .

setup: $(VENV)/.test-installed
setup-run: $(VENV)/.run-installed

$(VENV)/.uv-installed: $(UV_LOCK)
	@BASE=$$($(FIND_PY)) || { echo "error: mongogate's embedded engine needs Python >= 3.13;" \
	  "install python3.13 (or pyenv install 3.13) and retry" >&2; exit 1; }; \
	echo "using $$BASE ($$($$BASE --version))"; \
	test -x $(PY) || $$BASE -m venv $(VENV)
	$(PY) -m pip install -q --require-hashes --no-deps -r $(UV_LOCK)
	@touch $@

$(VENV)/.run-installed: $(VENV)/.uv-installed $(RUN_LOCK) pyproject.toml
	$(INSTALL) $(RUN_LOCK)
	$(SELF)
	@touch $@

$(VENV)/.test-installed: $(VENV)/.uv-installed $(TEST_LOCK) pyproject.toml
	$(INSTALL) $(TEST_LOCK)
	$(SELF)
	@touch $@ $(VENV)/.run-installed

run: setup-run
	$(VENV)/bin/mongogate serve --http --demo --config examples/mongogate.toml

# re-resolve the locks (UPGRADE=1: everything to the newest allowed; UPGRADE=name[,name]: those),
# print what moved, install it and run the suite (docs/development.md, "Bumping a dependency")
lock: setup
	$(PY) requirements/lock.py
	git diff --stat -- requirements/
	$(MAKE) test

# two pytest processes over the two halves of the suite at once (tests/shards.py says why)
test: setup
	$(PY) tests/shards.py

# the whole suite in one pytest process
test-serial: setup
	$(PY) -m pytest -q

# the stress and soak variants (200-trial and 16-thread races) that `make test` runs small
soak: setup
	$(PY) -m pytest -q -m soak

lint: setup
	$(VENV)/bin/ruff check src tests benchmarks examples requirements
	$(VENV)/bin/ruff format --check src tests benchmarks examples requirements
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	$(PY) tests/test_complexity.py

bench: setup
	$(PY) benchmarks/memory.py
	$(PY) benchmarks/policy.py
	$(PY) benchmarks/aggregate.py
	$(PY) benchmarks/query_overhead.py
	$(PY) benchmarks/scheduler.py
	$(PY) benchmarks/hostile.py
	$(PY) benchmarks/audit_sink.py
	$(PY) benchmarks/scale_out.py --record
	$(PY) benchmarks/recall.py
	$(PY) benchmarks/startup.py

clean:
	-test -x $(VENV)/bin/mongogate && $(VENV)/bin/mongogate engine stop --config examples/mongogate.toml
	rm -rf $(VENV) .mongogate examples/.mongogate build dist *.egg-info src/*.egg-info
