# The README's commands. Each bootstraps what it needs on a fresh machine.
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: bootstrap test test-fast lint format up bench bench-archive bench-replay clean

bootstrap:
	@./scripts/bootstrap.sh

## make test: lint and type checks, then every test (unit and system) on a local stack
test: bootstrap lint
	$(BIN)/pytest $(PYTEST_ARGS)

## make test-fast: unit tests of pure logic only
test-fast: bootstrap
	$(BIN)/pytest libs/mwcore/tests $(PYTEST_ARGS)

## make lint: style, formatting, types, and the import contracts (pyproject.toml: the layers)
lint: bootstrap
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

format: bootstrap
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

## make up: the pipeline on the embedded local stack (Ctrl-C stops it)
up: bootstrap
	$(BIN)/mw up $(UP_ARGS)

bench: bootstrap
	$(BIN)/python bench/throughput.py

## make bench-archive: Spark's archive read vs a plain consumer; batch vs streaming windower
bench-archive: bootstrap
	$(BIN)/python bench/archive.py

## make bench-replay: `mw replay` over a loaded archive (progress lines, JSON summary last)
bench-replay: bootstrap
	$(BIN)/python bench/replay.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
