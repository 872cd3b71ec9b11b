# The two commands of the README: `make run` and `make test`. Each sets up what is missing first.
PY := .venv/bin/python
PYTEST_ARGS ?=

.PHONY: setup run test test-all bench clean

setup:
	@bash scripts/setup.sh

run: setup
	$(PY) -m agent run

test: setup
	$(PY) -m pytest -m "not slow" $(PYTEST_ARGS)

test-all: setup
	$(PY) -m pytest $(PYTEST_ARGS)

bench: setup
	$(PY) bench/loop_overhead.py

clean:
	rm -rf .venv runs bench/results .pytest_cache
