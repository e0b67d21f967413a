# mongogate: `make run` serves on the embedded engine with demo data; `make test` runs the suite.
SHELL := /bin/bash
VENV  ?= .venv
PY    := $(VENV)/bin/python
STAMP := $(VENV)/.installed

# The embedded engine (mongoeco) needs Python >= 3.13: try python3.14, python3.13, then pyenv's.
FIND_PY = for c in python3.14 python3.13 "$$(pyenv prefix 3.13.0 2>/dev/null)/bin/python3" \
            "$$(ls -d $$HOME/.pyenv/versions/3.1[3-9]* 2>/dev/null | tail -1)/bin/python3"; do \
            if command -v "$$c" >/dev/null 2>&1 && "$$c" -c 'import sys; sys.exit(sys.version_info < (3, 13))' 2>/dev/null; then \
              echo "$$c"; exit 0; fi; done; exit 1

.PHONY: setup run test test-serial soak lint bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	@BASE=$$($(FIND_PY)) || { echo "error: mongogate's embedded engine needs Python >= 3.13;" \
	  "install python3.13 (or pyenv install 3.13) and retry" >&2; exit 1; }; \
	echo "using $$BASE ($$($$BASE --version))"; \
	test -x $(PY) || $$BASE -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[embedded,dev,frameworks,langgraph,openai-agents]'
	@touch $(STAMP)

run: setup
	$(VENV)/bin/mongogate serve --http --demo --config examples/mongogate.toml

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
	$(VENV)/bin/ruff check src tests benchmarks examples
	$(VENV)/bin/ruff format --check src tests benchmarks examples
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
