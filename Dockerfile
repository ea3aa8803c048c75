# Two targets: `service`, the image of every streaming Zeitgeist service (docker-compose.yml picks the command
# `python -m services.<name>`), and `batch` (below). The Python packages come from a wheelhouse built on the
# host (`make images` writes build/wheels: mwcore, its native core, and every dependency), so the build
# reaches no package index; PYTHON_IMAGE is the base (the public python:3.11-slim, or the local stand-in
# `make images` builds from Debian's packages where no registry is reachable).
#   make images       # or: docker build --target service --build-arg PYTHON_IMAGE=python:3.11-slim -t mwcore/zeitgeist .
# The `batch` target adds Java and PySpark for the model job (services.model_trainer; `make images-batch`
# puts PySpark's wheels in the wheelhouse too).
ARG PYTHON_IMAGE=python:3.11-slim
FROM ${PYTHON_IMAGE} AS service

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
# The packages first: their layer is rebuilt only when the wheels change.
COPY build/wheels /tmp/wheels
COPY services/requirements.txt /app/services/requirements.txt
RUN pip install --no-index --find-links /tmp/wheels mwcore -r /app/services/requirements.txt \
    && (ls /tmp/wheels/mwcore_native-*.whl >/dev/null 2>&1 && pip install --no-index --find-links /tmp/wheels mwcore_native || true) \
    && rm -rf /tmp/wheels
COPY schemas /app/schemas
COPY services /app/services

# Run as an unprivileged user; /data holds the query logs (a volume in compose).
RUN useradd --uid 10001 --create-home mw && mkdir -p /data/querylogs && chown -R mw /data
USER mw

ENV PYTHONPATH=/app \
    MW_SCHEMAS_DIR=/app/schemas \
    MW_METRICS_PORT=9108
EXPOSE 9108
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
    CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:9108/healthz', timeout=3)"
CMD ["python", "-m", "services.windower"]

FROM service AS batch
USER root
COPY build/wheels /tmp/wheels
RUN apt-get update && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/* \
    && pip install --no-index --find-links /tmp/wheels "mwcore[spark]" && rm -rf /tmp/wheels
USER mw
ENV PYSPARK_PYTHON=python
HEALTHCHECK NONE
CMD ["python", "-m", "services.model_trainer"]
