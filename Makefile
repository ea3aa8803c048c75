# The README's commands. Each bootstraps what it needs on a fresh machine.
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: bootstrap test test-fast lint format docs docs-check up bench bench-archive bench-replay compose-env wheel images images-batch wheelhouse clean

bootstrap:
	@./scripts/bootstrap.sh

## make test: lint and type checks, the native core's Rust unit tests (where cargo is), then
## every test (unit and system) on a local stack
test: bootstrap lint
	@# in release, beside maturin's build (librdkafka is not built again); the test binary
	@# embeds the venv's Python, linked to its shared libpython (LIBDIR)
	@if command -v cargo >/dev/null 2>&1; then \
	  echo "cargo test --release (libs/mwcore/native)"; \
	  python=$(abspath $(BIN))/python && \
	  libdir=$$($$python -c 'import sysconfig; print(sysconfig.get_config_var("LIBDIR"))') && \
	  cd libs/mwcore/native && \
	  CARGO_TARGET_DIR=$${CARGO_TARGET_DIR:-$$HOME/.cache/mwcore/cargo-target} PYO3_PYTHON=$$python \
	  LD_LIBRARY_PATH=$$libdir$${LD_LIBRARY_PATH:+:$$LD_LIBRARY_PATH} cargo test --release --quiet; \
	fi
	$(BIN)/pytest $(PYTEST_ARGS)

## make test-fast: unit tests of pure logic only
test-fast: bootstrap
	$(BIN)/pytest libs/mwcore/tests $(PYTEST_ARGS)

## make lint: style, formatting, types, the import contracts (pyproject.toml: the layers), the native core's
## stub against the built module (mypy.stubtest), and rustfmt and clippy on the native core
lint: bootstrap
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	@if $(BIN)/python -c "import mwcore_native" 2>/dev/null; then \
	  echo "mypy.stubtest mwcore_native (libs/mwcore/native/mwcore_native.pyi)"; \
	  MYPYPATH=libs/mwcore/native:libs/mwcore/src $(BIN)/python -m mypy.stubtest mwcore_native \
	    --mypy-config-file pyproject.toml --allowlist libs/mwcore/native/stubtest-allowlist.txt; \
	fi
	@if command -v cargo >/dev/null 2>&1; then \
	  echo "cargo fmt --check, cargo clippy -D warnings (libs/mwcore/native)"; \
	  cd libs/mwcore/native && cargo fmt --check && \
	  CARGO_TARGET_DIR=$${CARGO_TARGET_DIR:-$$HOME/.cache/mwcore/cargo-target} PYO3_PYTHON=$(abspath $(BIN))/python \
	  cargo clippy --release --quiet --all-targets -- -D warnings; \
	fi

format: bootstrap
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

## make docs: the user's guide (mkdocs.yml, docs/) into build/site, strictly (make test
## builds it too: tests/test_docs_site.py)
docs: bootstrap
	$(BIN)/mkdocs build --strict

## make docs-check: the guide built, its home page and API reference screenshot by headless
## Chromium (Debian's, installed if missing) into build/screenshots, each checked rendered
docs-check: bootstrap
	$(BIN)/python scripts/docs_check.py

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

## make compose-env: .env for docker compose, with a fresh random Redis password and pipeline secret (once)
compose-env:
	@if [ -e .env ]; then echo ".env exists: keeping it"; else \
	  umask 077; python3 -c 'import secrets; print("ZG_REDIS_PASSWORD=" + secrets.token_urlsafe(24)); print("ZG_ID_SECRET=" + secrets.token_urlsafe(32))' > .env; \
	  echo "wrote .env (mode 0600): ZG_REDIS_PASSWORD, ZG_ID_SECRET"; fi

## make wheel: into dist/, a wheel of mwcore and one of its native core (abi3: any CPython 3.11+ on this platform; installing either needs no Rust)
wheel: bootstrap
	@command -v cargo >/dev/null 2>&1 || { echo "make wheel: the native core needs Rust's cargo (https://rustup.rs)"; exit 2; }
	rm -rf dist && mkdir -p dist
	$(BIN)/pip wheel -q --no-deps -w dist libs/mwcore && rm -rf libs/mwcore/build
	@# maturin renames the libraries it bundles (OpenSSL) in the built library itself: the
	@# wheel's build has its own target, and is linked again each time (a second build
	@# would find them missing)
	target=$${CARGO_TARGET_DIR:-$$HOME/.cache/mwcore/cargo-target}/wheel && \
	  rm -f $$target/maturin/libmwcore_native.so $$target/release/deps/libmwcore_native.so && \
	  CARGO_TARGET_DIR=$$target PATH=$(abspath $(BIN)):$$PATH \
	  $(BIN)/maturin build --release --quiet -o dist -m libs/mwcore/native/Cargo.toml
	@ls dist

## make images: the compose file's images built here from packages (Debian base by debootstrap, local Python,
## Redis and Kafka stand-ins, the services' image from wheels built on the host); starts dockerd if none answers
images: bootstrap
	$(BIN)/python -m testbed.images

## make wheelhouse: only build/wheels, for `docker compose up --build` on the public python:3.11-slim
wheelhouse: bootstrap
	$(BIN)/python -m testbed.images --wheelhouse $${ZG_PYTHON_IMAGE:-python:3.11-slim}

## make images-batch: the same, and the model trainer's image (PySpark, Java)
images-batch: bootstrap
	$(BIN)/python -m testbed.images --batch

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
